// make_backend: a Backend from a device string, the one place that names every device kind, so
// that the layers above pick a device without naming CUDA. Compiles (and answers "not built with
// CUDA") when the CUDA backend is not built. Returns an object the caller owns; any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "config/status.h"
#include "kernels/backend.h"

namespace vv {

struct DeviceSpec {
  enum class Kind { kCpu, kCuda } kind = Kind::kCpu;
  int index = 0;  // cuda:N
};

struct BackendOptions {
  int cpu_threads = 0;         // 0: $VIBEVOICE_THREADS, else physical cores
  bool gpu_bf16_gemm = false;  // CUDA: large GEMMs on bf16 tensor cores (CudaCompute::kBF16)
  // CUDA: batch-invariant arithmetic (CudaBackendOptions::deterministic). The CPU backend's rows
  // never depend on the other rows of a launch, so this changes nothing there.
  bool deterministic = false;
};

// "cpu", "cuda", "cuda:N", or "auto" (cuda:0 when a GPU is usable, else cpu).
Result<DeviceSpec> parse_device(std::string_view text);
// True when this binary was built with the CUDA backend.
bool cuda_backend_built();
// GPUs usable now (0 without the CUDA backend, a driver or a device).
int usable_gpu_count();
// The GPU BLAS library's version (cuBLASLt, loaded at run time, no GPU needed), or 0 with the reason
// in *why (also when built without CUDA).
int gpu_blas_version(std::string* why = nullptr);
// The CUDA runtime version this binary links ("13.0"); empty when built without CUDA.
std::string gpu_runtime_version();
// Why no GPU is usable ("built without CUDA", "no CUDA driver ...", ...); empty when one is.
std::string gpu_unavailable_reason();

// Memory bandwidth of a backend's own memory as seen through its copy op: read + write bytes per
// second of a large device-to-device copy, best of a few (the GPU's bound for `vibevoice bench`).
double measure_copy_gbps(Backend& be, size_t bytes = size_t{512} << 20);

// Per-op time table of a GPU backend run with VV_CUDA_PROFILE=1 (see kernels/cuda); "" otherwise.
std::string backend_profile_report(Backend& be);

Result<std::unique_ptr<Backend>> make_backend(const DeviceSpec& device, const BackendOptions& options = {});
Result<std::unique_ptr<Backend>> make_backend(std::string_view device, const BackendOptions& options = {});

}  // namespace vv
