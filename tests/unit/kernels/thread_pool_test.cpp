// The CPU thread pool: every index runs exactly once whatever the sizes, a pool used right after
// construction does not miss its first run, and the thread count follows option > env > cores.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace vv {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnceOverManyRunsAndGrains) {
  cpu::ThreadPool pool(3, false);
  EXPECT_EQ(pool.size(), 3);
  for (int run = 0; run < 500; ++run) {
    const int64_t n = 1 + (run * 37) % 1000, grain = 1 + run % 17;
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
      ASSERT_LE(e - b, grain);
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "run " << run << " index " << i;
  }
}

TEST(ThreadPool, RunRightAfterConstructionCompletes) {
  // Workers that had not started yet when the first run was issued used to miss it and hang.
  for (int i = 0; i < 100; ++i) {
    cpu::ThreadPool pool(4, false);
    std::atomic<int> sum{0};
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { sum.fetch_add(static_cast<int>(e - b)); });
    ASSERT_EQ(sum.load(), 64);
  }
}

TEST(ThreadPool, ThreadCountFollowsOptionThenEnvironmentThenCores) {
  const char* old = std::getenv("VIBEVOICE_THREADS");
  const std::string saved = old ? old : "";
  setenv("VIBEVOICE_THREADS", "3", 1);
  CpuBackendOptions o;
  o.pin = false;
  EXPECT_NE(make_cpu_backend(o)->name().find("(3 threads)"), std::string::npos);
  o.threads = 2;
  EXPECT_NE(make_cpu_backend(o)->name().find("(2 threads)"), std::string::npos);
  unsetenv("VIBEVOICE_THREADS");
  o.threads = 0;
  char want[32];
  std::snprintf(want, sizeof(want), "(%d threads)", physical_core_count());
  EXPECT_NE(make_cpu_backend(o)->name().find(want), std::string::npos);
  if (old) setenv("VIBEVOICE_THREADS", saved.c_str(), 1);
}

}  // namespace
}  // namespace vv
