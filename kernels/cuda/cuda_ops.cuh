// Launchers of the CUDA backend's kernels (internal to kernels/cuda). Each enqueues on `s` and
// returns at once; shapes were checked by the caller (the model binds them once). Tensors are
// device views; weights may be F32, BF16 or F16 where the op set allows it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/backend.h"

namespace vv::cuda {

// Skinny GEMM (few rows): one warp per output column, weights streamed once per 8 rows with
// 16-byte loads, f32 activations and accumulation. Any M; meant for M ≤ 64.
void gemv(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, cudaStream_t s);
// One-row GEMMs sharing their activation row (q, k, v), fused into one launch.
constexpr int kMaxGemvJobs = 4;
struct GemvJob {
  const void* w = nullptr;  // [N, K], row stride ldw, the dtype passed to gemv_multi
  const float* bias = nullptr;
  float* out = nullptr;     // [1, N]
  int64_t ldw = 0, N = 0;
  int ep = 0;               // Epilogue
  unsigned block_begin = 0;  // filled by gemv_multi
};
struct GemvJobs {
  GemvJob j[kMaxGemvJobs];
  int count = 0;
};
void gemv_multi(const Tensor& a, DType wt, GemvJobs jobs, cudaStream_t s);
// Tiled f32 SIMT GEMM for any M (weights converted to f32 in shared memory; rows of a may overlap).
void gemm_f32(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, cudaStream_t s);
// a [M,K] F32 (any row stride, rows may overlap) → dst contiguous [M,K] in `to` (BF16 or F16).
void pack_rows_half(const Tensor& a, void* dst, DType to, cudaStream_t s);
// out = gelu_erf(out) over a 2-D view.
void gelu_inplace(Tensor& out, cudaStream_t s);
// h[r, c] = bf16(gelu_erf(h[r, c] + bias[c])) over rows × E contiguous bf16 values (bias F32 [E]); erf is
// erff, or with fast_erf the fused FFN kernels' form (gelu_erf_fast, convert.cuh).
void gelu_bias_bf16_inplace(void* h, const float* bias, int64_t rows, int64_t E, bool fast_erf,
                            cudaStream_t s);

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, cudaStream_t s);
// pack[r, c] = bf16(silu(g[r, c]) * g[r, I + c]) for a bf16 gate_up g [M, 2I] (contiguous rows); pack [M, I].
void silu_mul_bf16_pack(const void* g, int64_t M, int64_t I, void* pack, cudaStream_t s);
// rms_norm that also writes its output rounded to pack_t (BF16/F16) into `pack`, contiguous
// [rows, cols]: the A operand of the tensor-core GEMMs that read it, the same bits as
// pack_rows_half(out) (the GEMMs then skip their pack). write_out false: only the pack is written
// (out's shape still gives the rows and columns; its memory is left as it was). Launched with PDL: it
// waits for the kernel before it, and lets the next one (a GEMM that streams its weights before its
// own wait) start at once.
void rms_norm_pack(const Tensor& x, const Tensor& weight, float eps, Tensor& out, void* pack, DType pack_t,
                   cudaStream_t s, bool write_out = true);
void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out, cudaStream_t s);
void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y, cudaStream_t s);
void add(const Tensor& a, const Tensor& b, Tensor& out, cudaStream_t s);
void silu_mul(const Tensor& gate_up, Tensor& out, cudaStream_t s);
// silu_mul that also writes its output rounded to pack_t into `pack` [rows, cols] contiguous.
void silu_mul_pack(const Tensor& gate_up, Tensor& out, void* pack, DType pack_t, cudaStream_t s);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, cudaStream_t s);
// inv_freq: device F32 [head_dim/2], computed on the host exactly as the reference does.
void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, const float* inv_freq, cudaStream_t s);
void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
              const AttentionShape& shape, cudaStream_t s);
// How paged_attention runs a call: the tiled kernel (K/V tiles shared by a tile's query vectors),
// split over keys when the grid would otherwise not fill the GPU (decode), or the per-(row, head)
// kernel for GQA groups over 32 or head_dim over 256. Splits need ws_floats of workspace.
struct AttentionPlan {
  bool tiled = false;
  int rows_per_tile = 1;
  int splits = 1;
  int chunk = 0;  // keys per split (a multiple of 32)
  size_t ws_floats = 0;
};
// max keys per row are bounded by the block table's width × block_size (the host never reads
// positions, which live on the device).
AttentionPlan plan_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape, int sms);
void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, const AttentionPlan& plan, float* ws, cudaStream_t s);
void argmax(const Tensor& logits, Tensor& out, cudaStream_t s);

}  // namespace vv::cuda
