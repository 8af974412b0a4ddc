// DeviceTensor: a Buffer on a Backend together with the Tensor view that describes it, and the
// helpers that copy checkpoint weights (HostTensor) onto a backend once at load. Each DeviceTensor
// owns its buffer; uploads run on the thread that drives the Backend.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "config/status.h"
#include "engine/checkpoint/weights.h"
#include "kernels/backend.h"

namespace vv {

struct DeviceTensor {
  Buffer buf;
  Tensor t;  // view over buf (2-D, or 1-D for vectors)
};

// An F32 matrix [rows, cols] of zeros on the backend.
DeviceTensor alloc_f32(Backend& be, int64_t rows, int64_t cols);
// An I32 vector [n] of zeros on the backend.
DeviceTensor alloc_i32(Backend& be, int64_t n);

// Fails unless t has exactly `shape` (the message names the tensor and both shapes).
Status expect_shape(const HostTensor& t, std::initializer_list<int64_t> shape);

// Called with each host weight's bytes once the upload_* helpers below have copied it to the
// device (on the uploading thread); empty = nothing. The Runner sets it while binding to drop host
// pages that are no longer needed (RunnerOptions::consume_weights). Returns the previous hook.
using UploadedFn = std::function<void(const void* data, size_t bytes)>;
UploadedFn set_upload_hook(UploadedFn fn);

// A GEMM weight as stored (F32/BF16/F16), viewed 2-D [shape0, prod(rest)].
Result<DeviceTensor> upload_matrix(Backend& be, const HostTensor& w);
// Rows of a then rows of b (same dtype and columns): e.g. gate and up as one [2I, H] weight.
Result<DeviceTensor> upload_stacked_rows(Backend& be, const HostTensor& a, const HostTensor& b);
// The same for any number of tensors, in order: e.g. q, k and v as one [qd + 2·kvd, H] weight.
Result<DeviceTensor> upload_stacked_rows(Backend& be, std::initializer_list<const HostTensor*> parts);
// Vectors converted to F32 and joined end to end (e.g. the q, k and v biases as one vector).
Result<DeviceTensor> upload_joined_f32(Backend& be, std::initializer_list<const HostTensor*> parts);
// A small tensor converted to F32 (norm weights, biases, layer scales, depthwise kernels), viewed
// as a vector (1-D input) or as [shape0, prod(rest)].
Result<DeviceTensor> upload_f32(Backend& be, const HostTensor& w);
// A conv weight [out, in, K] reordered to [out, K·in] (same dtype), so that a causal conv becomes a
// GEMM over overlapping input rows laid out [time, in].
Result<DeviceTensor> upload_conv_as_gemm(Backend& be, const HostTensor& w);

}  // namespace vv
