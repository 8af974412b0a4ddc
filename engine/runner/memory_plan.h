// MemoryPlan: what a Runner will hold on one device, worked out from the checkpoint's shapes before
// the decoder is bound, so that a memory cap (--gpu-memory) is honoured by the plan itself: the
// device's memory already in use (the CUDA context), the encoders (measured once bound), the
// decoder's resident weights, the two streaming slots, its workspace, a reserve for the backend's
// own scratch, and the KV pool, which takes what remains. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/weights.h"
#include "kernels/backend.h"

namespace vv {

// Device bytes of a decoder's parts as Qwen2Decoder binds them (each tensor on a 256-byte boundary;
// with a granule, allocations of 1 MiB and more rounded up to it: CUDA hands those out in 2 MiB pages).
struct DecoderBytes {
  size_t embed = 0;  // the embedding table (where the range starts at layer 0)
  size_t head = 0;   // final norm + LM head (where the range ends the model; the table again when tied)
  std::vector<size_t> layers;  // the range's layers, in order
  size_t workspace = 0;        // activations and row metadata for max_rows rows, max_seqs sequences
};
DecoderBytes decoder_bytes(const DecoderSpec& spec, const DecoderWeights& w, int max_rows, int max_seqs,
                           int max_blocks_per_seq, int layer_begin, int layer_end, size_t granule = 0);

// Device bytes of the speech embedder's weights (both encoders and connectors), estimated from the
// checkpoint before binding: matrices as stored, vectors as F32. For splitting layers by budget.
size_t speech_bytes(const ModelWeights& w);

struct MemoryPlanInput {
  size_t cap = 0;       // bytes; 0 = no cap
  size_t in_use = 0;    // device memory in use before the runner binds anything (context, others)
  size_t encoders = 0;  // bytes the speech embedder holds (0 on shards after the first)
  DecoderBytes decoder;
  size_t scratch = 0;  // reserve for the backend's own workspaces (cuBLASLt, GEMM operands, attention)
  size_t kv_per_position = 0;    // KvCache::bytes_per_position for the range's layers
  int64_t kv_positions = 0;      // wanted
  int64_t min_kv_positions = 0;  // the least the pool may shrink to
  int block_size = 16;
  int gpu_layers = -1;  // resident layers of the range; -1 = as many as the cap allows
};

struct MemoryPlan {
  int resident_layers = 0;   // the range's first resident_layers layers stay; the rest stream
  int64_t kv_positions = 0;  // whole blocks
  size_t slot_bytes = 0;     // one streaming slot (two are allocated when two or more layers stream)
  size_t total = 0;          // everything counted, in_use included
  std::string summary;       // "context 0.52 GiB + encoders ... = 7.91 GiB of the 8.00 GiB cap"
};

// Fails (kResourceExhausted) naming the cap and the least it needs when even the smallest plan
// (the fewest resident layers allowed, min_kv_positions) does not fit.
Result<MemoryPlan> plan_memory(const MemoryPlanInput& in);

// "7.50 GiB" (from 1 GiB on), "12.3 MiB" below
std::string gib(size_t bytes);
// Parses a --gpu-memory value: "18GiB", "18G", "18" (GiB), "18GB" (10^9), "512MiB", "80%" of
// total_bytes (needs total_bytes > 0). Returns bytes.
Result<size_t> parse_memory_size(const std::string& text, size_t total_bytes = 0);

}  // namespace vv
