// Backend::allocate_host's default: ordinary 64-byte aligned host memory, zero-filled. A backend
// whose device copies faster from page-locked memory (CUDA) overrides it.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/backend.h"

namespace vv {
namespace {

void release_aligned(void* p, size_t) {
  std::free(p);
}

}  // namespace

Buffer Backend::allocate_host(size_t bytes) {
  const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, n);
  if (!p) return Buffer();
  std::memset(p, 0, n);
  return Buffer(p, bytes, &release_aligned);
}

}  // namespace vv
