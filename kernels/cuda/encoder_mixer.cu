// The encoders' mixer (x += gamma ⊙ dwconv7(rms_norm(x))). Two forms:
//  - conv_mixer_fused (C a multiple of 4, ≤ 1024): two kernels. A block owns a tile of 8192/C rows:
//    it reads them once, normalises them in shared memory, convolves and writes x in place. The 6
//    rows of u before each tile (the conv's reach) belong to the previous tile, whose block may
//    already have overwritten them; a first kernel writes them, normalised, to a side buffer (6 rows
//    per tile, from x before any write), so no block reads a row another block writes. x is read ~1.1
//    times and written once (rms_norm + dwconv_add: read 2×, written 2×, u read back once).
//  - dwconv_add: the causal depthwise conv (kernel 7) fused with its layer-scaled residual, after a
//    separate rms_norm. One thread per (channel, run of kRun consecutive rows): the run's kRun + 6
//    input rows are loaded once into registers (consecutive threads take consecutive channels, so
//    every load is coalesced) and x is read and written once; the conv's output never goes through
//    memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/encoder_ops.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

constexpr int kTaps = 7;
constexpr int kRun = 16;

// Same arithmetic as dwconv_kernel (taps in order, fmaf, then + bias) and add_scaled_kernel.
template <typename WT>
__global__ void __launch_bounds__(256)
    dwconv_add_kernel(float* __restrict__ x, int64_t ldx, const float* __restrict__ u, int64_t ldu,
                      const float* __restrict__ hist, int64_t ldh, const WT* __restrict__ w, int64_t ldw,
                      const float* __restrict__ bias, const float* __restrict__ gamma, int64_t T, int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = (T + kRun - 1) / kRun;
  if (i >= runs * C) return;
  const int64_t run = i / C, c = i - run * C;
  const int64_t t0 = run * kRun;
  float wk[kTaps];
#pragma unroll
  for (int k = 0; k < kTaps; ++k) wk[k] = to_f32(w[c * ldw + k]);
  const float b = bias ? bias[c] : 0.f, gm = gamma[c];
  float win[kRun + kTaps - 1];
#pragma unroll
  for (int j = 0; j < kRun + kTaps - 1; ++j) {
    const int64_t src = t0 + j - (kTaps - 1);
    float v = 0.f;
    if (src >= 0) {
      if (src < T) v = u[src * ldu + c];
    } else if (hist) {
      v = hist[(src + kTaps - 1) * ldh + c];
    }
    win[j] = v;
  }
#pragma unroll
  for (int r = 0; r < kRun; ++r) {
    const int64_t t = t0 + r;
    if (t >= T) break;
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < kTaps; ++k) acc = fmaf(wk[k], win[r + k], acc);
    const float y = acc + b;
    x[t * ldx + c] += gm * y;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kMixThreads = 256;
constexpr int kMixElems = 8192;                        // f32 elements of x per tile
constexpr int kMixPer4 = kMixElems / 4 / kMixThreads;  // float4s of x per thread
constexpr int kHalo = kTaps - 1;

int mix_rows(int64_t C) {
  return static_cast<int>(kMixElems / C);
}

// 1/sqrt(mean(x²) + eps) of row r, one warp, in rms_norm_warp_kernel's order (lane-strided fmaf,
// then the xor butterfly), so u here has the bits rms_norm gives.
__device__ __forceinline__ float row_inv_rms(const float* row, int C, float eps, int lane) {
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss = fmaf(row[c], row[c], ss);
  ss = warp_sum(ss);
  return 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
}

// First pass: u of the 6 rows before every tile but the first, side[(tile-1)·6 + j][C].
__global__ void __launch_bounds__(256)
    mixer_halo_kernel(const float* __restrict__ x, int64_t ldx, const float* __restrict__ norm_w, float eps,
                      float* __restrict__ side, int C, int R, int64_t halo_rows) {
  const int64_t hr = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (hr >= halo_rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = (1 + hr / kHalo) * R - kHalo + hr % kHalo;
  const float* xr = x + t * ldx;
  const float inv = row_inv_rms(xr, C, eps, lane);
  for (int c = lane; c < C; c += 32) {
    const float n = xr[c] * inv;
    side[hr * C + c] = n * norm_w[c];
  }
}

// Both tile kernels' prologue: the per-channel vectors (taps [7][C], norm weight, bias, gamma) and the
// 6 halo rows of u before the tile (from the side buffer, the history, or zeros) into shared memory.
template <typename WT>
__device__ __forceinline__ void mixer_stage_block(
    const WT* __restrict__ w, int64_t ldw, const float* __restrict__ norm_w, const float* __restrict__ bias,
    const float* __restrict__ gamma, const float* __restrict__ side, const float* __restrict__ hist,
    int64_t ldh, int64_t t0, int C, float* us, float* wk, float* nws, float* bs, float* gs) {
  for (int c = threadIdx.x; c < C; c += kMixThreads) {
#pragma unroll
    for (int k = 0; k < kTaps; ++k) wk[k * C + c] = to_f32(w[c * ldw + k]);
    nws[c] = norm_w[c];
    bs[c] = bias ? bias[c] : 0.f;
    gs[c] = gamma[c];
  }
  for (int i = threadIdx.x; i < kHalo * C; i += kMixThreads) {
    const int j = i / C, c = i - j * C;
    float v = 0.f;
    if (t0 > 0) {
      v = side[(static_cast<int64_t>(blockIdx.x) - 1) * kHalo * C + i];
    } else if (hist) {
      v = hist[j * ldh + c];
    }
    us[i] = v;
  }
}

// Then the tile's n rows of x into shared memory below the halo and into xr, and each row's inverse
// RMS into inv (a warp per row); returns after a barrier.
__device__ __forceinline__ void mixer_load_rows(const float* __restrict__ x, int64_t ldx, int64_t t0, int n,
                                                int C, float eps, float* us, float* inv,
                                                float4 (&xr)[kMixPer4]) {
  const int C4 = C / 4, n4 = n * C4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < kMixPer4; ++k) {
    const int i = threadIdx.x + k * kMixThreads;
    if (i < n4) {
      const int row = i / C4, c = (i - row * C4) * 4;
      xr[k] = *reinterpret_cast<const float4*>(x + (t0 + row) * ldx + c);
      *reinterpret_cast<float4*>(us + (kHalo + row) * C + c) = xr[k];
    }
  }
  __syncthreads();
  for (int r = warp; r < n; r += kMixThreads / 32) {
    const float v = row_inv_rms(us + (kHalo + r) * C, C, eps, lane);
    if (lane == 0) inv[r] = v;
  }
  __syncthreads();
}

// Second pass: one block per tile of R rows (see the file comment). Shared memory: u [R + 6][C]
// (the halo first), taps [7][C], norm weight, bias, gamma [C] each, inverse RMS [R].
template <typename WT>
__global__ void __launch_bounds__(kMixThreads)
    mixer_tile_kernel(float* __restrict__ x, int64_t ldx, const float* __restrict__ side,
                      const float* __restrict__ hist, int64_t ldh, const WT* __restrict__ w, int64_t ldw,
                      const float* __restrict__ bias, const float* __restrict__ gamma,
                      const float* __restrict__ norm_w, float eps, float* __restrict__ u, int64_t ldu,
                      int64_t T, int C, int R) {
  extern __shared__ __align__(16) float msm[];
  float* us = msm;
  float* wk = us + (R + kHalo) * C;
  float* nws = wk + kTaps * C;
  float* bs = nws + C;
  float* gs = bs + C;
  float* inv = gs + C;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * R;
  const int n = static_cast<int>(T - t0 < R ? T - t0 : R);
  const int C4 = C / 4, n4 = n * C4;
  mixer_stage_block(w, ldw, norm_w, bias, gamma, side, hist, ldh, t0, C, us, wk, nws, bs, gs);
  float4 xr[kMixPer4];
  mixer_load_rows(x, ldx, t0, n, C, eps, us, inv, xr);
#pragma unroll
  for (int k = 0; k < kMixPer4; ++k) {
    const int i = threadIdx.x + k * kMixThreads;
    if (i < n4) {
      const int row = i / C4, c = (i - row * C4) * 4;
      const float iv = inv[row];
      // The per-channel vectors are read as float4 (c % 4 == 0, C % 4 == 0: 16-byte aligned); as
      // scalars at a 4-float stride per thread they were 4-way bank conflicts.
      const float4 nw = *reinterpret_cast<const float4*>(nws + c);
      float4 uu;
      uu.x = (xr[k].x * iv) * nw.x;
      uu.y = (xr[k].y * iv) * nw.y;
      uu.z = (xr[k].z * iv) * nw.z;
      uu.w = (xr[k].w * iv) * nw.w;
      *reinterpret_cast<float4*>(us + (kHalo + row) * C + c) = uu;
      // Only the last rows of u leave the block: the caller carries them as the next segment's history.
      if (t0 + row >= T - kHalo) *reinterpret_cast<float4*>(u + (t0 + row) * ldu + c) = uu;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMixPer4; ++k) {
    const int i = threadIdx.x + k * kMixThreads;
    if (i < n4) {
      const int row = i / C4, c = (i - row * C4) * 4;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
      for (int kk = 0; kk < kTaps; ++kk) {
        const float4 v = *reinterpret_cast<const float4*>(us + (row + kk) * C + c);
        const float4 wt = *reinterpret_cast<const float4*>(wk + kk * C + c);
        a0 = fmaf(wt.x, v.x, a0);
        a1 = fmaf(wt.y, v.y, a1);
        a2 = fmaf(wt.z, v.z, a2);
        a3 = fmaf(wt.w, v.w, a3);
      }
      const float4 b4 = *reinterpret_cast<const float4*>(bs + c);
      const float4 g4 = *reinterpret_cast<const float4*>(gs + c);
      const float y0 = a0 + b4.x, y1 = a1 + b4.y, y2 = a2 + b4.z, y3 = a3 + b4.w;
      float4 o = xr[k];
      o.x += g4.x * y0;
      o.y += g4.y * y1;
      o.z += g4.z * y2;
      o.w += g4.w * y3;
      *reinterpret_cast<float4*>(x + (t0 + row) * ldx + c) = o;
    }
  }
}

size_t mixer_smem_bytes(int64_t C) {
  const int64_t R = mix_rows(C);
  return static_cast<size_t>((R + kHalo) * C + (kTaps + 3) * C + R) * sizeof(float);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool dwconv_add_fits(const Tensor& x, const Tensor& u, const Tensor& history, const Tensor& w,
                     const Tensor& bias, const Tensor& gamma) {
  // The kernel reads rows 0 .. kTaps − 2 of the history as f32 at its row stride.
  if (history.data && history.rows() > 0 &&
      (history.rows() < kTaps - 1 || history.cols() != x.cols() || history.dtype != DType::kF32))
    return false;
  return w.cols() == kTaps && w.rows() == x.cols() && x.dtype == DType::kF32 && u.dtype == DType::kF32 &&
         gamma.dtype == DType::kF32 && (!bias.data || bias.dtype == DType::kF32) &&
         (w.dtype == DType::kF32 || w.dtype == DType::kBF16 || w.dtype == DType::kF16);
}

void dwconv_add(Tensor& x, const Tensor& u, const Tensor& history, const Tensor& w, const Tensor& bias,
                const Tensor& gamma, cudaStream_t s) {
  const int64_t T = x.rows(), C = x.cols();
  if (T * C == 0) return;
  const int64_t threads = (T + kRun - 1) / kRun * C;
  const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
  const float* hp = history.data && history.rows() > 0 ? history.ptr<const float>() : nullptr;
  const float* bp = bias.data ? bias.ptr<const float>() : nullptr;
  switch (w.dtype) {
    case DType::kBF16:
      dwconv_add_kernel<__nv_bfloat16>
          <<<blocks, 256, 0, s>>>(x.ptr<float>(), x.row_stride(), u.ptr<const float>(), u.row_stride(), hp,
                                  hp ? history.row_stride() : 0, w.ptr<const __nv_bfloat16>(), w.row_stride(),
                                  bp, gamma.ptr<const float>(), T, C);
      break;
    case DType::kF16:
      dwconv_add_kernel<__half><<<blocks, 256, 0, s>>>(x.ptr<float>(), x.row_stride(), u.ptr<const float>(),
                                                       u.row_stride(), hp, hp ? history.row_stride() : 0,
                                                       w.ptr<const __half>(), w.row_stride(), bp,
                                                       gamma.ptr<const float>(), T, C);
      break;
    default:
      dwconv_add_kernel<float><<<blocks, 256, 0, s>>>(x.ptr<float>(), x.row_stride(), u.ptr<const float>(),
                                                      u.row_stride(), hp, hp ? history.row_stride() : 0,
                                                      w.ptr<const float>(), w.row_stride(), bp,
                                                      gamma.ptr<const float>(), T, C);
      break;
  }
}

}  // namespace vv::cuda

namespace vv::cuda {

bool conv_mixer_fits(const Tensor& x, const Tensor& norm_w, const Tensor& history, const Tensor& w,
                     const Tensor& bias, const Tensor& gamma, const Tensor& u, const Tensor& v) {
  const int64_t T = x.rows(), C = x.cols();
  if (C < 4 || C % 4 != 0 || C > 1024 || T <= 0) return false;
  if (!dwconv_add_fits(x, u, history, w, bias, gamma) || norm_w.dtype != DType::kF32) return false;
  if (x.row_stride() % 4 != 0 || !aligned16(x.data) || u.rows() < T || u.cols() != C ||
      u.row_stride() % 4 != 0 || !aligned16(u.data))
    return false;
  if (history.data && history.rows() > 0 &&
      (history.rows() < kHalo || history.cols() != C || history.dtype != DType::kF32))
    return false;
  // The side buffer: 6 rows of C per tile after the first, in v (at least that many floats).
  const int64_t tiles = (T + mix_rows(C) - 1) / mix_rows(C);
  const int64_t need = (tiles - 1) * kHalo * C;
  const int64_t have = v.rows() > 0 ? (v.rows() - 1) * v.row_stride() + v.cols() : 0;
  return v.dtype == DType::kF32 && (need == 0 || (v.data && have >= need));
}

void mixer_halo(const Tensor& x, const Tensor& norm_w, float eps, float* side, int R, cudaStream_t s) {
  const int64_t tiles = (x.rows() + R - 1) / R;
  const int64_t halo_rows = (tiles - 1) * kHalo;
  if (halo_rows <= 0) return;
  mixer_halo_kernel<<<static_cast<unsigned>((halo_rows + 7) / 8), 256, 0, s>>>(
      x.ptr<const float>(), x.row_stride(), norm_w.ptr<const float>(), eps, side, static_cast<int>(x.cols()),
      R, halo_rows);
}

void conv_mixer_fused(Tensor& x, const Tensor& norm_w, float eps, const Tensor& history, const Tensor& w,
                      const Tensor& bias, const Tensor& gamma, Tensor& u, Tensor& v, cudaStream_t s) {
  const int64_t T = x.rows(), C = x.cols();
  if (T * C == 0) return;
  const int R = mix_rows(C);
  const int64_t tiles = (T + R - 1) / R;
  float* side = v.ptr<float>();
  mixer_halo(x, norm_w, eps, side, R, s);
  const size_t smem = mixer_smem_bytes(C);
  const float* hp = history.data && history.rows() > 0 ? history.ptr<const float>() : nullptr;
  const float* bp = bias.data ? bias.ptr<const float>() : nullptr;
  const auto go = [&](auto kernel, const auto* wp) {
    // Over 48 KB of dynamic shared memory needs the kernel's attribute.
    if (smem > (48u << 10)) allow_dynamic_smem(kernel, smem);
    kernel<<<static_cast<unsigned>(tiles), kMixThreads, smem, s>>>(
        x.ptr<float>(), x.row_stride(), side, hp, hp ? history.row_stride() : 0, wp, w.row_stride(), bp,
        gamma.ptr<const float>(), norm_w.ptr<const float>(), eps, u.ptr<float>(), u.row_stride(), T,
        static_cast<int>(C), R);
  };
  switch (w.dtype) {
    case DType::kBF16:
      go(mixer_tile_kernel<__nv_bfloat16>, w.ptr<const __nv_bfloat16>());
      break;
    case DType::kF16:
      go(mixer_tile_kernel<__half>, w.ptr<const __half>());
      break;
    default:
      go(mixer_tile_kernel<float>, w.ptr<const float>());
      break;
  }
}

}  // namespace vv::cuda
