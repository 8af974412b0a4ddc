#include "kernels/device/backend_factory.h"

#include <cstdlib>
#include <string>

#include "kernels/cpu/cpu_backend.h"
#if VV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace vv {

Result<DeviceSpec> parse_device(std::string_view text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "auto") {
    if (usable_gpu_count() > 0) d.kind = DeviceSpec::Kind::kCuda;
    return d;
  }
  if (text == "cuda") {
    d.kind = DeviceSpec::Kind::kCuda;
    return d;
  }
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    const std::string num(text.substr(5));
    char* end = nullptr;
    const long v = std::strtol(num.c_str(), &end, 10);
    if (end && *end == '\0' && v >= 0 && v < 1024) {
      d.kind = DeviceSpec::Kind::kCuda;
      d.index = static_cast<int>(v);
      return d;
    }
  }
  return invalid_argument("device \"" + std::string(text) + "\": expected cpu, cuda, cuda:N or auto");
}

bool cuda_backend_built() {
#if VV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int usable_gpu_count() {
#if VV_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

std::string gpu_unavailable_reason() {
#if VV_HAVE_CUDA
  return cuda_unavailable_reason();
#else
  return "this binary was built without the CUDA backend";
#endif
}

Result<std::unique_ptr<Backend>> make_backend(const DeviceSpec& device, const BackendOptions& options) {
  if (device.kind == DeviceSpec::Kind::kCpu) {
    CpuBackendOptions o;
    o.threads = options.cpu_threads;
    return make_cpu_backend(o);
  }
#if VV_HAVE_CUDA
  CudaBackendOptions o;
  o.device = device.index;
  o.compute = options.gpu_bf16_gemm ? CudaCompute::kBF16 : CudaCompute::kF32;
  return make_cuda_backend(o);
#else
  return unsupported("device cuda:" + std::to_string(device.index) + ": " + gpu_unavailable_reason());
#endif
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view device, const BackendOptions& options) {
  VV_ASSIGN_OR_RETURN(DeviceSpec d, parse_device(device));
  return make_backend(d, options);
}

}  // namespace vv
