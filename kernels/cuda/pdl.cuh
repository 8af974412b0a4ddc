// Programmatic dependent launch (sm_90+): a kernel launched with launch_pdl may start while the
// previous kernel in the stream finishes; it calls pdl_wait() before touching anything that kernel
// wrote, and may do independent work (loading weights) before that. pdl_trigger() lets the next
// kernel start its own prologue. VV_CUDA_PDL=0 turns the attribute off (the A/B switch).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace vv::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Whether launches carry the attribute: an sm_90+ device and VV_CUDA_PDL unset or not "0" (read once).
bool pdl_enabled();

// A launch with `attr` (null: none) as its one launch attribute; cudaLaunchKernelEx's status.
template <typename... KArgs, typename... Args>
cudaError_t launch_with(const cudaLaunchAttribute* attr, void (*kern)(KArgs...), dim3 grid, unsigned block,
                        size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute a[1];
  if (attr) a[0] = *attr;
  cfg.attrs = a;
  cfg.numAttrs = attr ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kern, args...);
}
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kern)(KArgs...), dim3 grid, unsigned block, size_t smem, cudaStream_t s,
                       Args... args) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return launch_with(pdl_enabled() ? &attr : nullptr, kern, grid, block, smem, s, args...);
}
template <typename... KArgs, typename... Args>
void launch_pdl(void (*kern)(KArgs...), unsigned grid, unsigned block, cudaStream_t s, Args... args) {
  launch_pdl(kern, dim3(grid), block, 0, s, args...);
}

}  // namespace vv::cuda
