// The encoders' ConvNeXt FFN branch in one kernel (see encoder_ops.cuh). Unfused, a stage-0 block
// (1.44 M rows × 32 channels, hidden 128) moves ~28 passes over x through HBM (f32 hidden rows
// written, GELU'd in place, packed to bf16, read back); fused it reads x and writes it once.
// 8 warps of 16 rows each. Two forms:
//  - resident (C ∈ {32, 64}, E = 4C): both weights (≤ 70 KB of bf16) are loaded into shared memory
//    once per block and the block's warps then walk 16-row tiles on their own, with no block barrier
//    (grid = the blocks that fit at once);
//  - streamed (C ∈ {32, 64, 128, 256}, any E multiple of 64): one block per 128 rows, the weights
//    come in chunks of 64 hidden columns through a cp.async double buffer, so the next chunk loads
//    while the tensor cores work on this one;
//  - wide (C = 512): the output columns split over warps, h passed through shared memory (below).
// The first version (4 warps, 64 rows, chunks loaded synchronously between two barriers, norm of one
// row at a time; commit db4a299 has it as encoder_ffn_v1.cu) ran at ~74 TFLOP/s over stages 0-3.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/encoder_ops.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/smem_attr.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace vv::cuda {
namespace {

using mma::cp_async16;
using mma::cp_async4_zfill;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldsm_a;
using mma::ldsm_b_nmajor;
using mma::mma_bf16;
using mma::pack_bf16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;
constexpr int kTileRows = kWarps * kWarpRows;  // rows per block of the streamed form
constexpr int kHid = 64;                       // hidden columns per chunk

// The GELU forms (gelu_of<kGeluExact | kGeluErfFast>, the fast erf) are in convert.cuh, beside gelu_erf.

// RMSNorm (f32, as rms_norm computes it) of the 16 rows r0.. into Uw [16][LDU], rounded to bf16;
// rows ≥ T give zeros. G rows' loads are issued before any is used (one row at a time left each
// warp waiting out a full memory latency per row).
template <int C, int LDU>
__device__ __forceinline__ void norm_rows(const float* x, int64_t ldx, int64_t T, int64_t r0,
                                          const float* __restrict__ norm_w, float eps, __nv_bfloat16* Uw,
                                          int lane) {
  constexpr int kPer = C / 32;
  constexpr int G = 1024 / C < kWarpRows ? 1024 / C : kWarpRows;
#pragma unroll 1
  for (int i0 = 0; i0 < kWarpRows; i0 += G) {
    float xv[G][kPer];
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const int64_t r = r0 + i0 + i;
#pragma unroll
      for (int e = 0; e < kPer; ++e) xv[i][e] = r < T ? x[r * ldx + lane + 32 * e] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < G; ++i) {
      float ss = 0.f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) ss = fmaf(xv[i][e], xv[i][e], ss);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int c = lane + 32 * e;
        Uw[(i0 + i) * LDU + c] = __float2bfloat16_rn(xv[i][e] * inv * norm_w[c]);
      }
    }
  }
}

// One chunk of 64 hidden columns for a warp's 16 rows: h = U·W1cᵀ (W1c: hidden rows, stride LDW1),
// bias and GELU in f32, rounded to bf16 and multiplied straight into acc by W2c (output rows, the
// chunk's hidden columns first, stride LDW2). U's A fragments come from uf (kHoldU) or Uw.
template <int C, int LDU, int LDW1, int LDW2, bool kHoldU, int kGelu>
__device__ __forceinline__ void ffn_chunk(const __nv_bfloat16* Uw,
                                          const uint32_t (&uf)[kHoldU ? C / 16 : 1][4],
                                          const __nv_bfloat16* W1c, const __nv_bfloat16* W2c,
                                          const float* __restrict__ b1c, float (&acc)[C / 8][4], int lane) {
  constexpr int KC = C / 16;
  const int t4 = lane & 3;
  float h[kHid / 8][4];
#pragma unroll
  for (int nt = 0; nt < kHid / 8; ++nt) h[nt][0] = h[nt][1] = h[nt][2] = h[nt][3] = 0.f;
#pragma unroll
  for (int kd = 0; kd < KC; ++kd) {
    uint32_t ua[4];
    if constexpr (kHoldU) {
      ua[0] = uf[kd][0], ua[1] = uf[kd][1], ua[2] = uf[kd][2], ua[3] = uf[kd][3];
    } else {
      ldsm_a(Uw + kd * 16, LDU, lane, ua);
    }
#pragma unroll
    for (int nb = 0; nb < kHid / 16; ++nb) {
      uint32_t b0, b1_, b2_, b3;
      ldsm_b_nmajor(W1c + nb * 16 * LDW1 + kd * 16, LDW1, lane, b0, b1_, b2_, b3);
      mma_bf16(h[2 * nb], ua, b0, b1_);
      mma_bf16(h[2 * nb + 1], ua, b2_, b3);
    }
  }
#pragma unroll
  for (int nt = 0; nt < kHid / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float bb = b1c[nt * 8 + 2 * t4 + e];
      h[nt][e] = gelu_of<kGelu>(h[nt][e] + bb);
      h[nt][2 + e] = gelu_of<kGelu>(h[nt][2 + e] + bb);
    }
  }
#pragma unroll
  for (int kk = 0; kk < kHid / 16; ++kk) {
    uint32_t a[4];
    mma::pack_a_from_c(h[2 * kk], h[2 * kk + 1], a);
#pragma unroll
    for (int cp = 0; cp < KC; ++cp) {
      uint32_t b0, b1_, b2_, b3;
      ldsm_b_nmajor(W2c + cp * 16 * LDW2 + kk * 16, LDW2, lane, b0, b1_, b2_, b3);
      mma_bf16(acc[2 * cp], a, b0, b1_);
      mma_bf16(acc[2 * cp + 1], a, b2_, b3);
    }
  }
}

// x += gamma ⊙ (acc + b2) for the warp's 16 rows r0.., as add_scaled applies the GEMM's output.
template <int C>
__device__ __forceinline__ void ffn_store(float* x, int64_t ldx, int64_t T, int64_t r0,
                                          const float (&acc)[C / 8][4], const float* __restrict__ b2,
                                          const float* __restrict__ gamma, int lane) {
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t r = r0 + g + 8 * hh;
    if (r >= T) continue;
    float* xr = x + r * ldx;
#pragma unroll
    for (int ct = 0; ct < C / 8; ++ct) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = ct * 8 + 2 * t4 + e;
        xr[c] += gamma[c] * (acc[ct][2 * hh + e] + b2[c]);
      }
    }
  }
}

// The resident FFN of a warp's 16 normalised rows (Uw [16][C+8], bf16): both weights in shared memory
// (W1s [4C][C+8], W2s [C][4C+8]), the hidden columns 64 at a time; acc gets the second GEMM's f32 sums.
template <int C, int kGelu>
__device__ __forceinline__ void ffn_resident_rows(const __nv_bfloat16* Uw, const __nv_bfloat16* W1s,
                                                  const __nv_bfloat16* W2s, const float* __restrict__ b1,
                                                  float (&acc)[C / 8][4], int lane) {
  constexpr int E = 4 * C, LDU = C + 8, LDW1 = C + 8, LDW2 = E + 8, KC = C / 16;
  uint32_t uf[KC][4];
#pragma unroll
  for (int kd = 0; kd < KC; ++kd) ldsm_a(Uw + kd * 16, LDU, lane, uf[kd]);
#pragma unroll
  for (int ct = 0; ct < C / 8; ++ct) acc[ct][0] = acc[ct][1] = acc[ct][2] = acc[ct][3] = 0.f;
#pragma unroll
  for (int j0 = 0; j0 < E; j0 += kHid)
    ffn_chunk<C, LDU, LDW1, LDW2, true, kGelu>(Uw, uf, W1s + j0 * LDW1, W2s + j0, b1 + j0, acc, lane);
}

template <int C>
constexpr size_t resident_smem_bytes() {
  // W1 [4C][C+8], W2 [C][4C+8], U [8 warps][16][C+8], bf16.
  return (static_cast<size_t>(4 * C) * (C + 8) + static_cast<size_t>(C) * (4 * C + 8) +
          static_cast<size_t>(kTileRows) * (C + 8)) *
         2;
}

