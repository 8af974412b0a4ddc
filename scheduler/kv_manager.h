// KvManager: the block table of every request on one KvBlockPool. A request's table covers the
// positions it has computed or is about to compute; its leading full blocks may be shared with
// other requests whose prompts begin with the same tokens (the system prompt and chat template up
// to the audio), found by chained content hash and reference-counted in the pool.
// Owned by the Scheduler; the engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/model/step_plan.h"
#include "scheduler/kv_block_pool.h"
#include "scheduler/request.h"

namespace vv {

class KvManager {
 public:
  KvManager(std::int64_t num_blocks, int block_size) : pool_(num_blocks, block_size) {}

  // Starts the table of `id` (which must have none) from the cached full blocks of
  // tokens[0, shareable) and returns how many positions they cover (a multiple of the block size).
  std::int64_t match_prefix(RequestId id, std::span<const TokenId> tokens, std::int64_t shareable);
  // Grows the table of `id` to cover `positions`; false (table unchanged) when the pool runs dry.
  bool grow(RequestId id, std::int64_t positions);
  // Blocks `grow(id, positions)` would still need.
  std::int64_t blocks_needed(RequestId id, std::int64_t positions) const;
  // Positions [0, computed) of `id` are in the cache: registers its newly completed full blocks
  // that lie inside tokens[0, shareable) so later requests can share them.
  void commit(RequestId id, std::span<const TokenId> tokens, std::int64_t computed, std::int64_t shareable);
  // Gives every block of `id` back (the tail first, so shared prefix blocks are evicted last).
  void release(RequestId id);

  const std::vector<BlockId>& table(RequestId id) const;
  bool has(RequestId id) const { return tables_.count(id) != 0; }
  const KvBlockPool& pool() const { return pool_; }
  // Every table, for invariant checks.
  std::vector<std::pair<RequestId, const std::vector<BlockId>*>> tables() const;

  std::int64_t prefix_hit_blocks() const { return hit_blocks_; }      // blocks found shared
  std::int64_t prefix_query_blocks() const { return query_blocks_; }  // shareable blocks looked up

 private:
  struct Table {
    std::vector<BlockId> blocks;
    std::vector<std::uint64_t> hashes;  // chained hash of each leading block registered/matched
  };
  KvBlockPool pool_;
  std::unordered_map<RequestId, Table> tables_;
  std::int64_t hit_blocks_ = 0, query_blocks_ = 0;
};

}  // namespace vv
