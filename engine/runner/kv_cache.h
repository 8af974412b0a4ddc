// KvCache: the paged KV memory of one device — one pool of blocks of `block_size` positions for
// every decoder layer (K and V; F32, or BF16/F16 to halve it), sized once at start — and a free list of block
// ids that hands out and takes back blocks for sequences. Owned by a Runner; the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/model/device_tensor.h"
#include "engine/model/step_plan.h"
#include "kernels/backend.h"

namespace vv {

class KvCache {
 public:
  // dtype: kF32 (exact; the default), or kBF16/kF16, which round every cached key and value
  // (an opt-in that changes the logits at the 1e-3 level and halves the pool).
  // Layer shards: only layers [layer_begin, layer_end) get memory (layer_end 0 = through the last);
  // the view still lists every layer, the others empty.
  static Result<std::unique_ptr<KvCache>> create(Backend& be, const DecoderSpec& spec, int64_t num_blocks,
                                                 int block_size = 16, DType dtype = DType::kF32,
                                                 int layer_begin = 0, int layer_end = 0);
  // Bytes one position takes in a pool of `layers` layers (K and V).
  static size_t bytes_per_position(const DecoderSpec& spec, DType dtype, int layers);

  KvView& view() { return view_; }
  int block_size() const { return view_.block_size; }
  // The blocks a scheduler may hand out: ids 0 .. num_blocks() − 1 (the view's pool may hold one
  // more, set aside below).
  int64_t num_blocks() const { return usable_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  size_t bytes() const { return pool_.bytes(); }

  // Grows `table` (a sequence's block table) until it covers `positions` positions; fails with
  // resource exhaustion, leaving the table as it was, when the pool runs dry.
  Status reserve(std::vector<BlockId>& table, int64_t positions);
  // Returns every block of `table` to the pool and empties it.
  void release(std::vector<BlockId>& table);

  // Takes the highest block id out of the pool for good (before any block is handed out) and
  // returns it: the block that padding rows of a step write and read (Runner, RunnerOptions::
  // decode_pad). num_blocks() no longer counts it; the view still does, so a step may name it.
  // −1 when blocks were handed out already or the pool has a single block.
  BlockId set_aside_last_block();
  BlockId set_aside() const { return set_aside_; }

 private:
  KvCache() = default;
  Buffer pool_;
  KvView view_;
  std::vector<BlockId> free_;  // a stack: the lowest ids are handed out first
  int64_t usable_ = 0;
  BlockId set_aside_ = -1;
};

}  // namespace vv
