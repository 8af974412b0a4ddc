// The CUDA backend's kernels: simple, correct, f32 arithmetic throughout (16-bit weights and cache
// entries are widened on load). Each launcher reads shapes off the Tensor views and enqueues one
// kernel on the given stream. The reductions differ in order from the CPU reference, so results
// agree to f32 rounding, not bitwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_pass.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ void store_ep(float* o, float v, int ep) {
  switch (ep) {
    case static_cast<int>(Epilogue::kGelu): *o = gelu_erf(v); break;
    case static_cast<int>(Epilogue::kAddResidual): *o += v; break;
    default: *o = v; break;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max over the block (blockDim a multiple of 32, ≤ 1024); every thread gets the result.
// `scratch` holds 32 floats; the leading barrier lets callers reuse it back to back.
__device__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nw ? scratch[lane] : 0.f;
  return warp_sum(v);
}
__device__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nw ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Row and column of flat index i over rows of C: 32-bit division when it fits (the usual case), several
// times cheaper than the 64-bit one.
__device__ __forceinline__ void row_col(int64_t i, int64_t C, int64_t& r, int64_t& c) {
  if (i <= 0x7fffffff && C <= 0x7fffffff) {
    const uint32_t ii = static_cast<uint32_t>(i), cc = static_cast<uint32_t>(C), q = ii / cc;
    r = q;
    c = ii - q * cc;
  } else {
    r = i / C;
    c = i - r * C;
  }
}

