// AVX2 causal depthwise conv over time, 8 channels at a time. Each element is summed exactly as
// the reference does (k ascending, separate multiply and add, bias last), so results are bitwise
// equal to ref::depthwise_conv1d_causal.
#include <immintrin.h>

#include <vector>

// Keep the multiply and the add separate (no FMA contraction), as in the reference.
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"

namespace vv::avx2 {

void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  const int64_t c8 = C / 8 * 8;
  if (c8 == 0) {
    ref::depthwise_conv1d_causal(x, history, w, bias, out);
    return;
  }
  std::vector<float> wt(K * c8);  // [K][C] f32
  for (int64_t c = 0; c < c8; ++c)
    for (int64_t k = 0; k < K; ++k)
      wt[k * c8 + c] = ref::load_as_f32(static_cast<const char*>(w.data) + c * w.row_stride() * dtype_size(w.dtype),
                                        w.dtype, k);
  const float* bp = bias.data ? bias.ptr<const float>() : nullptr;
  std::vector<const float*> src(K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t s = t + k - (K - 1);
      src[k] = s >= 0 ? x.ptr<const float>() + s * x.row_stride()
                      : history.data ? history.ptr<const float>() + (s + K - 1) * history.row_stride() : nullptr;
    }
    float* orow = out.ptr<float>() + t * out.row_stride();
    for (int64_t c = 0; c < c8; c += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; ++k) {
        const __m256 xv = src[k] ? _mm256_loadu_ps(src[k] + c) : _mm256_setzero_ps();
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(&wt[k * c8 + c]), xv));
      }
      if (bp) acc = _mm256_add_ps(acc, _mm256_loadu_ps(bp + c));
      _mm256_storeu_ps(orow + c, acc);
    }
  }
  if (c8 < C) {  // the last C % 8 channels
    Tensor o = out.col_slice(c8, C - c8);
    Tensor b = bias;
    if (bias.data) b.data = const_cast<float*>(bp + c8), b.shape[0] = C - c8;
    ref::depthwise_conv1d_causal(x.col_slice(c8, C - c8), history.data ? history.col_slice(c8, C - c8) : history,
                                 w.row_slice(c8, C - c8), b, o);
  }
}

}  // namespace vv::avx2
