#include "scheduler/kv_block_pool.h"

#include <algorithm>
#include <cassert>

namespace vv {

std::uint64_t kv_block_hash(std::uint64_t previous, std::span<const TokenId> tokens) {
  // FNV-1a over the previous hash and the ids, then a splitmix finaliser to spread the bits.
  std::uint64_t h = 0xcbf29ce484222325ull ^ previous;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  };
  mix(previous);
  for (TokenId t : tokens) mix(static_cast<std::uint32_t>(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

KvBlockPool::KvBlockPool(std::int64_t num_blocks, int block_size)
    : block_size_(block_size),
      refs_(static_cast<std::size_t>(num_blocks), 0),
      prev_(static_cast<std::size_t>(num_blocks), -1),
      next_(static_cast<std::size_t>(num_blocks), -1),
      hash_(static_cast<std::size_t>(num_blocks), 0),
      hashed_(static_cast<std::size_t>(num_blocks), false),
      tokens_(static_cast<std::size_t>(num_blocks) * static_cast<std::size_t>(block_size), 0) {
  // Lowest ids first, like KvCache, so a fresh pool hands out 0, 1, 2, ...
  for (BlockId b = 0; b < static_cast<BlockId>(num_blocks); ++b) push_back(b);
}

void KvBlockPool::unlink(BlockId id) {
  const auto i = static_cast<std::size_t>(id);
  if (prev_[i] >= 0)
    next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  --free_count_;
}

void KvBlockPool::push_back(BlockId id) {
  const auto i = static_cast<std::size_t>(id);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0)
    next_[static_cast<std::size_t>(tail_)] = id;
  else
    head_ = id;
  tail_ = id;
  ++free_count_;
}

void KvBlockPool::drop_hash(BlockId id) {
  const auto i = static_cast<std::size_t>(id);
  if (!hashed_[i]) return;
  auto it = by_hash_.find(hash_[i]);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  hashed_[i] = false;
}

std::optional<BlockId> KvBlockPool::allocate() {
  if (head_ < 0) return std::nullopt;
  const BlockId id = head_;
  unlink(id);
  drop_hash(id);
  refs_[static_cast<std::size_t>(id)] = 1;
  return id;
}

void KvBlockPool::ref(BlockId id) {
  auto& r = refs_[static_cast<std::size_t>(id)];
  if (r == 0) unlink(id);
  ++r;
}

void KvBlockPool::unref(BlockId id) {
  auto& r = refs_[static_cast<std::size_t>(id)];
  assert(r > 0);
  if (r <= 0) return;
  if (--r == 0) push_back(id);
}

std::optional<BlockId> KvBlockPool::lookup(std::uint64_t hash, std::span<const TokenId> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || tokens.size() != static_cast<std::size_t>(block_size_)) return std::nullopt;
  const auto begin = tokens_.begin() + static_cast<std::ptrdiff_t>(it->second) * block_size_;
  if (!std::equal(tokens.begin(), tokens.end(), begin)) return std::nullopt;
  return it->second;
}

void KvBlockPool::set_hash(BlockId id, std::uint64_t hash, std::span<const TokenId> tokens) {
  const auto i = static_cast<std::size_t>(id);
  if (hashed_[i] || tokens.size() != static_cast<std::size_t>(block_size_) || by_hash_.count(hash)) return;
  by_hash_.emplace(hash, id);
  hash_[i] = hash;
  hashed_[i] = true;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(i) * block_size_);
}

}  // namespace vv