#define VV_DISPATCH_FLOAT(dtype, T, ...)  \
  switch (dtype) {                        \
    case DType::kBF16: {                  \
      using T = __nv_bfloat16;            \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    case DType::kF16: {                   \
      using T = __half;                   \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    default: {                            \
      using T = float;                    \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
  }

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }
bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- skinny GEMM ------------------------------------------------------------------------------

// Eight consecutive weights as f32 (16-byte loads for 16-bit types, two for f32).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* f) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void load8(const __half* p, float* f) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float* f) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// WPC warps per output column n (split over K, partial sums reduced through shared memory), 8 / WPC
// columns per block of 8 warps: a narrow weight (k/v: 512 columns) still fills every SM. Each warp
// walks its part of the weight row once per MT activation rows.
template <typename WT, int MT, bool kVec, int WPC>
__global__ void __launch_bounds__(256) gemv_kernel(const float* __restrict__ a, int64_t lda,
                                                   const WT* __restrict__ w, int64_t ldw, int64_t M, int64_t N,
                                                   int64_t K, const float* __restrict__ bias, float* out,
                                                   int64_t ldo, int ep) {
  __shared__ float part[8][MT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = warp % WPC;  // this warp's share of K
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (8 / WPC) + warp / WPC;
  const bool live = n < N;
  const WT* wr = w + (live ? n : 0) * ldw;
  const float b = live && bias ? bias[n] : 0.f;
  for (int64_t m0 = 0; m0 < M; m0 += MT) {
    const int mc = static_cast<int>(M - m0 < MT ? M - m0 : MT);
    float acc[MT];
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[i] = 0.f;
    if (live) {
      if constexpr (kVec) {
#pragma unroll 4
        for (int64_t k = (static_cast<int64_t>(sub) * 32 + lane) * 8; k < K; k += 256 * WPC) {
          float wf[8];
          load8(wr + k, wf);
#pragma unroll
          for (int i = 0; i < MT; ++i) {
            if (i < mc) {
              const float4* ap = reinterpret_cast<const float4*>(a + (m0 + i) * lda + k);
              const float4 x0 = __ldg(ap), x1 = __ldg(ap + 1);
              float s = acc[i];
              s = fmaf(x0.x, wf[0], s);
              s = fmaf(x0.y, wf[1], s);
              s = fmaf(x0.z, wf[2], s);
              s = fmaf(x0.w, wf[3], s);
              s = fmaf(x1.x, wf[4], s);
              s = fmaf(x1.y, wf[5], s);
              s = fmaf(x1.z, wf[6], s);
              s = fmaf(x1.w, wf[7], s);
              acc[i] = s;
            }
          }
        }
      } else {
        for (int64_t k = static_cast<int64_t>(sub) * 32 + lane; k < K; k += 32 * WPC) {
          const float wv = to_f32(wr[k]);
#pragma unroll
          for (int i = 0; i < MT; ++i)
            if (i < mc) acc[i] = fmaf(a[(m0 + i) * lda + k], wv, acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) acc[i] = warp_sum(acc[i]);
    if constexpr (WPC > 1) {
      __syncthreads();  // the previous row group's partials are read
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < MT; ++i) part[warp][i] = acc[i];
      }
      __syncthreads();
      if (sub == 0 && lane == 0) {
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          float t = part[warp][i];
          for (int u = 1; u < WPC; ++u) t += part[warp + u][i];
          acc[i] = t;
        }
      }
    }
    if (live && sub == 0 && lane == 0) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
        if (i < mc) store_ep(out + (m0 + i) * ldo + n, acc[i] + b, ep);
    }
  }
}

template <typename WT, int MT, int WPC>
void launch_gemv_wpc(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, bool vec,
                     cudaStream_t s) {
  const int64_t M = out.rows(), N = out.cols(), K = a.cols();
  const unsigned grid = blocks_for(N, 8 / WPC);
  auto* ap = a.ptr<const float>();
  auto* wp = static_cast<const WT*>(w.data);
  if (vec) {
    gemv_kernel<WT, MT, true, WPC><<<grid, 256, 0, s>>>(ap, a.row_stride(), wp, w.row_stride(), M, N, K, bias,
                                                        out.ptr<float>(), out.row_stride(), static_cast<int>(ep));
  } else {
    gemv_kernel<WT, MT, false, WPC><<<grid, 256, 0, s>>>(ap, a.row_stride(), wp, w.row_stride(), M, N, K, bias,
                                                         out.ptr<float>(), out.row_stride(), static_cast<int>(ep));
  }
}

template <typename WT, int MT>
void launch_gemv(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, cudaStream_t s) {
  const int64_t N = out.cols(), K = a.cols();
  const bool vec = K % 8 == 0 && w.row_stride() % 8 == 0 && a.row_stride() % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
  // Enough warps for ~48 per SM on a 132-SM part, and at least 512 weights of a row per warp.
  const int64_t want = (6336 + N - 1) / N;
  const int64_t cap = std::max<int64_t>(1, K / 512);
  const int64_t wpc = std::min(want, cap);
  if (wpc >= 8) {
    launch_gemv_wpc<WT, MT, 8>(a, w, bias, out, ep, vec, s);
  } else if (wpc >= 4) {
    launch_gemv_wpc<WT, MT, 4>(a, w, bias, out, ep, vec, s);
  } else if (wpc >= 2) {
    launch_gemv_wpc<WT, MT, 2>(a, w, bias, out, ep, vec, s);
  } else {
    launch_gemv_wpc<WT, MT, 1>(a, w, bias, out, ep, vec, s);
  }
}

// Several one-row GEMMs over the same activation row in one launch (q, k and v of a decode step):
// block b belongs to the job whose block range holds it; 8 output columns per block, one per warp.
template <typename WT, bool kVec>
__global__ void __launch_bounds__(256) gemv_multi_kernel(const float* __restrict__ a, int64_t K, GemvJobs jobs) {
  int jx = 0;
#pragma unroll
  for (int t = 1; t < kMaxGemvJobs; ++t)
    if (t < jobs.count && blockIdx.x >= jobs.j[t].block_begin) jx = t;
  const GemvJob& J = jobs.j[jx];
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x - J.block_begin) * 8 + (threadIdx.x >> 5);
  if (n >= J.N) return;
  const WT* wr = static_cast<const WT*>(J.w) + n * J.ldw;
  float acc = 0.f;
  if constexpr (kVec) {
#pragma unroll 4
    for (int64_t k = lane * 8; k < K; k += 256) {
      float wf[8];
      load8(wr + k, wf);
      const float4* ap = reinterpret_cast<const float4*>(a + k);
      const float4 x0 = __ldg(ap), x1 = __ldg(ap + 1);
      acc = fmaf(x0.x, wf[0], acc);
      acc = fmaf(x0.y, wf[1], acc);
      acc = fmaf(x0.z, wf[2], acc);
      acc = fmaf(x0.w, wf[3], acc);
      acc = fmaf(x1.x, wf[4], acc);
      acc = fmaf(x1.y, wf[5], acc);
      acc = fmaf(x1.z, wf[6], acc);
      acc = fmaf(x1.w, wf[7], acc);
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) acc = fmaf(a[k], to_f32(wr[k]), acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) store_ep(J.out + n, acc + (J.bias ? J.bias[n] : 0.f), J.ep);
}

// ---- tiled f32 GEMM ---------------------------------------------------------------------------

constexpr int kBM = 64, kBN = 64, kBK = 16;

// 256 threads, each a 4×4 block of outputs (rows ty+16i, columns tx+16j); k ascending per output.
template <typename WT>
__global__ void __launch_bounds__(256) gemm_f32_kernel(const float* __restrict__ a, int64_t lda,
                                                       const WT* __restrict__ w, int64_t ldw, int64_t M, int64_t N,
                                                       int64_t K, const float* __restrict__ bias, float* out,
                                                       int64_t ldo, int ep) {
  __shared__ float as[kBK][kBM + 1];
  __shared__ float ws[kBK][kBN + 1];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    for (int i = threadIdx.x; i < kBM * kBK; i += 256) {
      const int r = i / kBK, c = i % kBK;
      const int64_t gm = m0 + r, gn = n0 + r, gk = k0 + c;
      as[c][r] = gm < M && gk < K ? a[gm * lda + gk] : 0.f;
      ws[c][r] = gn < N && gk < K ? to_f32(w[gn * ldw + gk]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float av[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = as[kk][ty + 16 * i];
        wv[i] = ws[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx + 16 * j;
      if (n < N) store_ep(out + m * ldo + n, acc[i][j] + (bias ? bias[n] : 0.f), ep);
    }
  }
}

template <typename T>
__global__ void pack_rows_kernel(const float* __restrict__ a, int64_t lda, int64_t M, int64_t K, T* __restrict__ dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * K) return;
  int64_t m, k;
  row_col(i, K, m, k);
  dst[i] = from_f32<T>(a[m * lda + k]);
}

// The same, four columns per thread (K and lda a multiple of 4, 16-byte aligned rows).
template <typename T>
__global__ void pack_rows4_kernel(const float* __restrict__ a, int64_t lda, int64_t M, int64_t K,
                                  T* __restrict__ dst) {
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t q = K / 4;
  if (i4 >= M * q) return;
  const int64_t m = i4 / q, k = (i4 % q) * 4;
  const float4 v = *reinterpret_cast<const float4*>(a + m * lda + k);
  T* d = dst + m * K + k;
  d[0] = from_f32<T>(v.x);
  d[1] = from_f32<T>(v.y);
  d[2] = from_f32<T>(v.z);
  d[3] = from_f32<T>(v.w);
}

__global__ void gelu_kernel(float* x, int64_t ld, int64_t R, int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * C) return;
  int64_t r, c;
  row_col(i, C, r, c);
  float* p = x + r * ld + c;
  *p = gelu_erf(*p);
}

// h[r, c] = bf16(gelu_erf(h[r, c] + bias[c])) in place over rows × E contiguous bf16 values, eight per
// thread (E % 8 == 0, h and bias 16-byte aligned) or one.
template <int kGelu>
__global__ void gelu_bias_bf16_kernel(__nv_bfloat16* h, const float* __restrict__ bias, int64_t n, int64_t E,
                                      bool by8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (by8) {
    if (i * 8 >= n) return;
    uint4* p = reinterpret_cast<uint4*>(h) + i;
    const float4* bp = reinterpret_cast<const float4*>(bias + (i * 8) % E);
    const float4 b0 = __ldg(bp), b1 = __ldg(bp + 1);
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    uint4 u = *p;
    __nv_bfloat162* e = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(e[k]);
      e[k] = __floats2bfloat162_rn(gelu_of<kGelu>(f.x + b[2 * k]), gelu_of<kGelu>(f.y + b[2 * k + 1]));
    }
    *p = u;
    return;
  }
  if (i < n) h[i] = __float2bfloat16_rn(gelu_of<kGelu>(__bfloat162float(h[i]) + bias[i % E]));
}

// ---- row ops ----------------------------------------------------------------------------------

template <typename WT>
__global__ void rms_norm_kernel(const float* x, int64_t ldx, const WT* __restrict__ w, float eps, float* out,
                                int64_t ldo, int64_t C) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * ldx;
  float* orow = out + blockIdx.x * ldo;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float n = xr[c] * inv;
    orow[c] = n * to_f32(w[c]);
  }
}

// Narrow rows (the encoders' 32..1024 channels over ~10^6 time steps): one warp per row.
template <typename WT>
__global__ void rms_norm_warp_kernel(const float* x, int64_t ldx, const WT* __restrict__ w, float eps, float* out,
                                     int64_t ldo, int64_t R, int64_t C) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= R) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + r * ldx;
  float* orow = out + r * ldo;
  float ss = 0.f;
  for (int64_t c = lane; c < C; c += 32) ss = fmaf(xr[c], xr[c], ss);
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32) {
    const float n = xr[c] * inv;
    orow[c] = n * to_f32(w[c]);
  }
}

// Values a thread of rms_norm_pack_kernel keeps in registers (rows up to 8 × its 512 threads).
constexpr int kNormRegs = 8;

