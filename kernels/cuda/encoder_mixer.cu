// The encoders' mixer: the causal depthwise conv (kernel 7) fused with its layer-scaled residual.
// One thread per (channel, run of kRun consecutive rows): the run's kRun + 6 input rows are loaded
// once into registers (consecutive threads take consecutive channels, so every load is coalesced)
// and x is read and written once; the conv's output never goes through memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/encoder_ops.cuh"

namespace vv::cuda {
namespace {

constexpr int kTaps = 7;
constexpr int kRun = 16;

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}

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

}  // namespace

bool dwconv_add_fits(const Tensor& x, const Tensor& u, const Tensor& w, const Tensor& bias,
                     const Tensor& gamma) {
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
