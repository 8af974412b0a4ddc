// The first fused FFN kernel (4 warps, 64 rows per block, weight chunks loaded synchronously), kept
// only so that one device call can time it next to encoder_ffn.cu's (VV_CUDA_ENC_V1=1); to be removed
// once measured.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/encoder_ops.cuh"
#include "kernels/cuda/mma_util.cuh"

namespace vv::cuda {
namespace v1 {
namespace {

using mma::ldsm_a;
using mma::ldsm_b_nmajor;
using mma::mma_bf16;
using mma::pack_bf16;

constexpr int kRows = 64;      // rows per block
constexpr int kThreads = 128;  // 4 warps × 16 rows
constexpr int kHid = 64;       // hidden columns per chunk

__device__ __forceinline__ float gelu_erf(float x) {
  return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

template <int C>
constexpr size_t ffn_smem_bytes() {
  // U [64][C+8], W1 chunk [64][C+8], W2 chunk [C][64+8], all bf16.
  return (static_cast<size_t>(kRows) * (C + 8) + static_cast<size_t>(kHid) * (C + 8) +
          static_cast<size_t>(C) * (kHid + 8)) *
         2;
}

// One kernel for the branch's whole data flow (norm, GEMM, GELU, GEMM, scaled residual): the hidden
// rows (4× the width of x) exist only in registers, which is the point.
template <int C>
__global__ void __launch_bounds__(kThreads)
    conv_ffn_kernel(float* __restrict__ x, int64_t ldx, int64_t T, const float* __restrict__ norm_w,
                    float eps, const __nv_bfloat16* __restrict__ w1, const float* __restrict__ b1,
                    const __nv_bfloat16* __restrict__ w2, const float* __restrict__ b2,
                    const float* __restrict__ gamma, int E) {
  constexpr int LDU = C + 8, LDH = kHid + 8;
  constexpr int KC = C / 16;  // k-steps of the first GEMM; also 16-wide output tile pairs of the second
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Us = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* W1s = Us + kRows * LDU;
  __nv_bfloat16* W2s = W1s + kHid * LDU;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;

  // RMSNorm of the warp's 16 rows (f32, as rms_norm computes it), rounded to bf16 into Us.
  for (int i = 0; i < 16; ++i) {
    const int rl = warp * 16 + i;
    const int64_t r = r0 + rl;
    float xv[C / 32];
    float ss = 0.f;
#pragma unroll
    for (int e = 0; e < C / 32; ++e) {
      xv[e] = r < T ? x[r * ldx + lane + 32 * e] : 0.f;
      ss = fmaf(xv[e], xv[e], ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
#pragma unroll
    for (int e = 0; e < C / 32; ++e) {
      const int c = lane + 32 * e;
      const float u = xv[e] * inv * norm_w[c];
      Us[rl * LDU + c] = __float2bfloat16_rn(r < T ? u : 0.f);
    }
  }
  __syncthreads();
  // The A fragments of the warp's normalised rows: held in registers up to 128 channels, re-read
  // from shared memory per chunk above that (256 channels would need 64 more registers).
  constexpr bool kHoldU = C <= 128;
  uint32_t uf[kHoldU ? KC : 1][4];
  if constexpr (kHoldU) {
#pragma unroll
    for (int kd = 0; kd < KC; ++kd) ldsm_a(Us + warp * 16 * LDU + kd * 16, LDU, lane, uf[kd]);
  }

  float acc[C / 8][4];
#pragma unroll
  for (int ct = 0; ct < C / 8; ++ct) acc[ct][0] = acc[ct][1] = acc[ct][2] = acc[ct][3] = 0.f;

  for (int j0 = 0; j0 < E; j0 += kHid) {
    __syncthreads();  // the previous chunk's weights are consumed
    // W1 rows j0..j0+63 ([64][C]) and W2 columns j0..j0+63 ([C][64]), 16 bytes at a time.
    for (int i = threadIdx.x; i < kHid * (C / 8); i += kThreads) {
      const int row = i / (C / 8), c8 = (i % (C / 8)) * 8;
      *reinterpret_cast<uint4*>(W1s + row * LDU + c8) =
          *reinterpret_cast<const uint4*>(w1 + static_cast<int64_t>(j0 + row) * C + c8);
    }
    for (int i = threadIdx.x; i < C * (kHid / 8); i += kThreads) {
      const int row = i / (kHid / 8), h8 = (i % (kHid / 8)) * 8;
      *reinterpret_cast<uint4*>(W2s + row * LDH + h8) =
          *reinterpret_cast<const uint4*>(w2 + static_cast<int64_t>(row) * E + j0 + h8);
    }
    __syncthreads();
    // h[16 × 64] = U·W1ᵀ for the warp's rows.
    float h[kHid / 8][4];
#pragma unroll
    for (int nt = 0; nt < kHid / 8; ++nt) h[nt][0] = h[nt][1] = h[nt][2] = h[nt][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KC; ++kd) {
      uint32_t ua[4];
      if constexpr (kHoldU) {
        ua[0] = uf[kd][0], ua[1] = uf[kd][1], ua[2] = uf[kd][2], ua[3] = uf[kd][3];
      } else {
        ldsm_a(Us + warp * 16 * LDU + kd * 16, LDU, lane, ua);
      }
#pragma unroll
      for (int nb = 0; nb < kHid / 16; ++nb) {
        uint32_t b0, b1_, b2_, b3;
        ldsm_b_nmajor(W1s + nb * 16 * LDU + kd * 16, LDU, lane, b0, b1_, b2_, b3);
        mma_bf16(h[2 * nb], ua, b0, b1_);
        mma_bf16(h[2 * nb + 1], ua, b2_, b3);
      }
    }
    // Bias and GELU in f32, then (rounded to bf16) straight into the second GEMM as its A operand.
#pragma unroll
    for (int nt = 0; nt < kHid / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float bb = b1[j0 + nt * 8 + 2 * t4 + e];
        h[nt][e] = gelu_erf(h[nt][e] + bb);
        h[nt][2 + e] = gelu_erf(h[nt][2 + e] + bb);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kHid / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack_bf16(h[2 * kk][0], h[2 * kk][1]);
      a[1] = pack_bf16(h[2 * kk][2], h[2 * kk][3]);
      a[2] = pack_bf16(h[2 * kk + 1][0], h[2 * kk + 1][1]);
      a[3] = pack_bf16(h[2 * kk + 1][2], h[2 * kk + 1][3]);
#pragma unroll
      for (int cp = 0; cp < KC; ++cp) {
        uint32_t b0, b1_, b2_, b3;
        ldsm_b_nmajor(W2s + cp * 16 * LDH + kk * 16, LDH, lane, b0, b1_, b2_, b3);
        mma_bf16(acc[2 * cp], a, b0, b1_);
        mma_bf16(acc[2 * cp + 1], a, b2_, b3);
      }
    }
  }
  // x += gamma ⊙ (acc + b2), as add_scaled applies the GEMM's output.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t r = r0 + warp * 16 + g + 8 * hh;
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

template <int C>
void launch(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1, const Tensor& w2,
            const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  constexpr size_t smem = ffn_smem_bytes<C>();
  static bool raised = false;  // per instantiation: allow > 48 KB of dynamic shared memory
  if (!raised) {
    cudaFuncSetAttribute(conv_ffn_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem));
    raised = true;
  }
  const int64_t T = x.rows();
  conv_ffn_kernel<C><<<static_cast<unsigned>((T + kRows - 1) / kRows), kThreads, smem, s>>>(
      x.ptr<float>(), x.row_stride(), T, norm_w.ptr<const float>(), eps, w1.ptr<const __nv_bfloat16>(),
      b1.ptr<const float>(), w2.ptr<const __nv_bfloat16>(), b2.ptr<const float>(), gamma.ptr<const float>(),
      static_cast<int>(w1.rows()));
}

}  // namespace

void conv_ffn_fused_v1(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                       const Tensor& w2, const Tensor& b2, const Tensor& gamma, cudaStream_t s) {
  if (x.rows() == 0) return;
  switch (x.cols()) {
    case 32:
      launch<32>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
    case 64:
      launch<64>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
    case 128:
      launch<128>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
    default:
      launch<256>(x, norm_w, eps, w1, b1, w2, b2, gamma, s);
      break;
  }
}

}  // namespace v1
}  // namespace vv::cuda