// rms_norm (the same two reduction orders, the same arithmetic) that also writes each output value
// rounded to PT into pack, contiguous [rows, C]: what pack_rows_half would make of out. out null: only
// the pack is written.
template <typename WT, typename PT>
__global__ void rms_norm_pack_kernel(const float* x, int64_t ldx, const WT* __restrict__ w, float eps, float* out,
                                     int64_t ldo, int64_t C, PT* __restrict__ pack) {
  __shared__ float scratch[32];
  pdl_wait();     // x is the previous kernel's output, and pack may be its operand
  pdl_trigger();  // the next kernel (a GEMM) may start streaming its weights
  const float* xr = x + blockIdx.x * ldx;
  float* orow = out == nullptr ? nullptr : out + blockIdx.x * ldo;
  PT* prow = pack + blockIdx.x * C;
  if (C <= kNormRegs * static_cast<int64_t>(blockDim.x)) {
    // A row of at most kNormRegs values a thread (the 7B's 3,584 at 512 threads: 7): its values loaded
    // at once into registers, then summed in the loop's order (the same bits, not 7 dependent loads).
    // The weights are loaded with them, not after the sum (one memory latency fewer).
    float xv[kNormRegs], wv[kNormRegs];
#pragma unroll
    for (int j = 0; j < kNormRegs; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      xv[j] = c < C ? xr[c] : 0.f;
      wv[j] = c < C ? to_f32(w[c]) : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kNormRegs; ++j)
      if (threadIdx.x + static_cast<int64_t>(j) * blockDim.x < C) ss = fmaf(xv[j], xv[j], ss);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
#pragma unroll
    for (int j = 0; j < kNormRegs; ++j) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (c < C) {
        const float v = xv[j] * inv * wv[j];
        if (orow != nullptr) orow[c] = v;
        prow[c] = from_f32<PT>(v);
      }
    }
    return;
  }
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float n = xr[c] * inv;
    const float v = n * to_f32(w[c]);
    if (orow != nullptr) orow[c] = v;
    prow[c] = from_f32<PT>(v);
  }
}

template <typename WT, typename PT>
__global__ void rms_norm_pack_warp_kernel(const float* x, int64_t ldx, const WT* __restrict__ w, float eps,
                                          float* out, int64_t ldo, int64_t R, int64_t C, PT* __restrict__ pack) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= R) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + r * ldx;
  float* orow = out == nullptr ? nullptr : out + r * ldo;
  PT* prow = pack + r * C;
  float ss = 0.f;
  for (int64_t c = lane; c < C; c += 32) ss = fmaf(xr[c], xr[c], ss);
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32) {
    const float n = xr[c] * inv;
    const float v = n * to_f32(w[c]);
    if (orow != nullptr) orow[c] = v;
    prow[c] = from_f32<PT>(v);
  }
}

template <typename WT>
__global__ void dwconv_kernel(const float* __restrict__ x, int64_t ldx, const float* __restrict__ hist, int64_t ldh,
                              const WT* __restrict__ w, int64_t ldw, const float* __restrict__ bias, float* out,
                              int64_t ldo, int64_t T, int64_t C, int K) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * C) return;
  int64_t t, c;
  row_col(i, C, t, c);
  float acc = 0.f;
  for (int k = 0; k < K; ++k) {
    const int64_t src = t + k - (K - 1);
    float xv = 0.f;
    if (src >= 0) {
      xv = x[src * ldx + c];
    } else if (hist) {
      xv = hist[(src + K - 1) * ldh + c];
    }
    acc = fmaf(to_f32(w[c * ldw + k]), xv, acc);
  }
  out[t * ldo + c] = bias ? acc + bias[c] : acc;
}

template <typename ST>
__global__ void add_scaled_kernel(float* x, int64_t ldx, const ST* __restrict__ scale, const float* y, int64_t ldy,
                                  int64_t R, int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * C) return;
  int64_t r, c;
  row_col(i, C, r, c);
  x[r * ldx + c] += to_f32(scale[c]) * y[r * ldy + c];
}

// add_scaled_kernel four columns a thread (C, ldx, ldy multiples of 4, 16-byte aligned rows): the same
// x + s·y per element (one fused multiply-add), so the same bits. The cuBLASLt FFN's x += gamma ⊙ v at
// C ≥ 512: 11.3 µs a 4,096-row c512 tile one column a thread (Nsight, H100, NOTES session 38).
template <typename ST>
__global__ void add_scaled4_kernel(float* __restrict__ x, int64_t ldx, const ST* __restrict__ scale,
                                   const float* __restrict__ y, int64_t ldy, int64_t R, int64_t C) {
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i4 >= R * (C / 4)) return;
  int64_t r, c;
  row_col(i4, C / 4, r, c);
  c *= 4;
  float4* o = reinterpret_cast<float4*>(x + r * ldx + c);
  float4 v = *o;
  const float4 w = *reinterpret_cast<const float4*>(y + r * ldy + c);
  v.x += to_f32(scale[c]) * w.x;
  v.y += to_f32(scale[c + 1]) * w.y;
  v.z += to_f32(scale[c + 2]) * w.z;
  v.w += to_f32(scale[c + 3]) * w.w;
  *o = v;
}

__global__ void add_kernel(const float* a, int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldo,
                           int64_t R, int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * C) return;
  int64_t r, c;
  row_col(i, C, r, c);
  out[r * ldo + c] = a[r * lda + c] + b[r * ldb + c];
}

// out += b, four columns per thread (C, ldo, ldb a multiple of 4, 16-byte aligned rows).
__global__ void add_into4_kernel(float* __restrict__ out, int64_t ldo, const float* __restrict__ b,
                                 int64_t ldb, int64_t R, int64_t C) {
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t q = C / 4;
  if (i4 >= R * q) return;
  const int64_t r = i4 / q, c = (i4 % q) * 4;
  float4* o = reinterpret_cast<float4*>(out + r * ldo + c);
  const float4 x = *o, y = *reinterpret_cast<const float4*>(b + r * ldb + c);
  *o = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

__global__ void silu_mul_kernel(const float* __restrict__ g, int64_t ldg, float* __restrict__ out, int64_t ldo,
                                int64_t R, int64_t I) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * I) return;
  int64_t r, c;
  row_col(i, I, r, c);
  const float* gr = g + r * ldg;
  out[r * ldo + c] = silu(gr[c]) * gr[I + c];
}

// silu_mul that also writes each output value rounded to PT into pack, contiguous [R, I].
// The same, four columns per thread (I, ldg, ldo a multiple of 4 and 16-byte aligned rows): one
// 16-byte load of gate and of up, a 16-byte store and four pack stores each.
template <typename PT>
__global__ void silu_mul_pack4_kernel(const float* __restrict__ g, int64_t ldg, float* __restrict__ out,
                                      int64_t ldo, int64_t R, int64_t I, PT* __restrict__ pack) {
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t q = I / 4;
  if (i4 >= R * q) return;
  const int64_t r = i4 / q, c = (i4 % q) * 4;
  const float* gr = g + r * ldg;
  const float4 a = *reinterpret_cast<const float4*>(gr + c), b = *reinterpret_cast<const float4*>(gr + I + c);
  const float4 v = make_float4(silu(a.x) * b.x, silu(a.y) * b.y, silu(a.z) * b.z, silu(a.w) * b.w);
  *reinterpret_cast<float4*>(out + r * ldo + c) = v;
  PT* p = pack + r * I + c;
  p[0] = from_f32<PT>(v.x);
  p[1] = from_f32<PT>(v.y);
  p[2] = from_f32<PT>(v.z);
  p[3] = from_f32<PT>(v.w);
}

