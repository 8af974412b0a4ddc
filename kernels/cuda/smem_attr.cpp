#include "kernels/cuda/smem_attr.h"

#include <map>
#include <mutex>
#include <utility>

namespace vv::cuda {

cudaError_t allow_dynamic_smem(const void* kern, size_t bytes, bool max_carveout) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device) → bytes allowed
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kern, dev);
  const auto it = allowed.find(key);
  if (it != allowed.end() && it->second >= bytes) return cudaSuccess;
  cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess && max_carveout)
    e = cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
  if (e == cudaSuccess) allowed[key] = bytes;
  return e;
}

}  // namespace vv::cuda
