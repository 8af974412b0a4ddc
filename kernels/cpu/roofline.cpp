// Roofline probes: memory bandwidth (STREAM triad, and a read-only stream like the decode's weight
// reads) and peak FMA throughput, measured with a fresh pool of the given thread count. All are timed
// in the CPU time of the threads doing the work, so that a machine shared with other work still gives
// the hardware's figures; on an idle machine this equals wall-clock time. Bandwidth: best of several
// passes over buffers far larger than the LLC.
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"

namespace vv {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float, FreeDeleter>;

// 2 MiB aligned and, where the kernel allows it, on transparent huge pages (like the weights the
// decode streams: CpuBackend::allocate), so page walks do not cap the probe below what the kernels get.
Array make_array(int64_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  return Array(p);
}

double cpu_seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

constexpr int kBandwidthPasses = 7;  // best of: the probe is noisy on a shared machine (33–53 GB/s seen)
constexpr int kReadPasses = 9;       // 3 of each read pattern

// One pass of `body(slice)` over `threads` equal slices, slice t on whichever pool thread takes it,
// each slice timed in the CPU time of the thread that ran it. Returns the slowest slice's seconds:
// the pass as if every slice had its own core the whole time. (Process CPU time ÷ threads, the
// earlier clock, doubles the rate when one thread is preempted and the other runs both slices.)
template <typename F>
double timed_slices(cpu::ThreadPool& pool, int threads, F&& body) {
  std::vector<double> sec(static_cast<size_t>(threads), 0.0);
  pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
      body(t);
      sec[static_cast<size_t>(t)] = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
    }
  });
  return *std::max_element(sec.begin(), sec.end());
}

}  // namespace

double measure_triad_gbps(int threads) {
  threads = std::max(1, threads);
  const int64_t n = int64_t{24} << 20;  // 3 arrays × 96 MiB, far beyond any LLC here
  Array a = make_array(n), b = make_array(n), c = make_array(n);
  if (!a || !b || !c) return 0.0;  // not enough memory for the probe
  cpu::ThreadPool pool(threads, true);
  const bool avx2 = cpu_has_avx2();
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
  auto slice = [&](int64_t t, int64_t* begin) {
    *begin = n * t / threads / 16 * 16;
    return (t + 1 == threads ? n : n * (t + 1) / threads / 16 * 16) - *begin;
  };
  pool.parallel_for(threads, 1, [&](int64_t tb, int64_t te) {  // first touch by the pool threads
    for (int64_t t = tb; t < te; ++t) {
      int64_t s = 0;
      const int64_t len = slice(t, &s);
      for (int64_t i = s; i < s + len; ++i) {
        pa[i] = 0.0f;
        pb[i] = 1.0f;
        pc[i] = 2.0f;
      }
    }
  });
  const float scale = 3.0f;
  double best = 0;
  for (int pass = 0; pass < kBandwidthPasses; ++pass) {
    const double sec = timed_slices(pool, threads, [&](int64_t t) {
      int64_t s = 0;
      const int64_t len = slice(t, &s);
      if (avx2) {
        avx2::stream_triad(pa + s, pb + s, pc + s, scale, len);
      } else {
        for (int64_t i = s; i < s + len; ++i) pa[i] = pb[i] + scale * pc[i];
      }
    });
    if (sec > 0) best = std::max(best, 3.0 * n * sizeof(float) / sec * 1e-9);
  }
  return best;
}

double measure_read_gbps(int threads) {
  threads = std::max(1, threads);
  const int64_t n = int64_t{128} << 20;  // 512 MiB, 16× the largest LLC here
  Array buf = make_array(n);
  if (!buf) return 0.0;
  cpu::ThreadPool pool(threads, true);
  const bool avx2 = cpu_has_avx2();
  float* p = buf.get();
  const int64_t per = n / threads / 64 * 64;  // floats per slice, 256-byte aligned
  pool.parallel_for(threads, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t)
      for (int64_t i = t * per; i < (t + 1) * per; ++i) p[i] = 1.0f;
  });
  std::atomic<uint32_t> sink{0};  // keeps the sums alive
  double best = 0;
  for (int pass = 0; pass < kReadPasses; ++pass) {
    // In turn: one stream per thread; 8 side by side (the GEMV reads 8 weight rows at once); 8 with a
    // software prefetch per line as the GEMV issues. The bound is the best any of them reaches.
    const int streams = pass % 3 == 0 ? 1 : 8;
    const bool prefetch = pass % 3 == 2;
    const double sec = timed_slices(pool, threads, [&](int64_t t) {
      const float* q = p + t * per;
      float s = 0.0f;
      if (avx2) {
        s = avx2::read_stream_sum(q, per, streams, prefetch);
      } else {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t i = 0; i + 8 <= per; i += 8)
          for (int j = 0; j < 8; ++j) acc[j] += q[i + j];
        for (float v : acc) s += v;
      }
      uint32_t bits;
      std::memcpy(&bits, &s, sizeof bits);
      sink.fetch_add(bits, std::memory_order_relaxed);
    });
    if (sec > 0) best = std::max(best, static_cast<double>(per) * threads * sizeof(float) / sec * 1e-9);
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