// silu_mul over a bf16 gate_up, bf16 out only; four columns per thread where I % 4 == 0.
__global__ void silu_mul_bf16_pack_kernel(const __nv_bfloat16* __restrict__ g, int64_t M, int64_t I,
                                          __nv_bfloat16* __restrict__ pack) {
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (I % 4 == 0) {
    const int64_t q = I / 4;
    if (i4 >= M * q) return;
    const int64_t r = i4 / q, c = (i4 % q) * 4;
    const __nv_bfloat16* gr = g + r * 2 * I;
    const uint2 a = *reinterpret_cast<const uint2*>(gr + c), b = *reinterpret_cast<const uint2*>(gr + I + c);
    const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
    uint2 o;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 x = __bfloat1622float2(a2[h]), y = __bfloat1622float2(b2[h]);
      o2[h] = __floats2bfloat162_rn(silu(x.x) * y.x, silu(x.y) * y.y);
    }
    *reinterpret_cast<uint2*>(pack + r * I + c) = o;
    return;
  }
  if (i4 >= M * I) return;
  const int64_t r = i4 / I, c = i4 % I;
  const __nv_bfloat16* gr = g + r * 2 * I;
  pack[i4] = __float2bfloat16_rn(silu(__bfloat162float(gr[c])) * __bfloat162float(gr[I + c]));
}

template <typename PT>
__global__ void silu_mul_pack_kernel(const float* __restrict__ g, int64_t ldg, float* __restrict__ out, int64_t ldo,
                                     int64_t R, int64_t I, PT* __restrict__ pack) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * I) return;
  int64_t r, c;
  row_col(i, I, r, c);
  const float* gr = g + r * ldg;
  const float v = silu(gr[c]) * gr[I + c];
  out[r * ldo + c] = v;
  pack[i] = from_f32<PT>(v);
}

template <typename TT>
__global__ void embedding_kernel(const TT* __restrict__ table, int64_t ldt, int64_t V, const int32_t* __restrict__ ids,
                                 float* __restrict__ out, int64_t ldo, int64_t R, int64_t H) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * H) return;
  int64_t r, c;
  row_col(i, H, r, c);
  const int32_t id = ids[r];
  out[r * ldo + c] = id < 0 || id >= V ? 0.f : to_f32(table[id * ldt + c]);
}

__global__ void rope_kernel(float* x, int64_t ldx, const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            int64_t R, int heads, int head_dim) {
  const int half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * heads * half) return;
  const int f = static_cast<int>(i % half);
  const int h = static_cast<int>((i / half) % heads);
  const int64_t r = i / (static_cast<int64_t>(half) * heads);
  const float phi = static_cast<float>(pos[r]) * inv_freq[f];
  const float c = cosf(phi), s = sinf(phi);
  float* v = x + r * ldx + static_cast<int64_t>(h) * head_dim;
  rope_rotate(v[f], v[f + half], c, s, v[f], v[f + half]);  // shared with the fused decode kernel
}

__device__ __forceinline__ int64_t kv_slot(const int32_t* tables, int64_t ld, int bs, int32_t seq, int32_t pos) {
  return static_cast<int64_t>(tables[seq * ld + pos / bs]) * bs + pos % bs;
}

template <typename CT>
__global__ void kv_write_kernel(const float* __restrict__ k, int64_t ldk, const float* __restrict__ v, int64_t ldv,
                                const int32_t* __restrict__ row_seq, const int32_t* __restrict__ row_pos,
                                const int32_t* __restrict__ tables, int64_t ldt, int bs, CT* kc, CT* vc,
                                int64_t ldc, int64_t R, int64_t width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * width) return;
  int64_t r, c;
  row_col(i, width, r, c);
  const int64_t slot = kv_slot(tables, ldt, bs, row_seq[r], row_pos[r]);
  kc[slot * ldc + c] = from_f32<CT>(k[r * ldk + c]);
  vc[slot * ldc + c] = from_f32<CT>(v[r * ldv + c]);
}

// One block of 128 threads per (row, query head): keys in tiles of 128 with an online softmax.
// Warps score the keys of a tile (lanes split head_dim), then each thread accumulates p·V for its
// output dimensions. Shared memory: q [D], acc [D], p [128], slot [128].
constexpr int kAttnTile = 128;

template <typename CT>
__global__ void __launch_bounds__(kAttnTile) paged_attention_kernel(
    const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
    const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt, int bs,
    const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc, int heads, int kv_heads, int D, float scale,
    float* __restrict__ out, int64_t ldo) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* acc = qs + D;
  float* ps = acc + D;
  int64_t* slots = reinterpret_cast<int64_t*>(ps + kAttnTile);  // 8-byte aligned: D*2+128 floats, D even
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int32_t seq = row_seq[r], pos = row_pos[r];
  const int64_t kv_off = static_cast<int64_t>(h / (heads / kv_heads)) * D;
  const float* qh = q + r * ldq + static_cast<int64_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    qs[d] = qh[d];
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int L = pos + 1;
  for (int j0 = 0; j0 < L; j0 += kAttnTile) {
    __syncthreads();  // qs written / the previous tile's ps and slots consumed
    const int tile = min(kAttnTile, L - j0);
    for (int jj = warp; jj < tile; jj += nw) {
      const int64_t slot = kv_slot(tables, ldt, bs, seq, j0 + jj);
      const CT* kr = kc + slot * ldc + kv_off;
      float s = 0.f;
      for (int d = lane; d < D; d += 32) s = fmaf(qs[d], to_f32(kr[d]), s);
      s = warp_sum(s);
      if (lane == 0) {
        ps[jj] = s * scale;
        slots[jj] = slot;
      }
    }
    __syncthreads();
    const float sv = threadIdx.x < tile ? ps[threadIdx.x] : -INFINITY;
    const float m_new = fmaxf(m, block_max(sv, scratch));
    const float corr = expf(m - m_new);  // 0 on the first tile (m = −inf)
    const float e = threadIdx.x < tile ? expf(sv - m_new) : 0.f;
    if (threadIdx.x < tile) ps[threadIdx.x] = e;
    l = l * corr + block_sum(e, scratch);  // its barriers also publish ps
    m = m_new;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float a = acc[d] * corr;
      for (int jj = 0; jj < tile; ++jj) a = fmaf(ps[jj], to_f32(vc[slots[jj] * ldc + kv_off + d]), a);
      acc[d] = a;
    }
  }
  float* oh = out + r * ldo + static_cast<int64_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) oh[d] = acc[d] / l;
}

// Tiled paged attention: one block (8 warps) per (tile of QT rows, kv head, key split). The query
// vectors of the tile's rows for every query head of the kv head's group (≤ 32) share each K/V tile
// of 32 keys, loaded once into shared memory. Within a warp, lane = key for the scores (no
// shuffles per pair), then lane = output dimension for p·V. Rows of a tile that belong to different
// sequences are taken in passes, one sequence at a time. With several key splits, each block leaves
// unnormalised partials (acc, max, sum) that attn_combine_kernel merges.
// One kernel for the data flow of a whole tile; splitting it would hide how the tile is reused.
constexpr int kKeyTile = 32;
constexpr int kTileWarps = 8;
constexpr int kQvPerWarp = 4;  // query vectors per warp: a tile has at most 32 = 8 warps × 4

