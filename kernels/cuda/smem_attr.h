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

// The most dynamic shared memory a block may opt in to on the current device
// (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/89),
// read once per device. Gates of kernels whose shared memory is fixed by their form compare against it,
// so that a GPU with less shared memory takes another path instead of failing the launch.
size_t device_smem_optin();

template <typename... A>
cudaError_t allow_dynamic_smem(void (*kern)(A...), size_t bytes, bool max_carveout = false) {
  return allow_dynamic_smem(reinterpret_cast<const void*>(kern), bytes, max_carveout);
}

}  // namespace vv::cuda
