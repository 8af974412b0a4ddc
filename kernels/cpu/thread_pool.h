// A persistent pool of worker threads (optionally pinned to cores) with a low-overhead parallel_for:
// workers spin briefly on a generation counter, then sleep on a futex (std::atomic::wait).
// The pool is owned by its CpuBackend; run/parallel_for may be called by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace vv::cpu {

class ThreadPool {
 public:
  ThreadPool(int threads, bool pin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // workers + the caller

  using TaskFn = void (*)(void* ctx, int64_t begin, int64_t end);
  // Calls fn(ctx, b, e) over [0, n) in chunks of `grain` (the last may be shorter); the caller
  // takes part. Chunks go to whichever thread is free, so fn must not depend on who runs it.
  void run(int64_t n, int64_t grain, TaskFn fn, void* ctx);

  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<Fn*>(c))(b, e); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  void worker_main(int index, int cpu);
  void drain();

  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stop_{false};
  int64_t n_ = 0;
  int64_t grain_ = 1;
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

// The CPUs this process may run on (sched_getaffinity), in order.
std::vector<int> allowed_cpus();

}  // namespace vv::cpu