template <typename CT, int DPL>
__global__ void __launch_bounds__(kTileWarps * 32) attn_tile_kernel(
    const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
    const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt, int bs,
    const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc, int64_t n, int heads, int kv_heads, int D,
    float scale, int QT, int chunk, float* __restrict__ out, int64_t ldo, float* __restrict__ ws_acc,
    float* __restrict__ ws_ml) {
  extern __shared__ float sm[];
  const int G = heads / kv_heads;
  const int nq = QT * G;
  float* Qs = sm;                         // [nq][D]
  float* Ks = Qs + 32 * D;                // [32][D+1]: lane j reads row j, padded against bank conflicts
  float* Vs = Ks + kKeyTile * (D + 1);    // [32][D]
  __shared__ int64_t slots[kKeyTile];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * QT;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z, nsplit = gridDim.z;
  const int kbeg = split * chunk;
  const int rows_here = static_cast<int>(n - r0 < QT ? n - r0 : QT);
  unsigned done = 0;
  while (true) {
    unsigned active;
    int32_t seq;
    int kend;
    if (!next_attention_pass(row_seq, row_pos, r0, rows_here, done, active, seq, kend)) break;
    kend = min(kend, kbeg + chunk);
    __syncthreads();  // the previous pass is done with Qs
    for (int idx = threadIdx.x; idx < nq * D; idx += blockDim.x) {
      const int qv = idx / D, d = idx % D, i = qv / G, g = qv % G;
      if ((active >> i) & 1u) Qs[idx] = q[(r0 + i) * ldq + static_cast<int64_t>(kvh * G + g) * D + d];
    }
    float acc[kQvPerWarp][DPL], m[kQvPerWarp], l[kQvPerWarp];
#pragma unroll
    for (int t = 0; t < kQvPerWarp; ++t) {
      m[t] = -INFINITY;
      l[t] = 0.f;
#pragma unroll
      for (int e = 0; e < DPL; ++e) acc[t][e] = 0.f;
    }
    for (int j0 = kbeg; j0 < kend; j0 += kKeyTile) {
      __syncthreads();  // Qs written; the previous K/V tile consumed
      if (threadIdx.x < kKeyTile) {
        const int j = j0 + threadIdx.x;
        slots[threadIdx.x] = j < kend ? static_cast<int64_t>(tables[seq * ldt + j / bs]) * bs + j % bs : -1;
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < kKeyTile * D; idx += blockDim.x) {
        const int jj = idx / D, d = idx % D;
        const int64_t sl = slots[jj];
        float kv = 0.f, vv = 0.f;
        if (sl >= 0) {
          kv = to_f32(kc[sl * ldc + static_cast<int64_t>(kvh) * D + d]);
          vv = to_f32(vc[sl * ldc + static_cast<int64_t>(kvh) * D + d]);
        }
        Ks[jj * (D + 1) + d] = kv;
        Vs[jj * D + d] = vv;
      }
      __syncthreads();
      // The warp's query vectors go through the tile together: each K element and each V element
      // read from shared memory serves all of them (register blocking over query vectors).
      bool own[kQvPerWarp];
      int qpos[kQvPerWarp];
#pragma unroll
      for (int t = 0; t < kQvPerWarp; ++t) {
        const int qv = warp + kTileWarps * t;
        const int i = qv / G;
        own[t] = qv < nq && ((active >> i) & 1u) && j0 <= row_pos[r0 + i];  // uniform over the warp
        qpos[t] = own[t] ? row_pos[r0 + i] : -1;
      }
      float sc[kQvPerWarp];
#pragma unroll
      for (int t = 0; t < kQvPerWarp; ++t) sc[t] = 0.f;
      const float* kr = Ks + lane * (D + 1);
#pragma unroll 4
      for (int d = 0; d < D; ++d) {
        const float kd = kr[d];
#pragma unroll
        for (int t = 0; t < kQvPerWarp; ++t)
          if (own[t]) sc[t] = fmaf(Qs[(warp + kTileWarps * t) * D + d], kd, sc[t]);
      }
      const int j = j0 + lane;
      float p[kQvPerWarp];
#pragma unroll
      for (int t = 0; t < kQvPerWarp; ++t) {
        p[t] = 0.f;
        if (!own[t]) continue;
        const bool masked = j > qpos[t] || j >= kend;
        const float sv = masked ? -INFINITY : sc[t] * scale;
        const float mn = fmaxf(m[t], warp_max(sv));
        p[t] = masked ? 0.f : expf(sv - mn);
        const float corr = expf(m[t] - mn);  // 0 while m is −inf
        l[t] = l[t] * corr + warp_sum(p[t]);
        m[t] = mn;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[t][e] *= corr;
      }
      for (int jj = 0; jj < kKeyTile; ++jj) {
        float vv[DPL];
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
          const int dd = lane + 32 * e;
          vv[e] = dd < D ? Vs[jj * D + dd] : 0.f;
        }
#pragma unroll
        for (int t = 0; t < kQvPerWarp; ++t) {
          if (!own[t]) continue;
          const float pj = __shfl_sync(0xffffffffu, p[t], jj);
#pragma unroll
          for (int e = 0; e < DPL; ++e) acc[t][e] = fmaf(pj, vv[e], acc[t][e]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kQvPerWarp; ++t) {
      const int qv = warp + kTileWarps * t;
      if (qv >= nq) break;
      const int i = qv / G, h = kvh * G + qv % G;
      if (!((active >> i) & 1u)) continue;
      const int64_t row = r0 + i;
      if (nsplit == 1) {
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
          const int dd = lane + 32 * e;
          if (dd < D) out[row * ldo + static_cast<int64_t>(h) * D + dd] = acc[t][e] / l[t];
        }
      } else {
        const int64_t base = (static_cast<int64_t>(split) * n + row) * heads + h;
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
          const int dd = lane + 32 * e;
          if (dd < D) ws_acc[base * D + dd] = acc[t][e];
        }
        if (lane == 0) {
          ws_ml[base * 2] = m[t];
          ws_ml[base * 2 + 1] = l[t];
        }
      }
    }
  }
}

