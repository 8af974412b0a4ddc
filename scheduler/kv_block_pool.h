// KvBlockPool: the block ids of one device's KV pool (no memory here: the Runner's KvCache holds
// the bytes, indexed by these ids), with a reference count per block, a free list and a table of
// full prompt blocks by content hash so that identical prompt prefixes are computed once.
// A freed block keeps its hash (and stays findable) until it is handed out again: the free list is
// least-recently-freed first, so the blocks freed last are evicted last. Owned by the Scheduler;
// the engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/model/step_plan.h"

namespace vv {

// Chained content hash of one full block: the hash of the previous block of the same prompt (0 for
// the first) and the block's token ids.
std::uint64_t kv_block_hash(std::uint64_t previous, std::span<const TokenId> tokens);

class KvBlockPool {
 public:
  KvBlockPool(std::int64_t num_blocks, int block_size);

  // A free block with reference count 1, or nullopt when every block is in use. A cached block
  // handed out loses its hash.
  std::optional<BlockId> allocate();
  // One more user of a block (a shared prefix block); a cached free block leaves the free list.
  void ref(BlockId id);
  // One user fewer; at zero the block returns to the free list (keeping its hash).
  void unref(BlockId id);

  // The block holding exactly `tokens` after a prefix with hash `previous`, if one is cached
  // (in use or free). The tokens are compared, so a hash collision never shares wrong rows.
  std::optional<BlockId> lookup(std::uint64_t hash, std::span<const TokenId> tokens) const;
  // Records that block `id` (in use, fully computed) holds `tokens` under `hash`. A no-op when
  // another block already holds that content or `id` already has a hash.
  void set_hash(BlockId id, std::uint64_t hash, std::span<const TokenId> tokens);

  std::int64_t num_blocks() const { return static_cast<std::int64_t>(refs_.size()); }
  int block_size() const { return block_size_; }
  std::int64_t free_blocks() const { return free_count_; }
  std::int64_t used_blocks() const { return num_blocks() - free_count_; }
  std::int64_t cached_blocks() const { return static_cast<std::int64_t>(by_hash_.size()); }
  std::int32_t refcount(BlockId id) const { return refs_[static_cast<std::size_t>(id)]; }
  bool has_hash(BlockId id) const { return hashed_[static_cast<std::size_t>(id)]; }

 private:
  void unlink(BlockId id);     // out of the free list
  void push_back(BlockId id);  // to the free list's tail
  void drop_hash(BlockId id);

  int block_size_;
  std::vector<std::int32_t> refs_;
  // The free list: an intrusive doubly linked list over block ids (-1 = none), head = next out.
  std::vector<BlockId> prev_, next_;
  BlockId head_ = -1, tail_ = -1;
  std::int64_t free_count_ = 0;
  // Prefix cache: content hash → block, and per block its hash and tokens (for the comparison).
  std::unordered_map<std::uint64_t, BlockId> by_hash_;
  std::vector<std::uint64_t> hash_;
  std::vector<bool> hashed_;
  std::vector<TokenId> tokens_;  // block_size ids per block
};

}  // namespace vv
