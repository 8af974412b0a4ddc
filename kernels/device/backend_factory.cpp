#include "kernels/device/backend_factory.h"

#include <algorithm>
#include <chrono>
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

int gpu_blas_version([[maybe_unused]] std::string* why) {
#if VV_HAVE_CUDA
  return cublaslt_version(why);
#else
  if (why) *why = "this binary was built without the CUDA backend";
  return 0;
#endif
}

std::string gpu_runtime_version() {
#if VV_HAVE_CUDA
  return cuda_runtime_version();
#else
  return {};
#endif
}

std::string gpu_unavailable_reason() {
#if VV_HAVE_CUDA
  return cuda_unavailable_reason();
#else
  return "this binary was built without the CUDA backend";
#endif
}

double measure_copy_gbps(Backend& be, size_t bytes) {
  Buffer a = be.allocate(bytes), b = be.allocate(bytes);
  if (!a.data() || !b.data()) return 0;
  const int64_t cols = 1 << 20;
  Tensor src = Tensor::matrix(a.data(), DType::kU8, static_cast<int64_t>(bytes) / cols, cols);
  Tensor dst = Tensor::matrix(b.data(), DType::kU8, static_cast<int64_t>(bytes) / cols, cols);
  be.copy(src, dst);  // warm-up
  be.synchronize();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) be.copy(src, dst);
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 4.0 * 2.0 * static_cast<double>(src.rows() * cols) / s / 1e9);
  }
  return best;
}

std::string backend_profile_report([[maybe_unused]] Backend& be) {
#if VV_HAVE_CUDA
  return cuda_profile_report(be);
#else
  return {};
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
  o.deterministic = options.deterministic;
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