// Merges the key splits of attn_tile_kernel: out = Σ_s acc_s·e^(m_s−m) / Σ_s l_s·e^(m_s−m). Each
// split's weight is computed once into shared memory, so the loop over splits issues independent loads.
__global__ void attn_combine_kernel(const float* __restrict__ ws_acc, const float* __restrict__ ws_ml, int nsplit,
                                    int64_t n, int heads, int D, float* __restrict__ out, int64_t ldo) {
  extern __shared__ float wsplit[];  // [nsplit]
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int h = blockIdx.y;
  float mx = -INFINITY;
  for (int sp = threadIdx.x; sp < nsplit; sp += blockDim.x) mx = fmaxf(mx, ws_ml[((sp * n + r) * heads + h) * 2]);
  mx = block_max(mx, scratch);
  float lsum = 0.f;
  for (int sp = threadIdx.x; sp < nsplit; sp += blockDim.x) {
    const float* ml = ws_ml + ((sp * n + r) * heads + h) * 2;
    const float e = ml[1] > 0.f ? expf(ml[0] - mx) : 0.f;
    wsplit[sp] = e;
    lsum += ml[1] * e;
  }
  lsum = block_sum(lsum, scratch);  // its barriers also publish wsplit
  const float inv = 1.0f / lsum;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float a = 0.f;
    for (int sp = 0; sp < nsplit; ++sp) a = fmaf(ws_acc[((sp * n + r) * heads + h) * D + d], wsplit[sp], a);
    out[r * ldo + static_cast<int64_t>(h) * D + d] = a * inv;
  }
}

// Ties to the lowest index; a NaN beats every number and the first NaN wins (as the reference).
__device__ __forceinline__ bool better(float v1, int64_t i1, float v2, int64_t i2) {
  const bool n1 = isnan(v1), n2 = isnan(v2);
  if (n1 || n2) return n1 && n2 ? i1 < i2 : n1;
  if (v1 != v2) return v1 > v2;
  return i1 < i2;
}

template <typename LT>
__global__ void argmax_kernel(const LT* __restrict__ logits, int64_t ld, int64_t V, int32_t* out) {
  __shared__ float sv[1024];
  __shared__ int64_t si[1024];
  const LT* row = logits + blockIdx.x * ld;
  float bv = NAN;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = to_f32(row[i]);
    if (bi < 0 || better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = sv[threadIdx.x + s];
      const int64_t oi = si[threadIdx.x + s];
      if (oi >= 0 && (si[threadIdx.x] < 0 || better(ov, oi, sv[threadIdx.x], si[threadIdx.x]))) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(si[0] < 0 ? 0 : si[0]);
}

const float* fptr(const Tensor* t) { return t && t->data ? t->ptr<const float>() : nullptr; }

}  // namespace

void gemv(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, cudaStream_t s) {
  const int64_t M = out.rows();
  VV_DISPATCH_FLOAT(w.dtype, WT, {
    if (M == 1) {
      launch_gemv<WT, 1>(a, w, bias, out, ep, s);
    } else if (M <= 4) {
      launch_gemv<WT, 4>(a, w, bias, out, ep, s);
    } else {
      launch_gemv<WT, 8>(a, w, bias, out, ep, s);
    }
  });
}

void gemv_multi(const Tensor& a, DType wt, GemvJobs jobs, cudaStream_t s) {
  const int64_t K = a.cols();
  bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
  unsigned blocks = 0;
  for (int t = 0; t < jobs.count; ++t) {
    vec = vec && jobs.j[t].ldw % 8 == 0 && reinterpret_cast<uintptr_t>(jobs.j[t].w) % 16 == 0;
    jobs.j[t].block_begin = blocks;
    blocks += blocks_for(jobs.j[t].N, 8);
  }
  VV_DISPATCH_FLOAT(wt, WT, {
    if (vec) {
      gemv_multi_kernel<WT, true><<<blocks, 256, 0, s>>>(a.ptr<const float>(), K, jobs);
    } else {
      gemv_multi_kernel<WT, false><<<blocks, 256, 0, s>>>(a.ptr<const float>(), K, jobs);
    }
  });
}

void gemm_f32(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep, cudaStream_t s) {
  const int64_t M = out.rows(), N = out.cols(), K = a.cols();
  // Row tiles on gridDim.y (at most 65,535): more rows (the f32 encoders' stem over more than ≈ 175 s of
  // audio in one launch) go in launches of that many tiles. A row's sums do not depend on the others.
  constexpr int64_t kMaxRows = int64_t{65535} * kBM;
  for (int64_t r0 = 0; r0 < M; r0 += kMaxRows) {
    const int64_t m = std::min(M - r0, kMaxRows);
    const dim3 grid(blocks_for(N, kBN), blocks_for(m, kBM));
    VV_DISPATCH_FLOAT(w.dtype, WT,
                      gemm_f32_kernel<WT><<<grid, 256, 0, s>>>(
                          a.ptr<const float>() + r0 * a.row_stride(), a.row_stride(),
                          static_cast<const WT*>(w.data), w.row_stride(), m, N, K, bias,
                          out.ptr<float>() + r0 * out.row_stride(), out.row_stride(), static_cast<int>(ep)));
  }
}

void pack_rows_half(const Tensor& a, void* dst, DType to, cudaStream_t s) {
  const int64_t M = a.rows(), K = a.cols();
  if (M * K == 0) return;
  if (K % 4 == 0 && a.row_stride() % 4 == 0 && aligned16(a.data) &&
      reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    const unsigned blocks = blocks_for(M * K / 4, 256);
    if (to == DType::kF16) {
      pack_rows4_kernel<__half>
          <<<blocks, 256, 0, s>>>(a.ptr<const float>(), a.row_stride(), M, K, static_cast<__half*>(dst));
    } else {
      pack_rows4_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(a.ptr<const float>(), a.row_stride(), M, K,
                                                              static_cast<__nv_bfloat16*>(dst));
    }
    return;
  }
  if (to == DType::kF16) {
    pack_rows_kernel<__half><<<blocks_for(M * K, 256), 256, 0, s>>>(a.ptr<const float>(), a.row_stride(), M, K,
                                                                     static_cast<__half*>(dst));
  } else {
    pack_rows_kernel<__nv_bfloat16><<<blocks_for(M * K, 256), 256, 0, s>>>(a.ptr<const float>(), a.row_stride(), M,
                                                                            K, static_cast<__nv_bfloat16*>(dst));
  }
}

void gelu_inplace(Tensor& out, cudaStream_t s) {
  const int64_t n = out.rows() * out.cols();
  gelu_kernel<<<blocks_for(n, 256), 256, 0, s>>>(out.ptr<float>(), out.row_stride(), out.rows(), out.cols());
}

void gelu_bias_bf16_inplace(void* h, const float* bias, int64_t rows, int64_t E, bool fast_erf,
                            cudaStream_t s) {
  const int64_t n = rows * E;
  if (n == 0) return;
  const bool by8 = E % 8 == 0 && aligned16(h) && aligned16(bias);
  auto* hb = static_cast<__nv_bfloat16*>(h);
  if (fast_erf) {
    gelu_bias_bf16_kernel<kGeluErfFast><<<blocks_for(by8 ? n / 8 : n, 256), 256, 0, s>>>(hb, bias, n, E, by8);
  } else {
    gelu_bias_bf16_kernel<kGeluExact><<<blocks_for(by8 ? n / 8 : n, 256), 256, 0, s>>>(hb, bias, n, E, by8);
  }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, cudaStream_t s) {
  if (x.rows() == 0) return;
  if (x.cols() <= 1024) {
    VV_DISPATCH_FLOAT(weight.dtype, WT,
                      rms_norm_warp_kernel<WT><<<blocks_for(x.rows(), 8), 256, 0, s>>>(
                          x.ptr<const float>(), x.row_stride(), static_cast<const WT*>(weight.data), eps,
                          out.ptr<float>(), out.row_stride(), x.rows(), x.cols()));
    return;
  }
  const int threads = 512;
  VV_DISPATCH_FLOAT(weight.dtype, WT,
                    rms_norm_kernel<WT><<<static_cast<unsigned>(x.rows()), threads, 0, s>>>(
                        x.ptr<const float>(), x.row_stride(), static_cast<const WT*>(weight.data), eps,
                        out.ptr<float>(), out.row_stride(), x.cols()));
}

