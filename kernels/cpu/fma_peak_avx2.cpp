// Peak f32 FMA throughput of one AVX2 thread: 12 independent vfmadd231ps chains written in inline
// assembly so that the accumulators stay in registers (more chains than FMA latency × ports).
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu/avx2_ops.h"

namespace vv::avx2 {

double fma_peak_one_thread(int64_t iterations) {
  __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(0.1f), a2 = _mm256_set1_ps(0.2f), a3 = _mm256_set1_ps(0.3f);
  __m256 a4 = _mm256_set1_ps(0.4f), a5 = _mm256_set1_ps(0.5f), a6 = _mm256_set1_ps(0.6f), a7 = _mm256_set1_ps(0.7f);
  __m256 a8 = _mm256_set1_ps(0.8f), a9 = _mm256_set1_ps(0.9f), a10 = _mm256_set1_ps(1.0f), a11 = _mm256_set1_ps(1.1f);
  const __m256 x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(0.5f);
  timespec c0, c1;  // this thread's CPU time: the core's throughput even when it is shared
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  for (int64_t it = 0; it < iterations; ++it) {
    __asm__ volatile(
        "vfmadd231ps %[x], %[y], %[a0]\n\t"
        "vfmadd231ps %[x], %[y], %[a1]\n\t"
        "vfmadd231ps %[x], %[y], %[a2]\n\t"
        "vfmadd231ps %[x], %[y], %[a3]\n\t"
        "vfmadd231ps %[x], %[y], %[a4]\n\t"
        "vfmadd231ps %[x], %[y], %[a5]\n\t"
        "vfmadd231ps %[x], %[y], %[a6]\n\t"
        "vfmadd231ps %[x], %[y], %[a7]\n\t"
        "vfmadd231ps %[x], %[y], %[a8]\n\t"
        "vfmadd231ps %[x], %[y], %[a9]\n\t"
        "vfmadd231ps %[x], %[y], %[a10]\n\t"
        "vfmadd231ps %[x], %[y], %[a11]\n\t"
        : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5), [a6] "+x"(a6),
          [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [a10] "+x"(a10), [a11] "+x"(a11)
        : [x] "x"(x), [y] "x"(y));
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  const double s = static_cast<double>(c1.tv_sec - c0.tv_sec) + 1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec);
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  volatile float sink = _mm256_cvtss_f32(sum);
  (void)sink;
  return 2.0 * 8 * 12 * static_cast<double>(iterations) / s * 1e-9;
}

}  // namespace vv::avx2