template <int C, int kGelu>
__global__ void __launch_bounds__(kThreads, 2)
    ffn_resident_kernel(float* x, int64_t ldx, int64_t T, const float* __restrict__ norm_w, float eps,
                        const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                        const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                        const float* __restrict__ gamma) {
  constexpr int E = 4 * C, LDU = C + 8, LDW1 = C + 8, LDW2 = E + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* W1s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* W2s = W1s + E * LDW1;
  __nv_bfloat16* Us = W2s + C * LDW2;
  for (int i = threadIdx.x; i < E * (C / 8); i += kThreads) {
    const int row = i / (C / 8), c8 = (i % (C / 8)) * 8;
    cp_async16(W1s + row * LDW1 + c8, w1 + static_cast<int64_t>(row) * C + c8);
  }
  for (int i = threadIdx.x; i < C * (E / 8); i += kThreads) {
    const int row = i / (E / 8), h8 = (i % (E / 8)) * 8;
    cp_async16(W2s + row * LDW2 + h8, w2 + static_cast<int64_t>(row) * E + h8);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __nv_bfloat16* Uw = Us + warp * kWarpRows * LDU;
  const int64_t wtiles = (T + kWarpRows - 1) / kWarpRows;
  for (int64_t wt = static_cast<int64_t>(blockIdx.x) * kWarps + warp; wt < wtiles;
       wt += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t r0 = wt * kWarpRows;
    norm_rows<C, LDU>(x, ldx, T, r0, norm_w, eps, Uw, lane);
    __syncwarp();
    float acc[C / 8][4];
    ffn_resident_rows<C, kGelu>(Uw, W1s, W2s, b1, acc, lane);
    ffn_store<C>(x, ldx, T, r0, acc, b2, gamma, lane);
    __syncwarp();  // every lane's ldmatrix of Uw is done before the next tile overwrites it
  }
}

template <int C>
constexpr size_t stream_smem_bytes() {
  // U [128][C+8], W1 chunks [2][64][C+8], W2 chunks [2][C][64+8], bf16.
  return (static_cast<size_t>(kTileRows) * (C + 8) + 2 * static_cast<size_t>(kHid) * (C + 8) +
          2 * static_cast<size_t>(C) * (kHid + 8)) *
         2;
}

template <int C>
__device__ __forceinline__ void load_chunk(const __nv_bfloat16* __restrict__ w1,
                                           const __nv_bfloat16* __restrict__ w2, int E, int j0,
                                           __nv_bfloat16* W1d, __nv_bfloat16* W2d) {
  constexpr int LDW1 = C + 8, LDW2 = kHid + 8;
  for (int i = threadIdx.x; i < kHid * (C / 8); i += kThreads) {
    const int row = i / (C / 8), c8 = (i % (C / 8)) * 8;
    cp_async16(W1d + row * LDW1 + c8, w1 + static_cast<int64_t>(j0 + row) * C + c8);
  }
  for (int i = threadIdx.x; i < C * (kHid / 8); i += kThreads) {
    const int row = i / (kHid / 8), h8 = (i % (kHid / 8)) * 8;
    cp_async16(W2d + row * LDW2 + h8, w2 + static_cast<int64_t>(row) * E + j0 + h8);
  }
  cp_async_commit();
}

// 256 channels keep 128 accumulators per thread: one block per SM; below that two fit.
template <int C>
constexpr int stream_min_blocks() {
  return C >= 256 ? 1 : 2;
}

template <int C, int kGelu>
__global__ void __launch_bounds__(kThreads, stream_min_blocks<C>())
    ffn_stream_kernel(float* x, int64_t ldx, int64_t T, const float* __restrict__ norm_w, float eps,
                      const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                      const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                      const float* __restrict__ gamma, int E) {
  constexpr int LDU = C + 8, LDW1 = C + 8, LDW2 = kHid + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Us = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* W1b = Us + kTileRows * LDU;
  __nv_bfloat16* W2b = W1b + 2 * kHid * LDW1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  load_chunk<C>(w1, w2, E, 0, W1b, W2b);  // lands while the rows are normalised
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTileRows + warp * kWarpRows;
  __nv_bfloat16* Uw = Us + warp * kWarpRows * LDU;
  norm_rows<C, LDU>(x, ldx, T, r0, norm_w, eps, Uw, lane);
  __syncwarp();
  float acc[C / 8][4];
#pragma unroll
  for (int ct = 0; ct < C / 8; ++ct) acc[ct][0] = acc[ct][1] = acc[ct][2] = acc[ct][3] = 0.f;
  const uint32_t none[1][4] = {{0, 0, 0, 0}};
  const int chunks = E / kHid;
  for (int j = 0; j < chunks; ++j) {
    if (j + 1 < chunks) {  // buffer (j+1)&1 was released by the barrier that ended chunk j-1
      load_chunk<C>(w1, w2, E, (j + 1) * kHid, W1b + ((j + 1) & 1) * kHid * LDW1,
                    W2b + ((j + 1) & 1) * C * LDW2);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // chunk j is in shared memory for every warp
    ffn_chunk<C, LDU, LDW1, LDW2, false, kGelu>(Uw, none, W1b + (j & 1) * kHid * LDW1,
                                                W2b + (j & 1) * C * LDW2, b1 + j * kHid, acc, lane);
    __syncthreads();  // every warp is done with buffer j&1
  }
  ffn_store<C>(x, ldx, T, r0, acc, b2, gamma, lane);
}

// The wide form (C = 512, stage 4): 128 accumulators per thread hold 16 rows × 256 columns, so a
// warp owns part of the output: warps are RG row groups × NG column groups (RG·NG = 8). Per
// chunk of HC hidden columns each warp makes h for its 16 rows and HC/NG of the columns (bias, GELU,
// bf16) into shared memory, and after a barrier multiplies all HC columns of its rows into its output
// columns. Weights double-buffered through cp.async as in the streamed form.
template <int C, int RG, int HC>
struct Wide {
  static constexpr int NG = kWarps / RG, BR = kWarpRows * RG, CW = C / NG, HN = HC / NG;
  static constexpr int LDU = C + 8, LDW1 = C + 8, LDW2 = HC + 8, LDH = HC + 8;
  static constexpr size_t smem = (static_cast<size_t>(BR) * LDU + 2 * static_cast<size_t>(HC) * LDW1 +
                                  2 * static_cast<size_t>(C) * LDW2 + static_cast<size_t>(BR) * LDH) *
                                 2;
  static_assert(HN % 16 == 0 && CW % 16 == 0 && BR % kWarps == 0, "wide FFN tiling");
};

template <int C, int RG, int HC>
__device__ __forceinline__ void load_wide_chunk(const __nv_bfloat16* __restrict__ w1,
                                                const __nv_bfloat16* __restrict__ w2, int E, int j0,
                                                __nv_bfloat16* W1d, __nv_bfloat16* W2d) {
  using P = Wide<C, RG, HC>;
  for (int i = threadIdx.x; i < HC * (C / 8); i += kThreads) {
    const int row = i / (C / 8), c8 = (i % (C / 8)) * 8;
    cp_async16(W1d + row * P::LDW1 + c8, w1 + static_cast<int64_t>(j0 + row) * C + c8);
  }
  for (int i = threadIdx.x; i < C * (HC / 8); i += kThreads) {
    const int row = i / (HC / 8), h8 = (i % (HC / 8)) * 8;
    cp_async16(W2d + row * P::LDW2 + h8, w2 + static_cast<int64_t>(row) * E + j0 + h8);
  }
  cp_async_commit();
}

template <int C, int RG, int HC, int kGelu>
__global__ void __launch_bounds__(kThreads, 1)
    ffn_wide_kernel(float* x, int64_t ldx, int64_t T, const float* __restrict__ norm_w, float eps,
                    const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                    const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                    const float* __restrict__ gamma, int E) {
  using P = Wide<C, RG, HC>;
  constexpr int LDU = P::LDU, LDW1 = P::LDW1, LDW2 = P::LDW2, LDH = P::LDH, HN = P::HN, CW = P::CW;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Us = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* W1b = Us + P::BR * LDU;
  __nv_bfloat16* W2b = W1b + 2 * HC * LDW1;
  __nv_bfloat16* Hs = W2b + 2 * C * LDW2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int rg = warp / P::NG, ng = warp % P::NG;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * P::BR;
  load_wide_chunk<C, RG, HC>(w1, w2, E, 0, W1b, W2b);
  // Each warp normalises BR/8 of the block's rows (not necessarily the ones it multiplies later:
  // the first chunk's barrier orders them).
  constexpr int NR = P::BR / kWarps;
  {
    constexpr int kPer = C / 32;
    constexpr int G = 1024 / C < NR ? 1024 / C : NR;
#pragma unroll 1
    for (int i0 = 0; i0 < NR; i0 += G) {
      float xv[G][kPer];
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int64_t r = b0 + warp * NR + i0 + i;
#pragma unroll
        for (int e = 0; e < kPer; ++e) xv[i][e] = r < T ? x[r * ldx + lane + 32 * e] : 0.f;
      }
#pragma unroll
      for (int i = 0; i < G; ++i) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) ss = fmaf(xv[i][e], xv[i][e], ss);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          const int c = lane + 32 * e;
          Us[(warp * NR + i0 + i) * LDU + c] = __float2bfloat16_rn(xv[i][e] * inv * norm_w[c]);
        }
      }
    }
  }
  float acc[CW / 8][4];