void rms_norm_pack(const Tensor& x, const Tensor& weight, float eps, Tensor& out, void* pack, DType pack_t,
                   cudaStream_t s, bool write_out) {
  if (x.rows() == 0) return;
  float* const o = write_out ? out.ptr<float>() : nullptr;
  auto launch = [&](auto* p) {
    using PT = std::remove_pointer_t<decltype(p)>;
    // Launched with PDL: each kernel waits for the previous one before its first read.
    if (x.cols() <= 1024) {
      VV_DISPATCH_FLOAT(
          weight.dtype, WT,
          launch_pdl(rms_norm_pack_warp_kernel<WT, PT>, static_cast<unsigned>(blocks_for(x.rows(), 8)), 256,
                     s, x.ptr<const float>(), x.row_stride(), static_cast<const WT*>(weight.data), eps, o,
                     out.row_stride(), x.rows(), x.cols(), p));
      return;
    }
    VV_DISPATCH_FLOAT(weight.dtype, WT,
                      launch_pdl(rms_norm_pack_kernel<WT, PT>, static_cast<unsigned>(x.rows()), 512, s,
                                 x.ptr<const float>(), x.row_stride(), static_cast<const WT*>(weight.data),
                                 eps, o, out.row_stride(), x.cols(), p));
  };
  if (pack_t == DType::kF16) {
    launch(static_cast<__half*>(pack));
  } else {
    launch(static_cast<__nv_bfloat16*>(pack));
  }
}

void silu_mul_bf16_pack(const void* g, int64_t M, int64_t I, void* pack, cudaStream_t s) {
  if (M * I == 0) return;
  const int64_t n = I % 4 == 0 ? M * I / 4 : M * I;
  silu_mul_bf16_pack_kernel<<<blocks_for(n, 256), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(g), M, I,
                                                               static_cast<__nv_bfloat16*>(pack));
}

void silu_mul_pack(const Tensor& gate_up, Tensor& out, void* pack, DType pack_t, cudaStream_t s) {
  const int64_t n = out.rows() * out.cols();
  if (n == 0) return;
  if (out.cols() % 4 == 0 && out.row_stride() % 4 == 0 && gate_up.row_stride() % 4 == 0 &&
      aligned16(gate_up.data) && aligned16(out.data) && aligned16(pack)) {
    const unsigned blocks = blocks_for(n / 4, 256);
    if (pack_t == DType::kF16) {
      silu_mul_pack4_kernel<__half><<<blocks, 256, 0, s>>>(gate_up.ptr<const float>(), gate_up.row_stride(),
                                                           out.ptr<float>(), out.row_stride(), out.rows(),
                                                           out.cols(), static_cast<__half*>(pack));
    } else {
      silu_mul_pack4_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(
          gate_up.ptr<const float>(), gate_up.row_stride(), out.ptr<float>(), out.row_stride(), out.rows(),
          out.cols(), static_cast<__nv_bfloat16*>(pack));
    }
    return;
  }
  if (pack_t == DType::kF16) {
    silu_mul_pack_kernel<__half><<<blocks_for(n, 256), 256, 0, s>>>(gate_up.ptr<const float>(), gate_up.row_stride(),
                                                                    out.ptr<float>(), out.row_stride(), out.rows(),
                                                                    out.cols(), static_cast<__half*>(pack));
  } else {
    silu_mul_pack_kernel<__nv_bfloat16><<<blocks_for(n, 256), 256, 0, s>>>(
        gate_up.ptr<const float>(), gate_up.row_stride(), out.ptr<float>(), out.row_stride(), out.rows(), out.cols(),
        static_cast<__nv_bfloat16*>(pack));
  }
}

void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out, cudaStream_t s) {
  const int64_t T = x.rows(), C = x.cols();
  if (T * C == 0) return;
  const float* hp = history.data ? history.ptr<const float>() : nullptr;
  VV_DISPATCH_FLOAT(w.dtype, WT,
                    dwconv_kernel<WT><<<blocks_for(T * C, 256), 256, 0, s>>>(
                        x.ptr<const float>(), x.row_stride(), hp, history.data ? history.row_stride() : 0,
                        static_cast<const WT*>(w.data), w.row_stride(), fptr(&bias), out.ptr<float>(),
                        out.row_stride(), T, C, static_cast<int>(w.cols())));
}

void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y, cudaStream_t s) {
  const int64_t n = x.rows() * x.cols();
  if (n == 0) return;
  if (x.cols() % 4 == 0 && x.row_stride() % 4 == 0 && y.row_stride() % 4 == 0 && aligned16(x.data) &&
      aligned16(y.data)) {
    VV_DISPATCH_FLOAT(scale.dtype, ST,
                      add_scaled4_kernel<ST><<<blocks_for(n / 4, 256), 256, 0, s>>>(
                          x.ptr<float>(), x.row_stride(), static_cast<const ST*>(scale.data),
                          y.ptr<const float>(), y.row_stride(), x.rows(), x.cols()));
    return;
  }
  VV_DISPATCH_FLOAT(scale.dtype, ST,
                    add_scaled_kernel<ST><<<blocks_for(n, 256), 256, 0, s>>>(
                        x.ptr<float>(), x.row_stride(), static_cast<const ST*>(scale.data), y.ptr<const float>(),
                        y.row_stride(), x.rows(), x.cols()));
}

void add(const Tensor& a, const Tensor& b, Tensor& out, cudaStream_t s) {
  const int64_t n = out.rows() * out.cols();
  if (n == 0) return;
  if (a.data == out.data && a.row_stride() == out.row_stride() && out.cols() % 4 == 0 &&
      out.row_stride() % 4 == 0 && b.row_stride() % 4 == 0 && aligned16(out.data) && aligned16(b.data)) {
    add_into4_kernel<<<blocks_for(n / 4, 256), 256, 0, s>>>(
        out.ptr<float>(), out.row_stride(), b.ptr<const float>(), b.row_stride(), out.rows(), out.cols());
    return;
  }
  add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(a.ptr<const float>(), a.row_stride(), b.ptr<const float>(),
                                                b.row_stride(), out.ptr<float>(), out.row_stride(), out.rows(),
                                                out.cols());
}

