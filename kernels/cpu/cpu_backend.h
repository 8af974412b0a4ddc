// The CPU Backend: a scalar reference for every op plus AVX2/FMA fast paths chosen at run time, run
// on a persistent pinned thread pool. make_cpu_backend returns an object the caller owns; like every
// Backend it is driven by one thread at a time. The roofline probes are free functions, any thread.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace vv {

struct CpuBackendOptions {
  int threads = 0;  // 0: $VIBEVOICE_THREADS, else physical cores
  bool pin = true;  // pin worker threads to cores
  enum class Isa { kAuto, kScalar, kAvx2, kAvx512 } isa = Isa::kAuto;  // clamped to what the CPU has
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

// Physical cores available to this process (SMT siblings counted once).
int physical_core_count();

// The worker count a CpuBackend made with `threads` gets: threads if > 0, else $VIBEVOICE_THREADS,
// else the physical cores.
int resolve_cpu_threads(int threads);

// Roofline probes used by `vibevoice bench`: measured on this machine with `threads` threads.
// Timed in CPU time (per thread), so a machine shared with other work still gives its hardware figures.
// Bandwidths are GB/s (1e9 bytes), best of 7 (triad) or 9 (read) passes over buffers far larger than
// the LLC, each thread on its own equal slice.
double measure_triad_gbps(int threads);  // STREAM triad a[i]=b[i]+s*c[i]: 3 × 4 bytes per element
double measure_read_gbps(int threads);   // read-only sum, 1 / 8 / 8 prefetched streams per thread
double measure_fma_gflops(int threads);  // peak FMA throughput of the chosen ISA (f32)

}  // namespace vv