#pragma unroll
  for (int ct = 0; ct < CW / 8; ++ct) acc[ct][0] = acc[ct][1] = acc[ct][2] = acc[ct][3] = 0.f;
  const __nv_bfloat16* Uw = Us + rg * kWarpRows * LDU;
  __nv_bfloat16* Hw = Hs + rg * kWarpRows * LDH;
  const int chunks = E / HC;
  for (int j = 0; j < chunks; ++j) {
    if (j + 1 < chunks) {
      load_wide_chunk<C, RG, HC>(w1, w2, E, (j + 1) * HC, W1b + ((j + 1) & 1) * HC * LDW1,
                                 W2b + ((j + 1) & 1) * C * LDW2);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // chunk j (and, the first time, every row of Us) is in shared memory
    const __nv_bfloat16* W1c = W1b + (j & 1) * HC * LDW1 + ng * HN * LDW1;
    const __nv_bfloat16* W2c = W2b + (j & 1) * C * LDW2 + ng * CW * LDW2;
    float h[HN / 8][4];
#pragma unroll
    for (int nt = 0; nt < HN / 8; ++nt) h[nt][0] = h[nt][1] = h[nt][2] = h[nt][3] = 0.f;
#pragma unroll 8
    for (int kd = 0; kd < C / 16; ++kd) {
      uint32_t ua[4];
      ldsm_a(Uw + kd * 16, LDU, lane, ua);
#pragma unroll
      for (int nb = 0; nb < HN / 16; ++nb) {
        uint32_t q0, q1, q2, q3;
        ldsm_b_nmajor(W1c + nb * 16 * LDW1 + kd * 16, LDW1, lane, q0, q1, q2, q3);
        mma_bf16(h[2 * nb], ua, q0, q1);
        mma_bf16(h[2 * nb + 1], ua, q2, q3);
      }
    }
#pragma unroll
    for (int nt = 0; nt < HN / 8; ++nt) {
      const int col = ng * HN + nt * 8 + 2 * t4;
      const float bb0 = b1[j * HC + col], bb1 = b1[j * HC + col + 1];
      *reinterpret_cast<uint32_t*>(Hw + g * LDH + col) =
          pack_bf16(gelu_of<kGelu>(h[nt][0] + bb0), gelu_of<kGelu>(h[nt][1] + bb1));
      *reinterpret_cast<uint32_t*>(Hw + (g + 8) * LDH + col) =
          pack_bf16(gelu_of<kGelu>(h[nt][2] + bb0), gelu_of<kGelu>(h[nt][3] + bb1));
    }
    __syncthreads();  // h of every column group is in Hs
#pragma unroll
    for (int kk = 0; kk < HC / 16; ++kk) {
      uint32_t a[4];
      ldsm_a(Hw + kk * 16, LDH, lane, a);
#pragma unroll
      for (int cp = 0; cp < CW / 16; ++cp) {
        uint32_t q0, q1, q2, q3;
        ldsm_b_nmajor(W2c + cp * 16 * LDW2 + kk * 16, LDW2, lane, q0, q1, q2, q3);
        mma_bf16(acc[2 * cp], a, q0, q1);
        mma_bf16(acc[2 * cp + 1], a, q2, q3);
      }
    }
    __syncthreads();  // every warp is done with buffer j&1 and with Hs
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t r = b0 + rg * kWarpRows + g + 8 * hh;
    if (r >= T) continue;
    float* xr = x + r * ldx + ng * CW;
#pragma unroll
    for (int ct = 0; ct < CW / 8; ++ct) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = ct * 8 + 2 * t4 + e;
        xr[c] += gamma[ng * CW + c] * (acc[ct][2 * hh + e] + b2[ng * CW + c]);
      }
    }
  }
}

// ---- The whole ConvNeXt block (Backend::conv_block) at C ∈ {32, 64}, E = 4C ----------------------
// Mixer (x += gamma ⊙ dwconv7(rms_norm(x))) and FFN in one pass: each warp takes runs of kRunRows
// consecutive rows in order, 16 at a time. Per 16 rows it normalises and convolves with a lane per
// channel (the 6 rows of u before the run come from the mixer's side pass, or the history at row 0,
// and then from the warp's own previous 16 rows, in registers), normalises the mixed rows for the
// FFN into shared memory as bf16, runs the resident FFN (both weights in shared memory, as
// ffn_resident_kernel) and writes x once. The next 16 rows' loads are in flight in registers while
// the current ones compute, and the FFN's residual comes from shared memory, not a second read of x.
// Every value is computed as conv_mixer_fused and the FFN kernel compute it (same operations in the
// same order: the norms' sums are warp_sum's tree, taken over 16 rows at once), so x and u's last
// rows have the bits of conv_mixer then conv_ffn. Unfused a stage-0 block reads x ~3.1 times and
// writes it twice; here ~1.1 and once.
constexpr int kHaloRows = 6;  // the mixer's reach: kernel 7
constexpr int kRunRows = 64;  // rows a warp takes in order (side-pass rows at each run's start)
constexpr int kRunSubs = kRunRows / kWarpRows;

template <int C>
struct BlockCfg {
  static constexpr int kPer = C / 32;  // channels per lane in the mixer phase
  static constexpr int E = 4 * C;
  static constexpr int LDU = C + 8, LDW1 = C + 8, LDW2 = E + 8;
  // f32 rows of x; C + 8 keeps the epilogue's 8-byte reads (8 rows × 4 column pairs a half-warp) on
  // 32 distinct banks.
  static constexpr int LDX = C + 8;
  // Per-channel vectors in shared memory, one row each: taps 0-6, mixer norm, mixer bias, mixer
  // scale, FFN norm.
  static constexpr int kVecRows = 11;
  // C = 32: 76 KB and ≤ 128 registers, two blocks an SM. C = 64: the weights alone take 69 KB: one
  // block of 12 warps (225 KB).
  static constexpr int kWarps = C == 32 ? 8 : 12;
  static constexpr int kMinBlocks = C == 32 ? 2 : 1;
  static constexpr size_t kWeightBytes = (static_cast<size_t>(E) * LDW1 + static_cast<size_t>(C) * LDW2) * 2;
  static constexpr size_t kVecBytes = static_cast<size_t>(kVecRows) * C * 4;
  // Per warp: x rows [2][16][LDX] f32 (the current rows and the next ones in flight), the halo [6][C]
  // f32, the normalised rows [16][LDU] bf16.
  static constexpr size_t kWarpBytes =
      (2 * kWarpRows * static_cast<size_t>(LDX) + 6 * C) * 4 + kWarpRows * LDU * 2;
  static constexpr size_t smem = kWeightBytes + kVecBytes + kWarps * kWarpBytes;
  static_assert(C % 32 == 0 && kWeightBytes % 16 == 0 && kVecBytes % 16 == 0 && kWarpBytes % 16 == 0,
                "conv block layout");
  static_assert(smem <= 227 * 1024, "conv block shared memory");
};

// One halving step of rows16_sum: N rows' partials in, N/2 out; lanes with bit O set keep the upper
// half and send the lower one to their partner lane ^ O.
template <int N, int O>
__device__ __forceinline__ void fold_rows(const float (&p)[N], float (&q)[N / 2], int lane) {
  const bool hi = (lane & O) != 0;
#pragma unroll
  for (int j = 0; j < N / 2; ++j) {
    const float keep = hi ? p[j + N / 2] : p[j];
    const float send = hi ? p[j] : p[j + N / 2];
    q[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
  }
}

// The warp sums of 16 rows' lane partials p[i]: returns row lane/2's sum (lanes 2i and 2i+1 hold row
// i). Each step adds the same two partial sums as warp_sum's xor butterfly (own, then the partner's
// at lane ^ O, for O = 16, 8, 4, 2, 1), so every row gets the bits warp_sum gives it; 16 shuffles
// for the 16 rows instead of 80.
__device__ __forceinline__ float rows16_sum(const float (&p)[16], int lane) {
  float q8[8], q4[4], q2[2], q1[1];
  fold_rows<16, 16>(p, q8, lane);
  fold_rows<8, 8>(q8, q4, lane);
  fold_rows<4, 4>(q4, q2, lane);
  fold_rows<2, 2>(q2, q1, lane);
  return q1[0] + __shfl_xor_sync(0xffffffffu, q1[0], 1);
}

// 1/sqrt(mean(x²) + eps) of 16 rows held a channel per lane (xv[i][e]: row i, channel lane + 32e), in
// row_inv_rms's (and norm_rows') arithmetic: lane-strided fmaf, warp_sum's tree, then the division.
// Lane l returns row l/2's.
template <int C>
__device__ __forceinline__ float rows16_inv_rms(const float (&xv)[kWarpRows][C / 32], float eps, int lane) {
  float pr[kWarpRows];
#pragma unroll
  for (int i = 0; i < kWarpRows; ++i) {
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < C / 32; ++e) ss = fmaf(xv[i][e], xv[i][e], ss);
    pr[i] = ss;
  }
  return 1.0f / sqrtf(rows16_sum(pr, lane) / static_cast<float>(C) + eps);
}

