// A split-K tensor-core GEMM for the decode steps of a batch (2..128 rows): out (=|+=) a · wᵀ + bias
// with bf16 operands and f32 accumulation (kernels/cuda/skinny_gemm.cu). Opt-in (VV_CUDA_SKINNY_GEMM=1)
// until it has been measured against cuBLASLt on the GPU: at 64 rows on the H200, cuBLASLt's choice
// for the 7B's narrow weights streams them at 1.6 TB/s (o, 3584 × 3584) and 2.8 TB/s (down), where
// plain cuBLAS with bf16 output reaches 3.3 TB/s over all of them (decode_roofline.py).
//
// Each block takes 128 output columns and one slice of K, streaming its weight rows and the rows of
// a through a ring of shared-memory stages (cp.async); the number of slices depends on N, K and the
// device's SM count only, never on M, and a second kernel sums the slices' partials in slice order.
// So a row's bits do not depend on how many other rows share the launch (batch invariance).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vv::cuda {

constexpr int64_t kSkinnyGemmMaxRows = 128;

struct SkinnyGemmPlan {
  int splits = 1;  // slices of K
  int64_t ks = 0;  // K per slice (a multiple of 64; the last slice may be shorter)
};

// The slices for an [N, K] weight on a device with `sms` SMs: enough blocks for `per_sm` per SM
// (fewer slices: less partial traffic; more: more bytes in flight), each slice at least 256 deep.
SkinnyGemmPlan plan_skinny_gemm(int64_t N, int64_t K, int sms, int per_sm = 2);

// f32 partials the launch needs (0 with one slice).
size_t skinny_gemm_ws_bytes(int64_t M, int64_t N, const SkinnyGemmPlan& p);
// The largest partial buffer any shape with M ≤ kSkinnyGemmMaxRows can need on `sms` SMs.
size_t skinny_gemm_ws_max_bytes(int sms, int per_sm = 2);

// Whether the kernel takes these operands: 1 ≤ M ≤ kSkinnyGemmMaxRows, K % 8 == 0, a packed bf16
// [M, K] and w bf16 [N, K] with ldw % 8 == 0 and 16-byte aligned bases.
bool skinny_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw);

// out[m, n] = (accumulate ? out[m, n] : 0) + (Σ_k a[m, k] · w[n, k] + bias[n]); bias may be null.
// `ws` holds skinny_gemm_ws_bytes(M, N, p) bytes.
void skinny_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                 const float* bias, bool accumulate, float* out, int64_t ldo, const SkinnyGemmPlan& p,
                 float* ws, cudaStream_t s);

}  // namespace vv::cuda
