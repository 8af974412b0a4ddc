// The CUDA Backend: every op of kernels/backend.h on one NVIDIA GPU, issued in order on one
// non-blocking stream the backend owns (never the legacy default stream). Buffers are device memory;
// upload/download move bytes between the host and that memory (download waits for the stream).
// Ops are recorded and launched at the next upload/download/synchronize; a recorded sequence that
// repeats with identical operands (the decode step) is replayed as a CUDA graph. Buffers should be
// freed on the thread that drives the backend (that is what launches their pending ops first).
// make_cuda_backend returns an object the caller owns; like every Backend it is driven by one
// thread at a time. This header needs no CUDA headers, so any layer above may include it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/status.h"
#include "kernels/backend.h"

namespace vv {

// What the dense GEMMs compute in. kF32: float32 operands and accumulation (matches the CPU
// reference to f32 rounding). kBF16: the activation operand of a large GEMM is rounded to the
// weight's 16-bit type (bf16/f16) and the product runs on the tensor cores through cuBLASLt with
// f32 accumulation; skinny GEMMs (decode) keep f32 activations either way. Also in kBF16: prefill
// attention runs on the tensor cores (q, k, v and the softmax weights rounded to bf16, f32 softmax and
// accumulation) and the encoders' FFN branch is one tensor-core kernel (the same bf16 operands as
// the unfused GEMMs). Every other op is f32.
enum class CudaCompute : uint8_t { kF32, kBF16 };

struct CudaBackendOptions {
  int device = 0;
  CudaCompute compute = CudaCompute::kF32;
  // Batch-invariant arithmetic: a row's results do not depend on how many other rows share its
  // launches, so a request gives the same bits alone and batched (issue 13's --deterministic). A
  // bf16 GEMM runs on the split-K skinny kernel in launches of up to 128 rows (skinny_gemm.cuh: its
  // K slices depend on the weight's shape only), one-row GEMMs included (no GEMV kernels); other
  // 16-bit GEMMs (f16 weights, the GELU epilogue) take one cuBLASLt algorithm whatever M is (chosen
  // once per weight shape, no split-K); decode attention is the tensor-core kernel for every row
  // count. Also VV_CUDA_DETERMINISTIC=1.
  bool deterministic = false;
};

// GPUs this process can use: 0 when there is no driver or no device (never fails).
int cuda_device_count();
// Why cuda_device_count() is 0 ("no CUDA driver", "no device", ...); empty when a device exists.
std::string cuda_unavailable_reason();

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options = {});

// cuBLASLt (needed for bf16 GEMMs) loaded with dlopen, needing no GPU: its version (e.g. 130100), or
// 0 with the reason in *why.
int cublaslt_version(std::string* why = nullptr);
// The CUDA runtime this binary was built against and links ("13.0").
std::string cuda_runtime_version();

// With VV_CUDA_PROFILE=1 in the environment every op of a CUDA backend is timed (and the stream
// drained after it): the per-op totals since the last call, slowest first. Empty otherwise or for
// another backend.
std::string cuda_profile_report(Backend& be);

}  // namespace vv
