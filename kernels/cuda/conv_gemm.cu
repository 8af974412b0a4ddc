#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/conv_gemm.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

using mma::ldsm_b_nmajor;
using mma::mma_bf16;
using mma::pack_bf16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// k-steps of 16 whose loads are issued together, before their products (2 at N = 128: the accumulators
// take 64 registers of the 128 that two blocks an SM leave a thread).
template <int N>
constexpr int kSteps = N == 128 ? 2 : 4;
constexpr size_t kMaxWeightBytes = 96 * 1024;

size_t smem_bytes(int N, int KP) {
  return static_cast<size_t>(N) * (KP + 8) * 2 + static_cast<size_t>(N) * 4;
}

// Two consecutive values (k, k + 1) of a row; zeros past K or for a row past M. kVec: k is even, K is
// even and the row 8-byte aligned, so one 8-byte load.
template <bool kVec>
__device__ __forceinline__ float2 load2(const float* __restrict__ row, int k, int K, bool valid) {
  if constexpr (kVec) {
    return valid && k < K ? __ldg(reinterpret_cast<const float2*>(row + k)) : make_float2(0.f, 0.f);
  } else {
    return make_float2(valid && k < K ? __ldg(row + k) : 0.f, valid && k + 1 < K ? __ldg(row + k + 1) : 0.f);
  }
}

// One warp per 16 rows at a time (a persistent grid), all N columns: acc[n tile] over k-steps of 16
// in order, the A fragment built from f32 loads rounded to bf16, B from the resident weights.
template <int N, bool kVec>
__global__ void __launch_bounds__(kThreads, 2)
    conv_gemm_kernel(const float* __restrict__ a, int64_t lda, int64_t M, int K, int KP,
                     const __nv_bfloat16* __restrict__ w, int64_t ldw, const float* __restrict__ bias,
                     float* __restrict__ out, int64_t ldo) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int LDW = KP + 8;  // rows 16 bytes apart mod 128: ldmatrix's eight rows hit distinct banks
  __nv_bfloat16* Ws = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  float* Bs = reinterpret_cast<float*>(smem_raw + static_cast<size_t>(N) * LDW * 2);
  for (int i = threadIdx.x; i < N * KP; i += kThreads) {
    const int n = i / KP, k = i % KP;
    Ws[n * LDW + k] = k < K ? w[n * ldw + k] : __float2bfloat16_rn(0.f);
  }
  for (int i = threadIdx.x; i < N; i += kThreads) Bs[i] = bias ? bias[i] : 0.f;
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t tiles = (M + 15) / 16;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t ra = tile * 16 + g, rb = ra + 8;
    const bool va = ra < M, vb = rb < M;
    const float* pa = a + (va ? ra : 0) * lda;
    const float* pb = a + (vb ? rb : 0) * lda;
    float acc[N / 8][4];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll 1
    for (int k0 = 0; k0 < KP; k0 += 16 * kSteps<N>) {
      // The loads of up to kSteps k-steps first (rows g and g + 8, columns 2t, 2t + 8 of each).
      float2 x[kSteps<N>][4];
#pragma unroll
      for (int s = 0; s < kSteps<N>; ++s) {
        const int k = k0 + 16 * s + 2 * t4;
        const bool in = k0 + 16 * s < KP;
        x[s][0] = load2<kVec>(pa, k, K, va && in);
        x[s][1] = load2<kVec>(pb, k, K, vb && in);
        x[s][2] = load2<kVec>(pa, k + 8, K, va && in);
        x[s][3] = load2<kVec>(pb, k + 8, K, vb && in);
      }
#pragma unroll
      for (int s = 0; s < kSteps<N>; ++s) {
        if (k0 + 16 * s >= KP) break;
        const uint32_t af[4] = {pack_bf16(x[s][0].x, x[s][0].y), pack_bf16(x[s][1].x, x[s][1].y),
                                pack_bf16(x[s][2].x, x[s][2].y), pack_bf16(x[s][3].x, x[s][3].y)};
#pragma unroll
        for (int nb = 0; nb < N / 16; ++nb) {
          uint32_t b0, b1, b2, b3;
          ldsm_b_nmajor(Ws + nb * 16 * LDW + k0 + 16 * s, LDW, lane, b0, b1, b2, b3);
          mma_bf16(acc[2 * nb], af, b0, b1);
          mma_bf16(acc[2 * nb + 1], af, b2, b3);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const int c = j * 8 + 2 * t4;
      const float b0 = Bs[c], b1 = Bs[c + 1];
      if (va) *reinterpret_cast<float2*>(out + ra * ldo + c) = make_float2(acc[j][0] + b0, acc[j][1] + b1);
      if (vb) *reinterpret_cast<float2*>(out + rb * ldo + c) = make_float2(acc[j][2] + b0, acc[j][3] + b1);
    }
  }
}

template <int N, bool kVec>
void launch(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, int K, int KP, int sms,
            cudaStream_t s) {
  const size_t smem = smem_bytes(N, KP);
  allow_dynamic_smem(conv_gemm_kernel<N, kVec>, smem);
  const int64_t M = out.rows();
  const int64_t tiles = (M + 15) / 16;
  const int64_t blocks =
      std::min<int64_t>((tiles + kWarps - 1) / kWarps, 2 * static_cast<int64_t>(std::max(sms, 1)));
  conv_gemm_kernel<N, kVec><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(
      a.ptr<const float>(), a.row_stride(), M, K, KP, w.ptr<const __nv_bfloat16>(), w.row_stride(), bias,
      out.ptr<float>(), out.row_stride());
}

template <int N>
void launch_n(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, int sms, cudaStream_t s) {
  const int K = static_cast<int>(a.cols()), KP = (K + 15) / 16 * 16;
  const bool vec = K % 2 == 0 && a.row_stride() % 2 == 0 && reinterpret_cast<uintptr_t>(a.data) % 8 == 0;
  vec ? launch<N, true>(a, w, bias, out, K, KP, sms, s) : launch<N, false>(a, w, bias, out, K, KP, sms, s);
}

}  // namespace

bool conv_gemm_fits(const Tensor& a, const Tensor& w, const Tensor& out) {
  if (a.dtype != DType::kF32 || w.dtype != DType::kBF16 || out.dtype != DType::kF32) return false;
  const int64_t N = w.rows(), K = a.cols();
  if ((N != 32 && N != 64 && N != 128) || out.cols() != N || w.cols() != K || K < 1 || out.rows() < 1)
    return false;
  if (a.rows() != out.rows() || !a.data || !w.data || !out.data) return false;
  if (smem_bytes(static_cast<int>(N), static_cast<int>((K + 15) / 16 * 16)) > kMaxWeightBytes) return false;
  return out.row_stride() % 2 == 0 && reinterpret_cast<uintptr_t>(out.data) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(a.data) % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 2 == 0;
}

void conv_gemm(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, int sms, cudaStream_t s) {
  switch (w.rows()) {
    case 32:
      return launch_n<32>(a, w, bias, out, sms, s);
    case 64:
      return launch_n<64>(a, w, bias, out, sms, s);
    default:
      return launch_n<128>(a, w, bias, out, sms, s);
  }
}

}  // namespace vv::cuda
