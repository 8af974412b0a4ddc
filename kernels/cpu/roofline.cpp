// Roofline probes: STREAM triad bandwidth and peak FMA throughput, measured with a fresh pool.
// Both are timed in CPU time (process CPU time / threads for the triad, each thread's own CPU time
// for the FMA loop) so that a machine shared with other work still gives the hardware's figures;
// on an idle machine this equals wall-clock time.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"

namespace vv {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float, FreeDeleter>;

Array make_array(int64_t n) { return Array(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))); }

double cpu_seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

double measure_triad_gbps(int threads) {
  const int64_t n = int64_t{24} << 20;  // 3 arrays × 96 MiB, far beyond any LLC here
  Array a = make_array(n), b = make_array(n), c = make_array(n);
  if (!a || !b || !c) return 0.0;  // not enough memory for the probe
  cpu::ThreadPool pool(std::max(1, threads), true);
  const int64_t chunk = 1 << 16;
  float* pa = a.get();
  const float* pb = b.get();
  const float* pc = c.get();
  pool.parallel_for(n, chunk, [&](int64_t s, int64_t e) {  // first touch by the pool threads
    for (int64_t i = s; i < e; ++i) {
      pa[i] = 0.0f;
      const_cast<float*>(pb)[i] = 1.0f;
      const_cast<float*>(pc)[i] = 2.0f;
    }
  });
  const float scale = 3.0f;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    pool.parallel_for(n, chunk, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + scale * pc[i];
    });
    const double sec = (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - t0) / pool.size();
    best = std::max(best, 3.0 * n * sizeof(float) / sec * 1e-9);
  }
  return best;
}

double measure_fma_gflops(int threads) {
  threads = std::max(1, threads);
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu::ThreadPool pool(threads, true);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int64_t> total_milli{0};  // sum of per-thread GFLOP/s × 1000
    pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        double g = 0;
        if (avx2) {
          g = avx2::fma_peak_one_thread(int64_t{20} << 20);
        } else {  // scalar: 12 independent multiply-add chains
          float acc[12];
          for (int i = 0; i < 12; ++i) acc[i] = static_cast<float>(i);
          const int64_t it = int64_t{10} << 20;
          const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
          for (int64_t k = 0; k < it; ++k)
            for (int i = 0; i < 12; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
          const double s = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
          volatile float sink = acc[0] + acc[11];
          (void)sink;
          g = 2.0 * 12 * static_cast<double>(it) / s * 1e-9;
        }
        total_milli.fetch_add(static_cast<int64_t>(g * 1000));
      }
    });
    best = std::max(best, total_milli.load() / 1000.0);
  }
  return best;
}

}  // namespace vv
