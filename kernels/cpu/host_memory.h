// Host memory for the CPU backend's buffers (weights, activations, KV pool).
#pragma once

#include <stdlib.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>

namespace vv::cpu {

// `bytes` of 64-byte aligned memory, released with std::free. Large blocks (the weights) are 2 MiB
// aligned and advised onto transparent huge pages where the kernel allows it (THP "madvise" mode),
// so the decode's weight streams do not take a TLB miss and a page walk every 4 KiB: +2–10 % GEMV
// bandwidth measured on the 2-core EPYC (kernels/cpu/NOTES.md). Not yet touched: the caller's first
// write faults the pages in.
inline void* aligned_host_alloc(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t n = (bytes + 63) / 64 * 64;
  if (n < 2 * kHuge) return std::aligned_alloc(64, n);
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, n) != 0) return nullptr;
  madvise(p, n / kHuge * kHuge, MADV_HUGEPAGE);  // whole huge pages only: the tail stays 4 KiB pages
  return p;
}

}  // namespace vv::cpu
