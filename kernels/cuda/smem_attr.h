#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace vv::cuda {

// cudaFuncSetAttribute acts on the current device's copy of a kernel, so a kernel launched on several
// devices (replicas, layer shards) needs its dynamic shared memory allowed on each of them. This raises
// `kern`'s limit on the current device to at least `bytes`, calling the runtime only when the kernel
// has not been allowed that much on this device yet; `max_carveout` also asks for the largest
// shared-memory carveout (a hint). Keyed by the kernel's address, not its type: two instantiations with
// the same parameter types are two kernels. Thread-safe; after the first call one lock and one lookup.
cudaError_t allow_dynamic_smem(const void* kern, size_t bytes, bool max_carveout = false);

template <typename... A>
cudaError_t allow_dynamic_smem(void (*kern)(A...), size_t bytes, bool max_carveout = false) {
  return allow_dynamic_smem(reinterpret_cast<const void*>(kern), bytes, max_carveout);
}

}  // namespace vv::cuda
