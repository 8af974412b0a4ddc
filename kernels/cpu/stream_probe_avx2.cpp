// AVX2 inner loops of the memory-bandwidth probes (roofline.cpp): a read-only sum over several
// streams at once (optionally with one software prefetch per line, 256 bytes ahead, as the GEMV
// does), and the STREAM triad. Aligned 32-byte loads, independent accumulators.
#include <immintrin.h>

#include "kernels/cpu/avx2_ops.h"

namespace vv::avx2 {
namespace {

template <int S, bool kPrefetch>
float read_sum(const float* p, int64_t n) {
  // S equal parts of p read together, one cache line of each per step (S hardware prefetch streams).
  const int64_t len = n / S / 16 * 16;
  __m256 acc[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_ps();
  for (int64_t i = 0; i < len; i += 16) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(q) + 256, _MM_HINT_T0);
      acc[s] = _mm256_add_ps(acc[s], _mm256_add_ps(_mm256_load_ps(q), _mm256_load_ps(q + 8)));
    }
  }
  __m256 t = acc[0];
  for (int s = 1; s < S; ++s) t = _mm256_add_ps(t, acc[s]);
  float r = _mm256_cvtss_f32(t);
  for (int64_t i = S * len; i < n; ++i) r += p[i];
  return r;
}

}  // namespace

float read_stream_sum(const float* p, int64_t n, int streams, bool prefetch) {
  if (streams < 8) return read_sum<1, false>(p, n);
  return prefetch ? read_sum<8, true>(p, n) : read_sum<8, false>(p, n);
}

void stream_triad(float* a, const float* b, const float* c, float scale, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_store_ps(a + i, _mm256_fmadd_ps(s, _mm256_load_ps(c + i), _mm256_load_ps(b + i)));
    _mm256_store_ps(a + i + 8, _mm256_fmadd_ps(s, _mm256_load_ps(c + i + 8), _mm256_load_ps(b + i + 8)));
  }
  for (; i < n; ++i) a[i] = b[i] + scale * c[i];
}

}  // namespace vv::avx2