// Issues the copies of the 16 rows r0.. of x (rows ≥ T as zeros) into Xb [16][LDX] and, where `halo`,
// the 6 rows of u before run `run` into Hb [6][C] (the side pass's rows, or the history at row 0, or
// zeros), then commits them as one group. A lane copies only its own
// channels (lane + 32e), the ones it reads back in the mixer phase.
template <int C>
__device__ __forceinline__ void issue_block_rows(const float* x, int64_t ldx, int64_t T, int64_t r0,
                                                 bool halo, int64_t run, const float* side, const float* hist,
                                                 int64_t ldh, float* Xb, float* Hb, int lane) {
  constexpr int P = C / 32, LDX = BlockCfg<C>::LDX;
#pragma unroll
  for (int i = 0; i < kWarpRows; ++i) {
    const int64_t r = r0 + i;
    const float* src = x + (r < T ? r : 0) * ldx;
#pragma unroll
    for (int e = 0; e < P; ++e) cp_async4_zfill(Xb + i * LDX + lane + 32 * e, src + lane + 32 * e, r < T);
  }
  if (halo) {
    const float* src = run > 0 ? side + (run - 1) * kHaloRows * C : hist;
    const int64_t lds = run > 0 ? C : ldh;
#pragma unroll
    for (int j = 0; j < kHaloRows; ++j) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const int c = lane + 32 * e;
        cp_async4_zfill(Hb + j * C + c, src ? src + j * lds + c : x, src != nullptr);
      }
    }
  }
  cp_async_commit();
}

template <int C, typename WT, int kGelu>
__global__ void __launch_bounds__(BlockCfg<C>::kWarps * 32, BlockCfg<C>::kMinBlocks)
    conv_block_kernel(float* x, int64_t ldx, int64_t T, const float* __restrict__ hist, int64_t ldh,
                      const float* __restrict__ side, const float* __restrict__ nw1,
                      const WT* __restrict__ taps, int64_t ldw, const float* __restrict__ mb,
                      const float* __restrict__ g1, const float* __restrict__ nw2,
                      const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                      const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                      const float* __restrict__ g2, float eps, float* __restrict__ u, int64_t ldu) {
  using K = BlockCfg<C>;
  constexpr int E = K::E, P = K::kPer, NW = K::kWarps;
  constexpr int LDU = K::LDU, LDW1 = K::LDW1, LDW2 = K::LDW2, LDX = K::LDX;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* W1s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* W2s = W1s + E * LDW1;
  float* Vs = reinterpret_cast<float*>(smem_raw + K::kWeightBytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* wbase = smem_raw + K::kWeightBytes + K::kVecBytes + warp * K::kWarpBytes;
  float* Xb = reinterpret_cast<float*>(wbase);  // [2][16][LDX]
  float* Hb = Xb + 2 * kWarpRows * LDX;         // [6][C]
  __nv_bfloat16* Uw = reinterpret_cast<__nv_bfloat16*>(Hb + kHaloRows * C);

  for (int i = threadIdx.x; i < E * (C / 8); i += NW * 32) {
    const int row = i / (C / 8), c8 = (i % (C / 8)) * 8;
    cp_async16(W1s + row * LDW1 + c8, w1 + static_cast<int64_t>(row) * C + c8);
  }
  for (int i = threadIdx.x; i < C * (E / 8); i += NW * 32) {
    const int row = i / (E / 8), h8 = (i % (E / 8)) * 8;
    cp_async16(W2s + row * LDW2 + h8, w2 + static_cast<int64_t>(row) * E + h8);
  }
  cp_async_commit();
  for (int c = threadIdx.x; c < C; c += NW * 32) {
#pragma unroll
    for (int k = 0; k < 7; ++k) Vs[k * C + c] = to_f32(taps[c * ldw + k]);
    Vs[7 * C + c] = nw1[c];
    Vs[8 * C + c] = mb ? mb[c] : 0.f;
    Vs[9 * C + c] = g1[c];
    Vs[10 * C + c] = nw2[c];
  }
  const int64_t runs = (T + kRunRows - 1) / kRunRows;
  const int64_t wstride = static_cast<int64_t>(gridDim.x) * NW;
  int64_t run = static_cast<int64_t>(blockIdx.x) * NW + warp;
  int sub = 0, buf = 0;
  if (run < runs) issue_block_rows<C>(x, ldx, T, run * kRunRows, true, run, side, hist, ldh, Xb, Hb, lane);
  cp_async_wait<0>();
  __syncthreads();  // the weights and vectors are in shared memory (the block's only barrier)

  while (run < runs) {
    const int64_t r0 = run * kRunRows + sub * kWarpRows;
    float* Xc = Xb + buf * kWarpRows * LDX;
    cp_async_wait<0>();  // this lane's copies of these rows (and halo) have landed
    // The 6 rows of u before these: the copied halo at a run's start, else the previous rows' own
    // (stored by this lane below).
    float ring[kHaloRows][P];
#pragma unroll
    for (int j = 0; j < kHaloRows; ++j)
#pragma unroll
      for (int e = 0; e < P; ++e) ring[j][e] = Hb[j * C + lane + 32 * e];
    __syncwarp();  // read before the next run's halo may be copied over it
    // The next 16 rows (and the halo, where they start a run) are copied while these compute.
    int64_t nrun = run;
    int nsub = sub + 1;
    if (nsub == kRunSubs || r0 + kWarpRows >= T) {
      nrun = run + wstride;
      nsub = 0;
    }
    if (nrun < runs)
      issue_block_rows<C>(x, ldx, T, nrun * kRunRows + nsub * kWarpRows, nsub == 0, nrun, side, hist, ldh,
                          Xb + (buf ^ 1) * kWarpRows * LDX, Hb, lane);

    float wk[7][P], nwa[P], mba[P], g1a[P], nwb[P];
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const int c = lane + 32 * e;
#pragma unroll
      for (int k = 0; k < 7; ++k) wk[k][e] = Vs[k * C + c];
      nwa[e] = Vs[7 * C + c];
      mba[e] = Vs[8 * C + c];
      g1a[e] = Vs[9 * C + c];
      nwb[e] = Vs[10 * C + c];
    }
    float xc[kWarpRows][P];
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i)
#pragma unroll
      for (int e = 0; e < P; ++e) xc[i][e] = Xc[i * LDX + lane + 32 * e];

    // Mixer: u = rms_norm(x) (row_inv_rms's arithmetic), then the causal conv over u and x += g1 ⊙ y.
    const float inv1 = rows16_inv_rms<C>(xc, eps, lane);
    float uu[kWarpRows][P];
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      const float iv = __shfl_sync(0xffffffffu, inv1, 2 * i);
#pragma unroll
      for (int e = 0; e < P; ++e) uu[i][e] = (xc[i][e] * iv) * nwa[e];
    }
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        float a = 0.f;
#pragma unroll
        for (int k = 0; k < 7; ++k) {
          const int src = i + k - kHaloRows;
          a = fmaf(wk[k][e], src < 0 ? ring[src + kHaloRows][e] : uu[src][e], a);
        }
        const float y = a + mba[e];
        float o = xc[i][e];
        o += g1a[e] * y;
        xc[i][e] = o;
      }
    }
    // Only u's last rows leave the kernel: the caller carries them as the next segment's history.
    if (r0 + kWarpRows > T - kHaloRows) {
#pragma unroll
      for (int i = 0; i < kWarpRows; ++i) {
        const int64_t r = r0 + i;
        if (r >= T - kHaloRows && r < T) {
#pragma unroll
          for (int e = 0; e < P; ++e) u[r * ldu + lane + 32 * e] = uu[i][e];
        }
      }
    }
    if (nsub != 0) {  // the run goes on: its next rows' halo is these rows' last 6 (no copy targets Hb)
#pragma unroll
      for (int j = 0; j < kHaloRows; ++j)
#pragma unroll
        for (int e = 0; e < P; ++e) Hb[j * C + lane + 32 * e] = uu[kWarpRows - kHaloRows + j][e];
    }

    // FFN norm (norm_rows' arithmetic) into Uw as bf16; the mixed rows back into Xc for the residual.
    const float inv2 = rows16_inv_rms<C>(xc, eps, lane);
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
      const float iv = __shfl_sync(0xffffffffu, inv2, 2 * i);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const int c = lane + 32 * e;
        Uw[i * LDU + c] = __float2bfloat16_rn(xc[i][e] * iv * nwb[e]);
        Xc[i * LDX + c] = xc[i][e];
      }
    }
    __syncwarp();
    float acc[C / 8][4];
    ffn_resident_rows<C, kGelu>(Uw, W1s, W2s, b1, acc, lane);
    // x = mixed + g2 ⊙ (acc + b2), as ffn_store applies it.
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = g + 8 * hh;
      const int64_t r = r0 + i;
      if (r >= T) continue;
      float* xr = x + r * ldx;
#pragma unroll
      for (int ct = 0; ct < C / 8; ++ct) {
        const int c = ct * 8 + 2 * t4;
        float2 o = *reinterpret_cast<const float2*>(Xc + i * LDX + c);
        o.x += g2[c] * (acc[ct][2 * hh] + b2[c]);
        o.y += g2[c + 1] * (acc[ct][2 * hh + 1] + b2[c + 1]);
        *reinterpret_cast<float2*>(xr + c) = o;
      }
    }
    __syncwarp();  // every lane is done with Uw and Xc before they are written again
    run = nrun;
    sub = nsub;
    buf ^= 1;
  }
}

