// Vectorised f32 exp and erf-GELU for the AVX2 kernels (include only from *_avx2.cpp files).
// exp: Cephes-style range reduction + degree-6 polynomial, ~2 ulp; gelu via erfc (Numerical
// Recipes' Chebyshev fit, relative error < 1.2e-7) so negative inputs keep relative accuracy.
// Pure functions; any thread. The same function is used on every path, so results do not depend
// on which path or lane computed an element.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace vv::avx2 {

inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365f)), _mm256_set1_ps(88.3762f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x − fx·ln2, in two steps for precision
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// erfc(z) for any z, relative error < ~2e-7 (f32 rounding included).
inline __m256 erfc8(__m256 z) {
  const __m256 az = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), az, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  const __m256 arg = _mm256_sub_ps(p, _mm256_mul_ps(az, az));
  const __m256 ans = _mm256_mul_ps(t, exp8(arg));
  const __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(ans, _mm256_sub_ps(_mm256_set1_ps(2.0f), ans), neg);
}

// gelu(x) = 0.5·x·erfc(−x/√2)
inline __m256 gelu8(__m256 x) {
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(-0.70710678118654752440f));
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), erfc8(z));
}

// p[0..n) = gelu(p[0..n)); the tail goes through the same 8-lane function.
inline void gelu_inplace(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(p + i, gelu8(_mm256_loadu_ps(p + i)));
  if (i < n) {
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tmp, p + i, sizeof(float) * (n - i));
    _mm256_store_ps(tmp, gelu8(_mm256_load_ps(tmp)));
    std::memcpy(p + i, tmp, sizeof(float) * (n - i));
  }
}

}  // namespace vv::avx2
