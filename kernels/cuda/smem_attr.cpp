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
  if (e == cudaSuccess) {
    allowed[key] = bytes;
  } else if (cudaPeekAtLastError() == e) {
    cudaGetLastError();  // the refusal is returned here; it must not fail the next launch's check
  }
  return e;
}

size_t device_smem_optin() {
  static std::mutex mu;
  static std::map<int, size_t> limit;  // device → bytes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = limit.find(dev); it != limit.end()) return it->second;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    v = 48 * 1024;  // every CUDA device allows this much without opting in
  }
  return limit[dev] = static_cast<size_t>(v);
}

}  // namespace vv::cuda