// ---- The FFN branch on wgmma (VV_CUDA_FFN_WG=1, sm_90a) at C = 128, E = 4C ---------------------------
// The mma.sync kernels above reach ~140 TFLOP/s at C = 128 (stage 2: 4.1 ms for both encoders over 60 s,
// session 10). Here a persistent block of two warpgroups takes 128-row tiles; per tile:
//  - the tile's x (f32) has been copied into one of two staging buffers during the previous tile;
//    each warp normalises its 16 rows into U (bf16, each warpgroup's 64 rows in 128-byte-swizzled
//    atoms, K-major: wgmma's A operand);
//  - the hidden columns go 64 at a time: the chunk's W1 rows [64][C] and W2 columns [C][64] come by
//    cp.async into one of two swizzled stages (the next chunk's copies in flight), then per warpgroup
//    h = U·W1cᵀ (wgmma m64n64k16, both operands in shared memory), bias and GELU in f32, rounded to
//    bf16 into the A registers of acc += h·W2cᵀ (wgmma m64n128k16, B K-major from the stage);
//  - x = staged x + gamma ⊙ (acc + b2), written once; the next tile's x was copied meanwhile.
// The staging buffers are f32 [128][C] with 16-byte chunk k of row r at chunk k ^ 2·(r mod 8), so the
// epilogue's 8-byte reads (rows g, columns 8j + 2q) and the norm's row reads hit distinct banks.
// Not bitwise the mma.sync kernel's (the tensor cores' own summation order); the CPU reference bound
// of conv_ffn (5e-3 of the update's largest magnitude) holds for both.
constexpr int kWgRows = 128;  // rows a tile: two warpgroups of 64
constexpr uint32_t kWgAtom = 64 * 128;

template <int C>
struct FfnWgCfg {
  static constexpr int E = 4 * C, NCH = E / kHid;
  static constexpr uint32_t kU = 2 * (C / 64) * kWgAtom;                    // U: two warpgroups' atoms
  static constexpr uint32_t kW1 = (C / 64) * kWgAtom;                       // a stage's W1 rows [64][C]
  static constexpr uint32_t kStage = kW1 + static_cast<uint32_t>(C) * 128;  // + W2 columns [C][64]
  // C ≤ 128: x staged in shared memory (two f32 buffers: this tile's, the next one's in flight). C = 256:
  // no room (U and the stages take 192 KB): the norm reads x from global memory and the epilogue adds
  // into it there.
  static constexpr bool kStaged = C <= 128;
  static constexpr uint32_t kX = kStaged ? static_cast<uint32_t>(kWgRows) * C * 4 : 0;  // a staging buffer
  // b1 (E floats) after the staging buffers: the chunk loop's bias reads from shared memory. From global
  // memory they were the loop's longest scoreboard wait (Nsight, H100, the c128 block: the first use of a
  // chunk's bias held 3.4 % of the kernel's stall samples, its loads another 0.9 %; NOTES, session 38).
  // At C = 128 this fills the 227 KB a block may have exactly.
  static constexpr uint32_t kB1 = static_cast<uint32_t>(E) * 4;
  static constexpr size_t smem = 1024 + kU + 2 * kStage + 2 * kX + kB1;
  static_assert(C % 64 == 0 && smem <= 227 * 1024, "wgmma FFN layout");
};

// Float offset of element (r, c) in a staging buffer (16-byte chunks XOR-swizzled by row).
template <int C>
__device__ __forceinline__ int xs_index(int r, int c) {
  return r * C + ((((c >> 2) ^ ((r & 7) << 1))) << 2) + (c & 3);
}

#ifdef VV_WGMMA
// Copies of rows [r0, r0 + 128) of x (rows ≥ T as zeros) into a staging buffer; not committed.
template <int C>
__device__ __forceinline__ void ffn_wg_issue_x(const float* x, int64_t ldx, int64_t T, int64_t r0,
                                               float* Xs) {
  constexpr int kChunks = kWgRows * C / 4;
  for (int i = threadIdx.x; i < kChunks; i += 256) {
    const int r = i / (C / 4), k = i % (C / 4);
    const int64_t row = r0 + r;
    const bool valid = row < T;
    mma::cp_async16_zfill(Xs + xs_index<C>(r, 4 * k), x + (valid ? row : 0) * ldx + 4 * k, valid);
  }
}

// Copies of hidden chunk ch's weights into a stage: W1 rows [64ch, 64ch + 64) as C/64 swizzled atoms
// (K-major, 64 rows × 128 bytes each) at the stage's start (ffn_wg_issue_w1), W2's columns [64ch,
// 64ch + 64) of its C rows as 128-byte swizzled rows (K-major, N = C) after them (ffn_wg_issue_w2);
// not committed.
template <int C>
__device__ __forceinline__ void ffn_wg_issue_w1(const __nv_bfloat16* __restrict__ w1, int ch,
                                                unsigned char* st) {
  for (int i = threadIdx.x; i < 64 * (C / 8); i += 256) {
    const int j = i / (C / 8), c8 = i % (C / 8);
    mma::cp_async16(st + (c8 / 8) * kWgAtom + sw128_offset(j, c8 % 8),
                    w1 + static_cast<int64_t>(ch * kHid + j) * C + c8 * 8);
  }
}
template <int C>
__device__ __forceinline__ void ffn_wg_issue_w2(const __nv_bfloat16* __restrict__ w2, int ch,
                                                unsigned char* st) {
  using K = FfnWgCfg<C>;
  for (int i = threadIdx.x; i < C * 8; i += 256) {
    const int n = i / 8, k8 = i % 8;
    mma::cp_async16(st + K::kW1 + sw128_offset(n, k8),
                    w2 + static_cast<int64_t>(n) * K::E + ch * kHid + k8 * 8);
  }
}
template <int C>
__device__ __forceinline__ void ffn_wg_issue_w(const __nv_bfloat16* __restrict__ w1,
                                               const __nv_bfloat16* __restrict__ w2, int ch,
                                               unsigned char* st) {
  ffn_wg_issue_w1<C>(w1, ch, st);
  ffn_wg_issue_w2<C>(w2, ch, st);
}
#endif

// The mixer branch for ffn_wg_kernel's whole-block form (conv_block at C = 128): the taps [C, 7] (row
// stride ldw), the mixer's norm weight, bias (may be null) and scale, the 6 rows of u before every
// 128-row tile after the first (mixer_halo's side pass), the history (null: zeros), and u, whose rows
// from T − 6 on receive the tile's normalised rows.
template <typename WT>
struct WgMixer {
  const float* hist;
  int64_t ldh;
  const float* side;
  const float* nw;
  const WT* taps;
  int64_t ldw;
  const float* bias;
  const float* gamma;
  float* u;
  int64_t ldu;
};
struct WgNoMixer {};

