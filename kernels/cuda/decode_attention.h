// Decode attention on the tensor cores (kernels/cuda/decode_ops.cu): which calls it takes. No CUDA
// headers here, so the GPU tests can ask whether their shapes reach the kernel.
#pragma once

namespace vv::cuda {

// Keys per unit (one warp) of the tensor-core decode attention. Fixed (up to 16,384 keys of table
// width; longer tables get wider units, see plan_mma_decode_attention), so the arithmetic of a row
// depends on its own length only, never on the other rows of the step.
constexpr int kMmaDecodeChunk = 64;

// Shapes the tensor-core decode attention covers (bf16 mode, a bf16 or f16 cache with 16-byte
// aligned rows is checked by the backend): head_dim 64 or 128 and a GQA group of at most 8 query
// heads (the 16 rows of an mma tile hold the group, zero-padded).
inline bool mma_decode_applies(int heads, int kv_heads, int head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0 || (head_dim != 64 && head_dim != 128)) return false;
  const int G = heads / kv_heads;
  return G >= 1 && G <= 8;
}

}  // namespace vv::cuda
