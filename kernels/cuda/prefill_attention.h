// Prefill attention on the tensor cores (kernels/cuda/prefill_attention.cu): which calls it takes.
// No CUDA headers here, so the GPU tests can ask whether their shapes reach the kernel.
#pragma once

#include <cstdint>

namespace vv::cuda {

// Query vectors per block of the flash kernel: (row, query head of the GQA group) pairs, 16 per warp.
constexpr int kFlashQueryVectors = 64;

// The flash kernel's block forms: kNarrow 64 query vectors (4 warps of 16), kWide 128 (8 warps of 16
// sharing each K/V tile), kTwoTiles 128 (4 warps of 32: each K/V fragment read from shared memory
// feeds two mmas, softmax steps of 32 keys), kWgmma 128 (two warpgroups whose scores come from
// wgmma, sm_90 only: the caller passes it only on such a device), kWgmmaPipelined (the same with tile
// t + 1's score wgmmas in flight during tile t's softmax and P·V, three stages), kWgmmaFull (that with
// P·V on wgmma too: P from registers, V swizzled in shared memory), kWgmmaLean (kWgmmaFull with fewer
// instructions a tile: the block size divided by multiply and shift, 2^x from one ex2.approx.ftz, no
// causal mask on tiles before the block's first query). A row's bits depend on the
// form (softmax steps, the scores' summation order), never on the rows it shares a call with. The 128-vector
// forms need a GQA group of at least 2 heads (a block's rows, 128 / G, are tracked in a 64-bit mask); others
// run kNarrow.
enum class FlashForm { kNarrow, kWide, kTwoTiles, kWgmma, kWgmmaPipelined, kWgmmaFull, kWgmmaLean };
inline FlashForm flash_form_taken(FlashForm form, int heads, int kv_heads) {
  return form != FlashForm::kNarrow && heads / kv_heads >= 2 ? form : FlashForm::kNarrow;
}

// Whether a form (as taken) can apply rope to q as it loads it (flash_prefill_attention's rope_freq):
// the wgmma forms over a bf16 cache.
inline bool flash_form_ropes(FlashForm taken, bool bf16_cache) {
  return bf16_cache && (taken == FlashForm::kWgmma || taken == FlashForm::kWgmmaPipelined ||
                        taken == FlashForm::kWgmmaFull || taken == FlashForm::kWgmmaLean);
}

// Rows of q one block of the flash kernel covers: every query head of a kv head's group for each.
inline int flash_rows_per_tile(int heads, int kv_heads) {
  return kFlashQueryVectors / (heads / kv_heads);
}

// Whether paged_attention in bf16 mode takes the flash kernel for n rows on a GPU of `sms` SMs:
// head_dim 64 or 128, a GQA group of at most 64 query heads, and enough (row tile, kv head) blocks to
// fill the GPU (fewer rows, e.g. decode, keep the key-split SIMT kernel, which fills it by splitting keys).
inline bool flash_prefill_shape_ok(int heads, int kv_heads, int head_dim) {
  return kv_heads > 0 && heads % kv_heads == 0 && (head_dim == 64 || head_dim == 128) &&
         heads / kv_heads <= kFlashQueryVectors;
}
inline bool flash_prefill_applies(int64_t n, int heads, int kv_heads, int head_dim, int sms) {
  if (!flash_prefill_shape_ok(heads, kv_heads, head_dim)) return false;
  const int64_t qt = flash_rows_per_tile(heads, kv_heads);
  return (n + qt - 1) / qt * kv_heads >= sms;
}

}  // namespace vv::cuda