template <int C, int kGelu, typename Mix>
__global__ void __launch_bounds__(256, 1)
    ffn_wg_kernel(float* x, int64_t ldx, int64_t T, const float* __restrict__ norm_w, float eps,
                  const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                  const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                  const float* __restrict__ gamma, Mix mix) {
  constexpr bool kMix = !std::is_same_v<Mix, WgNoMixer>;
#ifdef VV_WGMMA
  using K = FfnWgCfg<C>;
  constexpr int P = C / 32, NCH = K::NCH, KA = C / 64;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t u_addr = (raw + 1023) & ~1023u;
  const uint32_t w_addr = u_addr + K::kU;  // stage s at w_addr + s·kStage
  unsigned char* Ub = smem_raw + (u_addr - raw);
  unsigned char* Wb = Ub + K::kU;
  float* Xs0 = reinterpret_cast<float*>(Wb + 2 * K::kStage);
  float* const b1s = Xs0 + 2 * (K::kX / 4);  // b1, read by the chunks after the tile loop's first barrier
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3, wg = warp >> 2;
  const int64_t tiles = (T + kWgRows - 1) / kWgRows;
  int64_t tile = blockIdx.x;
  if (tile >= tiles) return;
  for (int i = threadIdx.x; i < K::E; i += 256) b1s[i] = b1[i];
  static_assert(K::kStaged || !kMix, "the mixer form stages x");
  int xb = 0, stage = 0;
  if constexpr (K::kStaged) ffn_wg_issue_x<C>(x, ldx, T, tile * kWgRows, Xs0);
  ffn_wg_issue_w<C>(w1, w2, 0, Wb);
  mma::cp_async_commit();
  bool first = true;
  float acc[C / 8][4];
#pragma unroll
  for (int j = 0; j < C / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  while (tile < tiles) {
    const int64_t r0 = tile * kWgRows;
    const int64_t next = tile + gridDim.x;
    float* Xs = Xs0 + xb * (K::kX / 4);
    // This tile's x: the prologue's group (the only one), or an older group than the newest (this
    // tile's first weight chunk, issued during the previous tile's last chunk).
    if constexpr (K::kStaged) {
      if (first || kMix) {  // the mixer form: the newest group is this tile's halo (below), needed first
        mma::cp_async_wait<0>();
      } else {
        mma::cp_async_wait<1>();
      }
    }
    __syncthreads();
    if constexpr (!K::kStaged) {
      // RMSNorm of the warp's 16 rows from global memory, 4 rows at a time with the next 4 rows' loads
      // in flight (row_inv_rms's arithmetic per row), into U as bf16.
      float xa[2][4][P];
      const auto load4 = [&](int q, float(&dst)[4][P]) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t r = r0 + warp * kWarpRows + 4 * q + i;
#pragma unroll
          for (int e = 0; e < P; ++e) dst[i][e] = r < T ? x[r * ldx + lane + 32 * e] : 0.f;
        }
      };
      load4(0, xa[0]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (q + 1 < 4) load4(q + 1, xa[(q + 1) & 1]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float ss = 0.f;
#pragma unroll
          for (int e = 0; e < P; ++e) ss = fmaf(xa[q & 1][i][e], xa[q & 1][i][e], ss);
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
          const float iv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
          const int rw = (warp & 3) * kWarpRows + 4 * q + i;  // row within the warpgroup's 64
#pragma unroll
          for (int e = 0; e < P; ++e) {
            const int c = lane + 32 * e;
            *reinterpret_cast<__nv_bfloat16*>(Ub + (wg * KA + c / 64) * kWgAtom +
                                              sw128_offset(rw, (c % 64) / 8) + (c % 8) * 2) =
                __float2bfloat16_rn(xa[q & 1][i][e] * iv * norm_w[c]);
          }
        }
      }
    } else {  // RMSNorm of the warp's 16 rows (rows 16·warp.. of the tile) into U as bf16
      float xv[kWarpRows][P];
#pragma unroll
      for (int i = 0; i < kWarpRows; ++i)
#pragma unroll
        for (int e = 0; e < P; ++e) xv[i][e] = Xs[xs_index<C>(warp * kWarpRows + i, lane + 32 * e)];
      if constexpr (kMix) {
        // The mixer first, with conv_mixer_fused's arithmetic: u = rms_norm(x) of the tile's rows into
        // the other staging buffer (free until the next tile's copy, issued after the barrier below),
        // the 6 rows of u before the tile into U's region (free until the FFN norm), then the conv and
        // x += gamma ⊙ y, into xv and in place into the staged x (for the FFN's residual).
        float* Hs = reinterpret_cast<float*>(Ub);
        float* Us = Xs0 + (xb ^ 1) * (K::kX / 4);
        // A block's first tile loads its halo here; the later ones' came by cp.async under the tile
        // before's epilogue (below), waited for at the top.
        if (first) {
          for (int i = threadIdx.x; i < kHaloRows * C; i += 256) {
            const int j = i / C, c = i % C;
            float v = 0.f;
            if (tile > 0) {
              v = mix.side[((tile - 1) * kHaloRows + j) * C + c];
            } else if (mix.hist) {
              v = mix.hist[j * mix.ldh + c];
            }
            Hs[i] = v;
          }
        }
        const float inv1 = rows16_inv_rms<C>(xv, eps, lane);
#pragma unroll
        for (int i = 0; i < kWarpRows; ++i) {
          const float iv = __shfl_sync(0xffffffffu, inv1, 2 * i);
          const int rt = warp * kWarpRows + i;
          const int64_t r = r0 + rt;
#pragma unroll
          for (int e = 0; e < P; ++e) {
            const int c = lane + 32 * e;
            const float uv = (xv[i][e] * iv) * mix.nw[c];
            Us[xs_index<C>(rt, c)] = uv;
            if (r >= T - kHaloRows && r < T) mix.u[r * mix.ldu + c] = uv;
          }
        }
        __syncthreads();  // every row's u and the halo are in shared memory
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const int c = lane + 32 * e;
          float wk[7];
#pragma unroll
          for (int k = 0; k < 7; ++k) wk[k] = to_f32(mix.taps[c * mix.ldw + k]);
          const float bc = mix.bias ? mix.bias[c] : 0.f, gc = mix.gamma[c];
          float win[kWarpRows + kHaloRows];  // u of rows 16·warp − 6 .. 16·warp + 15
#pragma unroll
          for (int t = 0; t < kWarpRows + kHaloRows; ++t) {
            const int rt = warp * kWarpRows - kHaloRows + t;
            win[t] = rt < 0 ? Hs[(rt + kHaloRows) * C + c] : Us[xs_index<C>(rt, c)];
          }
#pragma unroll
          for (int i = 0; i < kWarpRows; ++i) {
            float a = 0.f;
#pragma unroll
            for (int k = 0; k < 7; ++k) a = fmaf(wk[k], win[i + k], a);
            const float y = a + bc;
            float o = xv[i][e];
            o += gc * y;
            xv[i][e] = o;
            Xs[xs_index<C>(warp * kWarpRows + i, c)] = o;
          }
        }
        __syncthreads();  // the halo and u are read: U's region and the other buffer may be written
      } else {
        (void)mix;
      }
      const float inv = rows16_inv_rms<C>(xv, eps, lane);
#pragma unroll
      for (int i = 0; i < kWarpRows; ++i) {
        const float iv = __shfl_sync(0xffffffffu, inv, 2 * i);
        const int rw = (warp & 3) * kWarpRows + i;  // row within the warpgroup's 64
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const int c = lane + 32 * e;
          *reinterpret_cast<__nv_bfloat16*>(Ub + (wg * KA + c / 64) * kWgAtom +
                                            sw128_offset(rw, (c % 64) / 8) + (c % 8) * 2) =
              __float2bfloat16_rn(xv[i][e] * iv * norm_w[c]);
        }
      }
    }
    fence_proxy_async_shared();  // U's stores, for wgmma
    __syncthreads();
    const uint32_t ua = u_addr + wg * KA * kWgAtom;
#pragma unroll 1
    for (int j = 0; j < NCH; ++j) {
      // The next chunk's weights (this tile's j + 1, or the next tile's first) into the other stage,
      // whose last readers (chunk j − 1's wgmmas) were waited for before the barrier that ended it;
      // with the first chunk, the next tile's x into the other staging buffer.
      if (j + 1 < NCH) {
        ffn_wg_issue_w<C>(w1, w2, j + 1, Wb + (stage ^ 1) * K::kStage);
      } else if (next < tiles) {
        ffn_wg_issue_w<C>(w1, w2, 0, Wb + (stage ^ 1) * K::kStage);
      }
      if constexpr (K::kStaged) {
        if (j == 0 && next < tiles)
          ffn_wg_issue_x<C>(x, ldx, T, next * kWgRows, Xs0 + (xb ^ 1) * (K::kX / 4));
      }
      mma::cp_async_commit();
      mma::cp_async_wait<1>();     // chunk j's stage (every group but the newest)
      fence_proxy_async_shared();  // this thread's copies, for wgmma
      __syncthreads();
      const uint32_t sa = w_addr + stage * K::kStage;
      float h[kHid / 8][4];
#pragma unroll
      for (int n = 0; n < kHid / 8; ++n) h[n][0] = h[n][1] = h[n][2] = h[n][3] = 0.f;
      wgmma_fence_operands<kHid / 2>(&h[0][0]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {  // 32 bytes of each 128-byte row per k16 step
        const uint32_t off = (kk / 4) * kWgAtom + 32 * (kk % 4);
        wgmma_bf16<64>(&h[0][0], sw128_desc(ua + off), sw128_desc(sa + off));
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands<kHid / 2>(&h[0][0]);
      uint32_t a[kHid / 16][4];
#pragma unroll
      for (int n = 0; n < kHid / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float bb = b1s[j * kHid + n * 8 + 2 * t4 + e];
          h[n][e] = gelu_of<kGelu>(h[n][e] + bb);
          h[n][2 + e] = gelu_of<kGelu>(h[n][2 + e] + bb);
        }
      }
#pragma unroll
      for (int kk = 0; kk < kHid / 16; ++kk) mma::pack_a_from_c(h[2 * kk], h[2 * kk + 1], a[kk]);
      // acc += h·W2ᵀ: h as the A registers, W2's columns from the stage; waited.
      wgmma_fence_operands<C / 2>(&acc[0][0]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kHid / 16; ++kk)
        wgmma_bf16_rs<C>(&acc[0][0], a[kk], sw128_desc(sa + K::kW1 + 32 * kk));
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands<C / 2>(&acc[0][0]);
      __syncthreads();  // every warpgroup is done with this stage
      stage ^= 1;
    }
    // The mixer form: the next tile's 6 halo rows of u (the side pass's rows before it) into U's region, free
    // now (the last chunk's barrier: every warpgroup's GEMMs of this tile are done), in a group of their own
    // that lands under the epilogue. Loaded at the next tile's start instead, their global loads held 3 % of
    // the kernel's stall samples (Nsight, H100; NOTES, session 38).
    if constexpr (kMix) {
      if (next < tiles) {
        float* Hs = reinterpret_cast<float*>(Ub);
        const float* src = mix.side + (next - 1) * kHaloRows * C;
        for (int i = threadIdx.x; i < kHaloRows * C / 4; i += 256) mma::cp_async16(Hs + 4 * i, src + 4 * i);
        mma::cp_async_commit();
      }
    }
    // x = staged x + gamma ⊙ (acc + b2); acc's rows 16·warp + g + 8h, columns 8n + 2·t4 + e. Unstaged
    // (C = 256): the update added into x in L2 (a reduction, no round trip; one more rounding than the
    // staged form's fused multiply-add, 2^-24 of the update).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int rt = warp * kWarpRows + g + 8 * hh;
      const int64_t r = r0 + rt;
#pragma unroll
      for (int n = 0; n < C / 8; ++n) {
        const int c = n * 8 + 2 * t4;
        if (r < T) {
          if constexpr (K::kStaged) {
            float2 o = *reinterpret_cast<const float2*>(Xs + xs_index<C>(rt, c));
            o.x += gamma[c] * (acc[n][2 * hh] + b2[c]);
            o.y += gamma[c + 1] * (acc[n][2 * hh + 1] + b2[c + 1]);
            *reinterpret_cast<float2*>(x + r * ldx + c) = o;
          } else {
            atomicAdd(x + r * ldx + c, gamma[c] * (acc[n][2 * hh] + b2[c]));
            atomicAdd(x + r * ldx + c + 1, gamma[c + 1] * (acc[n][2 * hh + 1] + b2[c + 1]));
          }
        }
        acc[n][2 * hh] = acc[n][2 * hh + 1] = 0.f;
      }
    }
    first = false;
    xb ^= 1;
    tile = next;
  }
