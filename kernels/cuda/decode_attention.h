// Decode attention on the tensor cores (kernels/cuda/decode_ops.cu): which calls it takes. No CUDA
// headers here, so the GPU tests can ask whether their shapes reach the kernel.
#pragma once

namespace vv::cuda {

// Keys per unit (one warp) of the tensor-core decode attention. Fixed (up to 16,384 keys of table
// width; longer tables get wider units, see plan_mma_decode_attention), so the arithmetic of a row
// depends on its own length only, never on the other rows of the step.
constexpr int kMmaDecodeChunk = 64;
// Keys per unit of the default form, whose units are a block's work (MmaDecodeConfig::share): one
// unit per (row, kv head) up to 512 positions, the engine's usual context.
constexpr int kMmaDecodeShareChunk = 512;
// The fewest (row, kv head) pairs a step needs for the shared units by default: 64 rows at the 7B's 4
// kv heads, the smallest step where they were measured faster (MmaDecodeConfig::share_min_pairs).
constexpr int kMmaDecodeShareMinPairs = 256;

// Shapes the tensor-core decode attention covers (bf16 mode, a bf16 or f16 cache with 16-byte
// aligned rows is checked by the backend): head_dim 64 or 128 and a GQA group of at most 8 query
// heads (the 16 rows of an mma tile hold the group, zero-padded).
inline bool mma_decode_applies(int heads, int kv_heads, int head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0 || (head_dim != 64 && head_dim != 128)) return false;
  const int G = heads / kv_heads;
  return G >= 1 && G <= 8;
}

// Which tensor-core decode kernel runs, and its shape (decode_ops.cu). `stream` (the default): each
// warp streams its K and V through a ring of shared-memory stages (cp.async,
// mma_decode_stream_kernel); on the H200 at the 7B shape it takes half the register kernel's time
// at 1-128 rows (kernels/cuda/NOTES.md, "Session 6"), and 2 warps per block beat 4 at 64 and 128
// rows. Otherwise the first kernel (mma_decode_kernel), which loads one 16-key step at a time into
// registers. Every setting keeps a row's arithmetic independent of the other rows; the kernel and
// the chunk change a row's bits (the mma's k order, the units), the stages do not, and the warps only
// with `share`.
struct MmaDecodeConfig {
  bool stream = true;
  int stages = 2;               // 16-key stages in flight per warp: 2 or 4
  int warps = 2;                // warps per block of the stream kernel: 1, 2 or 4
  int chunk = kMmaDecodeShareChunk;  // keys per unit: 64, 128, 256, 512 or 1024
  // heads (stream kernel, kv_heads ≤ 4): a block's warps take the kv heads of the same keys (4 warps:
  // 4 / kv_heads units × every kv head of a row), so that the block reads whole cache rows (all heads of
  // a slot, contiguous) together, instead of one head's 2·D bytes of each row. The same bits.
  bool heads = false;
  // share (stream kernel): a unit is a block's work, not a warp's: warp w takes the unit's 16-key
  // steps w, w + warps, w + 2·warps, ..., and the warps' partial results are merged in shared memory
  // in warp order before the unit's result goes on as one warp's does. With units as long as the
  // context (512 or 1,024 keys), a 64-row step at a few hundred positions has one unit per (row, kv
  // head): no partials in global memory, no fence, atomic or second merge. Changes a row's bits (the
  // order of its keys' sums), as the chunk does; not with heads. The default since session 20: 2 warps
  // and 512-key units against 2 warps of 64-key units, whole engine steps (engine_loop_bench, 30 s of
  // audio, 256 tokens, H100, 3 interleaved pairs): 8,835 against 8,635 tok/s at 64 requests, 15,332
  // against 15,113 at 128; H200: 10,869 against 10,869, 19,487 against 19,170 (NOTES "Session 20").
  bool share = true;
  // share_min_pairs (with share; 0: none): a step with fewer (row, kv head) pairs than this runs a unit a
  // warp of kMmaDecodeChunk keys instead (the form of every step before session 20), where the shared
  // units would leave most of the GPU idle (2-32 rows at a few hundred positions: 8-128 pairs, 1-2
  // units each) and were not measured. Then a row's bits depend on the step's row count, so not in
  // deterministic mode (plan_mma_decode_attention's row_invariant); the default mode is not batch
  // invariant anyway (one-row steps take the SIMT kernel).
  int share_min_pairs = kMmaDecodeShareMinPairs;
};
// Taken from the environment at the first use (benchmarks, A/B runs): VV_CUDA_MMA_DECODE=stream|regs,
// VV_CUDA_MMA_DECODE_STAGES, VV_CUDA_MMA_DECODE_WARPS, VV_CUDA_MMA_DECODE_CHUNK,
// VV_CUDA_MMA_DECODE_HEADS=1, VV_CUDA_MMA_DECODE_SHARE=0 (a unit a warp, of kMmaDecodeChunk keys unless
// VV_CUDA_MMA_DECODE_CHUNK says otherwise), VV_CUDA_MMA_DECODE_SHARE_MIN_PAIRS=N (0..65,536; 0: shared units
// at every row count); values outside the lists above are ignored. Every launch
// (and plan) uses the current setting; the setter (tests) is not synchronised with launches on other threads.
MmaDecodeConfig mma_decode_config();
void set_mma_decode_config(const MmaDecodeConfig& c);
// The configuration those variables give now (the defaults where unset; the process-wide one above is
// read once), and whether any of them is set: a CUDA backend created while one is set keeps this
// configuration for its life (so that two backends of one process can differ: cuda_decode_bench --ab);
// the others follow the process-wide one.
MmaDecodeConfig mma_decode_config_from_env();
bool mma_decode_env_set();

}  // namespace vv::cuda
