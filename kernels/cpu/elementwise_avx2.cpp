// AVX2 row-wise ops. rms_norm sums squares in 8 lanes (fixed order per row); silu_mul uses the
// vector exp; the other light elementwise ops reuse the reference loops, which the compiler
// vectorises and which are memory bound anyway.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/vector_math_avx2.h"

namespace vv::avx2 {
namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

inline __m256 load_weight8(const Tensor& w, int64_t c) {
  if (w.dtype == DType::kBF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.ptr<const uint16_t>() + c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return _mm256_loadu_ps(w.ptr<const float>() + c);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  if (weight.dtype != DType::kF32 && weight.dtype != DType::kBF16) {
    ref::rms_norm(x, weight, eps, out);
    return;
  }
  const int64_t C = x.cols(), c8 = C / 8 * 8;
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* xr = x.ptr<const float>() + r * x.row_stride();
    float* orow = out.ptr<float>() + r * out.row_stride();
    __m256 ss8 = _mm256_setzero_ps();
    for (int64_t c = 0; c < c8; c += 8) {
      const __m256 v = _mm256_loadu_ps(xr + c);
      ss8 = _mm256_fmadd_ps(v, v, ss8);
    }
    float ss = hsum(ss8);
    for (int64_t c = c8; c < C; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    const __m256 inv8 = _mm256_set1_ps(inv);
    for (int64_t c = 0; c < c8; c += 8)
      _mm256_storeu_ps(orow + c, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + c), inv8), load_weight8(weight, c)));
    for (int64_t c = c8; c < C; ++c) orow[c] = (xr[c] * inv) * ref::load_as_f32(weight.data, weight.dtype, c);
  }
}

void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) { ref::add_scaled(x, scale, y); }
void add(const Tensor& a, const Tensor& b, Tensor& out) { ref::add(a, b, out); }
void silu_mul(const Tensor& gate_up, Tensor& out) {
  const int64_t I = out.cols();
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < out.rows(); ++r) {
    const float* g = gate_up.ptr<const float>() + r * gate_up.row_stride();
    float* o = out.ptr<float>() + r * out.row_stride();
    for (int64_t c = 0; c < I; c += 8) {
      const int64_t n = std::min<int64_t>(8, I - c);
      alignas(32) float gv[8] = {0, 0, 0, 0, 0, 0, 0, 0}, uv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      __m256 x, u;
      if (n == 8) {
        x = _mm256_loadu_ps(g + c);
        u = _mm256_loadu_ps(g + I + c);
      } else {  // the tail through the same 8-lane arithmetic
        std::memcpy(gv, g + c, sizeof(float) * n);
        std::memcpy(uv, g + I + c, sizeof(float) * n);
        x = _mm256_load_ps(gv);
        u = _mm256_load_ps(uv);
      }
      // silu(x)·u = x / (1 + exp(−x)) · u
      const __m256 y = _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_xor_ps(x, sign)))), u);
      if (n == 8) {
        _mm256_storeu_ps(o + c, y);
      } else {
        _mm256_store_ps(gv, y);
        std::memcpy(o + c, gv, sizeof(float) * n);
      }
    }
  }
}
void argmax(const Tensor& logits, Tensor& out) { ref::argmax(logits, out); }

void logprob_at(const Tensor& logits, const Tensor& ids, Tensor& logprob) {
  if (logits.dtype != DType::kF32) {
    ref::logprob_at(logits, ids, logprob);
    return;
  }
  const int64_t n = logits.rows(), V = logits.cols();
  const int32_t* id = ids.ptr<const int32_t>();
  float* lp = logprob.ptr<float>();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits.ptr<const float>() + r * logits.row_stride();
    __m256 mv = _mm256_set1_ps(kNegInf);
    int64_t i = 0;
    for (; i + 8 <= V; i += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + i), mv);  // a NaN x keeps mv
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mv);
    float m = kNegInf;
    for (float l : lanes) m = l > m ? l : m;
    for (; i < V; ++i) m = x[i] > m ? x[i] : m;
    const float xi = x[id[r]];
    if (m == kNegInf || !(xi > kNegInf)) {
      lp[r] = kNegInf;
      continue;
    }
    const __m256 mb = _mm256_set1_ps(m);
    double s = 0.0;
    for (int64_t b = 0; b < V; b += 1024) {
      const int64_t e = std::min<int64_t>(V, b + 1024);
      __m256 sv = _mm256_setzero_ps();
      int64_t j = b;
      for (; j + 8 <= e; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const __m256 ok = _mm256_cmp_ps(v, _mm256_set1_ps(kNegInf), _CMP_GT_OQ);  // not NaN, not −inf
        sv = _mm256_add_ps(sv, _mm256_and_ps(exp8(_mm256_sub_ps(v, mb)), ok));
      }
      double t = hsum(sv);
      for (; j < e; ++j) t += x[j] > kNegInf ? std::exp(static_cast<double>(x[j]) - m) : 0.0;
      s += t;
    }
    lp[r] = static_cast<float>(std::min(0.0, static_cast<double>(xi) - m - std::log(s)));
  }
}

}  // namespace vv::avx2