#else
  (void)x, (void)ldx, (void)T, (void)norm_w, (void)eps, (void)w1, (void)b1, (void)w2, (void)b2, (void)gamma;
  (void)mix;
  static_assert(FfnWgCfg<C>::NCH * kHid == FfnWgCfg<C>::E && (kMix || !kMix), "wgmma FFN chunks");
#endif
}

int sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n > 0 ? n : 1;
}

template <int C, int F>
void launch_resident(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                     const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  constexpr size_t smem = resident_smem_bytes<C>();
  allow_dynamic_smem(ffn_resident_kernel<C, F>, smem);
  static int grid_cap = 0;  // per instantiation: blocks resident at once on the whole device
  if (grid_cap == 0) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ffn_resident_kernel<C, F>, kThreads, smem);
    grid_cap = (per_sm > 0 ? per_sm : 1) * sm_count();
  }
  const int64_t T = x.rows();
  const int64_t blocks = std::min<int64_t>((T + kTileRows - 1) / kTileRows, grid_cap);
  ffn_resident_kernel<C, F><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, norm_w.ptr<const float>(), eps, w1.ptr<const __nv_bfloat16>(),
      b1.ptr<const float>(), w2.ptr<const __nv_bfloat16>(), b2.ptr<const float>(), gamma.ptr<const float>());
}

template <int C, int F>
void launch_stream(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                   const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  constexpr size_t smem = stream_smem_bytes<C>();
  allow_dynamic_smem(ffn_stream_kernel<C, F>, smem);
  const int64_t T = x.rows();
  ffn_stream_kernel<C, F><<<static_cast<unsigned>((T + kTileRows - 1) / kTileRows), kThreads, smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, norm_w.ptr<const float>(), eps, w1.ptr<const __nv_bfloat16>(),
      b1.ptr<const float>(), w2.ptr<const __nv_bfloat16>(), b2.ptr<const float>(), gamma.ptr<const float>(),
      static_cast<int>(w1.rows()));
}

template <int C, int RG, int HC, int F>
void launch_wide(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                 const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  using P = Wide<C, RG, HC>;
  allow_dynamic_smem(ffn_wide_kernel<C, RG, HC, F>, P::smem);
  const int64_t T = x.rows();
  ffn_wide_kernel<C, RG, HC, F><<<static_cast<unsigned>((T + P::BR - 1) / P::BR), kThreads, P::smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, norm_w.ptr<const float>(), eps, w1.ptr<const __nv_bfloat16>(),
      b1.ptr<const float>(), w2.ptr<const __nv_bfloat16>(), b2.ptr<const float>(), gamma.ptr<const float>(),
      static_cast<int>(w1.rows()));
}

template <int C, typename WT, int F>
void launch_block(Tensor& x, float eps, const float* hist, int64_t ldh, const float* side,
                  const Backend::ConvBlockWeights& wt, const WT* taps, Tensor& u, cudaStream_t s) {
  using K = BlockCfg<C>;
  allow_dynamic_smem(conv_block_kernel<C, WT, F>, K::smem);
  static int grid_cap = 0;  // per instantiation: blocks resident at once on the whole device
  if (grid_cap == 0) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, conv_block_kernel<C, WT, F>, K::kWarps * 32,
                                                  K::smem);
    grid_cap = (per_sm > 0 ? per_sm : 1) * sm_count();
  }
  const int64_t T = x.rows();
  const int64_t runs = (T + kRunRows - 1) / kRunRows;
  const int64_t blocks = std::min<int64_t>((runs + K::kWarps - 1) / K::kWarps, grid_cap);
  const float* mb = wt.mixer_b.data ? wt.mixer_b.ptr<const float>() : nullptr;
  conv_block_kernel<C, WT, F><<<static_cast<unsigned>(blocks), K::kWarps * 32, K::smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, hist, ldh, side, wt.norm_w.ptr<const float>(), taps,
      wt.mixer_w.row_stride(), mb, wt.gamma.ptr<const float>(), wt.ffn_norm_w.ptr<const float>(),
      wt.w1.ptr<const __nv_bfloat16>(), wt.b1.ptr<const float>(), wt.w2.ptr<const __nv_bfloat16>(),
      wt.b2.ptr<const float>(), wt.ffn_gamma.ptr<const float>(), eps, u.ptr<float>(), u.row_stride());
}

template <int C, int F>
void launch_block_taps(Tensor& x, float eps, const float* hist, int64_t ldh, const float* side,
                       const Backend::ConvBlockWeights& wt, Tensor& u, cudaStream_t s) {
  switch (wt.mixer_w.dtype) {
    case DType::kBF16:
      launch_block<C, __nv_bfloat16, F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const __nv_bfloat16>(), u,
                                        s);
      break;
    case DType::kF16:
      launch_block<C, __half, F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const __half>(), u, s);
      break;
    default:
      launch_block<C, float, F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const float>(), u, s);
      break;
  }
}

template <int C, int F, typename Mix = WgNoMixer>
void launch_ffn_wg(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                   const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s, Mix mix = {}) {
  using K = FfnWgCfg<C>;
  allow_dynamic_smem(ffn_wg_kernel<C, F, Mix>, K::smem);
  static int grid_cap = 0;  // per instantiation: blocks resident at once on the whole device
  if (grid_cap == 0) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ffn_wg_kernel<C, F, Mix>, 256, K::smem);
    grid_cap = (per_sm > 0 ? per_sm : 1) * sm_count();
  }
  const int64_t T = x.rows();
  const int64_t blocks = std::min<int64_t>((T + kWgRows - 1) / kWgRows, grid_cap);
  ffn_wg_kernel<C, F, Mix><<<static_cast<unsigned>(blocks), 256, K::smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, norm_w.ptr<const float>(), eps, w1.ptr<const __nv_bfloat16>(),
      b1.ptr<const float>(), w2.ptr<const __nv_bfloat16>(), b2.ptr<const float>(), gamma.ptr<const float>(),
      mix);
}

// conv_block at C = 128: the wgmma FFN kernel with the mixer in front (after the side pass).
template <int F, typename WT>
void launch_block_wg(Tensor& x, float eps, const float* hist, int64_t ldh, const float* side,
                     const Backend::ConvBlockWeights& wt, const WT* taps, Tensor& u, cudaStream_t s) {
  const WgMixer<WT> mix{hist,
                        ldh,
                        side,
                        wt.norm_w.ptr<const float>(),
                        taps,
                        wt.mixer_w.row_stride(),
                        wt.mixer_b.data ? wt.mixer_b.ptr<const float>() : nullptr,
                        wt.gamma.ptr<const float>(),
                        u.ptr<float>(),
                        u.row_stride()};
  launch_ffn_wg<128, F>(x, wt.ffn_norm_w, eps, wt.w1, wt.b1, wt.w2, wt.b2, wt.ffn_gamma, s, mix);
}

template <int F>
void launch_block_wg_taps(Tensor& x, float eps, const float* hist, int64_t ldh, const float* side,
                          const Backend::ConvBlockWeights& wt, Tensor& u, cudaStream_t s) {
  switch (wt.mixer_w.dtype) {
    case DType::kBF16:
      launch_block_wg<F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const __nv_bfloat16>(), u, s);
      break;
    case DType::kF16:
      launch_block_wg<F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const __half>(), u, s);
      break;
    default:
      launch_block_wg<F>(x, eps, hist, ldh, side, wt, wt.mixer_w.ptr<const float>(), u, s);
      break;
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