void silu_mul(const Tensor& gate_up, Tensor& out, cudaStream_t s) {
  const int64_t n = out.rows() * out.cols();
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n, 256), 256, 0, s>>>(gate_up.ptr<const float>(), gate_up.row_stride(),
                                                     out.ptr<float>(), out.row_stride(), out.rows(), out.cols());
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, cudaStream_t s) {
  const int64_t n = out.rows() * out.cols();
  if (n == 0) return;
  VV_DISPATCH_FLOAT(table.dtype, TT,
                    embedding_kernel<TT><<<blocks_for(n, 256), 256, 0, s>>>(
                        static_cast<const TT*>(table.data), table.row_stride(), table.rows(),
                        ids.ptr<const int32_t>(), out.ptr<float>(), out.row_stride(), out.rows(), out.cols()));
}

void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, const float* inv_freq, cudaStream_t s) {
  const int64_t n = x.rows() * heads * (head_dim / 2);
  if (n == 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x.ptr<float>(), x.row_stride(), pos.ptr<const int32_t>(), inv_freq,
                                                 x.rows(), heads, head_dim);
}

void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
              const AttentionShape& shape, cudaStream_t s) {
  const int64_t width = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  const int64_t n = k.rows() * width;
  if (n == 0) return;
  VV_DISPATCH_FLOAT(cache.k.dtype, CT,
                    kv_write_kernel<CT><<<blocks_for(n, 256), 256, 0, s>>>(
                        k.ptr<const float>(), k.row_stride(), v.ptr<const float>(), v.row_stride(),
                        rows.row_seq.ptr<const int32_t>(), rows.row_pos.ptr<const int32_t>(),
                        rows.block_tables.ptr<const int32_t>(), rows.block_tables.row_stride(), rows.block_size,
                        static_cast<CT*>(cache.k.data), static_cast<CT*>(cache.v.data), cache.k.row_stride(), k.rows(),
                        width));
}

AttentionPlan plan_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape, int sms) {
  AttentionPlan p;
  const int G = shape.heads / shape.kv_heads;
  if (G > 32 || shape.head_dim > 256 || n == 0) return p;  // the per-(row, head) kernel
  p.tiled = true;
  p.rows_per_tile = 32 / G;
  const int64_t tiles = (n + p.rows_per_tile - 1) / p.rows_per_tile;
  const int64_t max_keys = std::max<int64_t>(rows.block_tables.cols() * rows.block_size, 1);
  const int64_t base = tiles * shape.kv_heads;
  int64_t splits = 1;
  // Decode-like grids (few tiles): split the keys so the grid fills the GPU twice over, down to one
  // 32-key tile per split; each block's time is mostly the latency of its first loads.
  if (base < 2 * sms) splits = std::min<int64_t>((2 * sms + base - 1) / base, (max_keys + kKeyTile - 1) / kKeyTile);
  splits = std::max<int64_t>(splits, 1);
  p.splits = static_cast<int>(splits);
  p.chunk = static_cast<int>(((max_keys + splits - 1) / splits + kKeyTile - 1) / kKeyTile * kKeyTile);
  p.ws_floats = splits > 1 ? static_cast<size_t>(splits * n * shape.heads) * (shape.head_dim + 2) : 0;
  return p;
}

namespace {

template <typename CT, int DPL>
void launch_tiled(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                  Tensor& out, const AttentionPlan& p, float* ws, cudaStream_t s) {
  const int D = shape.head_dim;
  const size_t smem = (static_cast<size_t>(32) * D + kKeyTile * (D + 1) + kKeyTile * D) * sizeof(float);
  allow_dynamic_smem(attn_tile_kernel<CT, DPL>, smem);  // ≤ 98 KB (D 256)
  const int64_t n = q.rows();
  const dim3 grid(static_cast<unsigned>((n + p.rows_per_tile - 1) / p.rows_per_tile),
                  static_cast<unsigned>(shape.kv_heads), static_cast<unsigned>(p.splits));
  float* ws_acc = ws;
  float* ws_ml = ws ? ws + static_cast<size_t>(p.splits) * n * shape.heads * D : nullptr;
  attn_tile_kernel<CT, DPL><<<grid, kTileWarps * 32, smem, s>>>(
      q.ptr<const float>(), q.row_stride(), rows.row_seq.ptr<const int32_t>(), rows.row_pos.ptr<const int32_t>(),
      rows.block_tables.ptr<const int32_t>(), rows.block_tables.row_stride(), rows.block_size,
      static_cast<const CT*>(cache.k.data), static_cast<const CT*>(cache.v.data), cache.k.row_stride(), n,
      shape.heads, shape.kv_heads, D, shape.scale, p.rows_per_tile, p.chunk, out.ptr<float>(), out.row_stride(),
      ws_acc, ws_ml);
  if (p.splits > 1) {
    attn_combine_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(shape.heads)), 128,
                          sizeof(float) * p.splits, s>>>(
        ws_acc, ws_ml, p.splits, n, shape.heads, D, out.ptr<float>(), out.row_stride());
  }
}

}  // namespace

void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, const AttentionPlan& plan, float* ws, cudaStream_t s) {
  if (q.rows() == 0) return;
  const int D = shape.head_dim;
  if (plan.tiled) {
    VV_DISPATCH_FLOAT(cache.k.dtype, CT, {
      if (D <= 32) {
        launch_tiled<CT, 1>(q, rows, cache, shape, out, plan, ws, s);
      } else if (D <= 64) {
        launch_tiled<CT, 2>(q, rows, cache, shape, out, plan, ws, s);
      } else if (D <= 128) {
        launch_tiled<CT, 4>(q, rows, cache, shape, out, plan, ws, s);
      } else {
        launch_tiled<CT, 8>(q, rows, cache, shape, out, plan, ws, s);
      }
    });
    return;
  }
  const size_t smem = (2 * static_cast<size_t>(D) + kAttnTile) * sizeof(float) + kAttnTile * sizeof(int64_t) + 8;
  const dim3 grid(static_cast<unsigned>(q.rows()), static_cast<unsigned>(shape.heads));
  VV_DISPATCH_FLOAT(cache.k.dtype, CT,
                    paged_attention_kernel<CT><<<grid, kAttnTile, smem, s>>>(
                        q.ptr<const float>(), q.row_stride(), rows.row_seq.ptr<const int32_t>(),
                        rows.row_pos.ptr<const int32_t>(), rows.block_tables.ptr<const int32_t>(),
                        rows.block_tables.row_stride(), rows.block_size, static_cast<const CT*>(cache.k.data),
                        static_cast<const CT*>(cache.v.data), cache.k.row_stride(), shape.heads, shape.kv_heads, D,
                        shape.scale, out.ptr<float>(), out.row_stride()));
}

void argmax(const Tensor& logits, Tensor& out, cudaStream_t s) {
  if (logits.rows() == 0) return;
  VV_DISPATCH_FLOAT(logits.dtype, LT,
                    argmax_kernel<LT><<<static_cast<unsigned>(logits.rows()), 1024, 0, s>>>(
                        static_cast<const LT*>(logits.data), logits.row_stride(), logits.cols(),
                        out.ptr<int32_t>()));
}

}  // namespace vv::cuda