bool env_is(const char* name, char c) {
  const char* v = std::getenv(name);
  return v && v[0] == c && v[1] == 0;
}
// A/B switches for a device call: VV_CUDA_FFN_RESIDENT=0 sends C ≤ 64 through the streamed form;
// VV_CUDA_FFN_WIDE=0 leaves C = 512 to the op sequence.
bool resident_enabled() {
  static const bool on = !env_is("VV_CUDA_FFN_RESIDENT", '0');
  return on;
}
bool wide_enabled() {
  static const bool on = !env_is("VV_CUDA_FFN_WIDE", '0');
  return on;
}
// The fused kernels' GELU form: exact_erf (deterministic mode) or VV_CUDA_FFN_FAST_ERF=0 give erff, anything
// else the fast erf. The variable is read once per process.
int gelu_form(bool exact_erf) {
  static const int form = env_is("VV_CUDA_FFN_FAST_ERF", '0') ? kGeluExact : kGeluErfFast;
  return exact_erf ? kGeluExact : form;
}
// fn(std::integral_constant<int, form>) for the GELU form `form`.
template <typename Fn>
void with_gelu(int form, Fn&& fn) {
  if (form == kGeluErfFast) {
    fn(std::integral_constant<int, kGeluErfFast>{});
  } else {
    fn(std::integral_constant<int, kGeluExact>{});
  }
}

// Whether conv_ffn_fused_as takes the resident form (32 and 64 channels; the others ignore it).
bool ffn_resident(int64_t C, int64_t E) {
  return E == 4 * C && resident_enabled();
}
// The dynamic shared memory of the form conv_ffn_fused_as takes for C channels and E hidden units.
size_t ffn_fused_smem(int64_t C, int64_t E) {
  const bool resident = ffn_resident(C, E);
  switch (C) {
    case 32:
      return resident ? resident_smem_bytes<32>() : stream_smem_bytes<32>();
    case 64:
      return resident ? resident_smem_bytes<64>() : stream_smem_bytes<64>();
    case 128:
      return stream_smem_bytes<128>();
    case 512:
      return Wide<512, 4, 32>::smem;
    default:
      return stream_smem_bytes<256>();
  }
}

template <int F>
void conv_ffn_fused_as(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                       const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  const bool resident = ffn_resident(x.cols(), w1.rows());
  switch (x.cols()) {
    case 32:
      if (resident) {
        launch_resident<32, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      } else {
        launch_stream<32, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      }
      break;
    case 64:
      if (resident) {
        launch_resident<64, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      } else {
        launch_stream<64, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      }
      break;
    case 128:
      launch_stream<128, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
    case 512:
      launch_wide<512, 4, 32, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
    default:
      launch_stream<256, F>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
  }
}

}  // namespace

bool ffn_fast_erf(bool exact_erf) {
  return gelu_form(exact_erf) == kGeluErfFast;
}

namespace {
template <int G>
__global__ void gelu_eval_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = gelu_of<G>(x[i]);
}
}  // namespace

void gelu_forms_eval(const float* x, float* out, int64_t n, int form, cudaStream_t s) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  with_gelu(form, [&](auto g) { gelu_eval_kernel<decltype(g)::value><<<blocks, 256, 0, s>>>(x, out, n); });
}

bool conv_ffn_fits(const Tensor& x, const Tensor& norm_w, const Tensor& w1, const Tensor& b1,
                   const Tensor& w2, const Tensor& b2, const Tensor& gamma) {
  const int64_t C = x.cols(), E = w1.rows();
  if (C != 32 && C != 64 && C != 128 && C != 256 && !(C == 512 && wide_enabled())) return false;
  if (E <= 0 || E % kHid != 0 || E > (int64_t{1} << 30)) return false;
  if (x.dtype != DType::kF32 || norm_w.dtype != DType::kF32 || gamma.dtype != DType::kF32 ||
      b1.dtype != DType::kF32 || b2.dtype != DType::kF32 || !b1.data || !b2.data)
    return false;
  if (w1.dtype != DType::kBF16 || w2.dtype != DType::kBF16) return false;
  if (w1.cols() != C || w1.row_stride() != C || w2.rows() != C || w2.cols() != E || w2.row_stride() != E)
    return false;
  // The shared memory of the form conv_ffn_fused_as takes (up to 215 KB at 512 channels; 104 KB at 128):
  // a GPU that cannot give it (sm_86/89: 99 KB) runs the FFN's ops one by one instead.
  if (ffn_fused_smem(C, E) > device_smem_optin()) return false;
  return aligned16(w1.data) && aligned16(w2.data);
}

bool conv_ffn_wg_fits(const Tensor& x, const Tensor& norm_w, const Tensor& w1, const Tensor& b1,
                      const Tensor& w2, const Tensor& b2, const Tensor& gamma) {
  const int64_t C = x.cols();
  if ((C != 128 && C != 256) || w1.rows() != 4 * C || !conv_ffn_fits(x, norm_w, w1, b1, w2, b2, gamma))
    return false;
  if (x.row_stride() % 4 != 0 || !aligned16(x.data)) return false;  // 16-byte copies of x's rows
  return device_smem_optin() >= (C == 128 ? FfnWgCfg<128>::smem : FfnWgCfg<256>::smem);
}

void conv_ffn_wg(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                 const Tensor& w2, const Tensor& b2, const Tensor& gamma, bool exact_erf, cudaStream_t s) {
  if (x.rows() == 0) return;
  with_gelu(gelu_form(exact_erf), [&](auto g) {
    if (x.cols() == 256) {
      launch_ffn_wg<256, decltype(g)::value>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
    } else {
      launch_ffn_wg<128, decltype(g)::value>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
    }
  });
}

bool conv_block_fits(const Tensor& x, const Tensor& history, const Backend::ConvBlockWeights& wt,
                     const Tensor& u, const Tensor& v, bool wgmma) {
  const int64_t T = x.rows(), C = x.cols();
  if (T <= 0 || wt.w1.rows() != 4 * C) return false;
  if (C == 128) {
    if (!wgmma || !conv_ffn_wg_fits(x, wt.ffn_norm_w, wt.w1, wt.b1, wt.w2, wt.b2, wt.ffn_gamma)) return false;
    // The side pass's rows in v are copied 16 bytes at a time (ffn_wg_kernel's halo prefetch).
    if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0) return false;
  } else {
    if (C != 32 && C != 64) return false;
    // 76 KB (C = 32) or 225 KB (C = 64) of shared memory a block: sm_90 has 227 KB, sm_80 163 KB.
    if (device_smem_optin() < (C == 32 ? BlockCfg<32>::smem : BlockCfg<64>::smem)) return false;
    if (!conv_ffn_fits(x, wt.ffn_norm_w, wt.w1, wt.b1, wt.w2, wt.b2, wt.ffn_gamma)) return false;
  }
  if (!conv_mixer_fits(x, wt.norm_w, history, wt.mixer_w, wt.mixer_b, wt.gamma, u, v)) return false;
  // The side pass's rows: 6 rows of C per run (C = 128: per tile) after the first, in v.
  const int64_t R = C == 128 ? kWgRows : kRunRows;
  const int64_t runs = (T + R - 1) / R;
  const int64_t need = (runs - 1) * kHaloRows * C;
  const int64_t have = v.rows() > 0 ? (v.rows() - 1) * v.row_stride() + v.cols() : 0;
  return need == 0 || (v.data && have >= need);
}

void conv_block_fused(Tensor& x, float eps, const Tensor& history, const Backend::ConvBlockWeights& wt,
                      Tensor& u, Tensor& v, bool exact_erf, cudaStream_t s) {
  const int64_t T = x.rows();
  if (T == 0) return;
  float* side = v.ptr<float>();
  const int R = x.cols() == 128 ? kWgRows : kRunRows;
  if (T > R) mixer_halo(x, wt.norm_w, eps, side, R, s);
  const float* hist = history.data && history.rows() > 0 ? history.ptr<const float>() : nullptr;
  const int64_t ldh = hist ? history.row_stride() : 0;
  with_gelu(gelu_form(exact_erf), [&](auto g) {
    constexpr int G = decltype(g)::value;
    if (x.cols() == 128) {
      launch_block_wg_taps<G>(x, eps, hist, ldh, side, wt, u, s);
    } else if (x.cols() == 32) {
      launch_block_taps<32, G>(x, eps, hist, ldh, side, wt, u, s);
    } else {
      launch_block_taps<64, G>(x, eps, hist, ldh, side, wt, u, s);
    }
  });
}

void conv_ffn_fused(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                    const Tensor& w2, const Tensor& b2, const Tensor& gamma, bool exact_erf, cudaStream_t s) {
  if (x.rows() == 0) return;
  with_gelu(gelu_form(exact_erf),
            [&](auto g) { conv_ffn_fused_as<decltype(g)::value>(x, norm_w, eps, w1, b1, w2, b2, gamma, s); });
}

}  // namespace vv::cuda
