// Capture of named intermediates (`acoustic.latents`, `hidden.3`, `logits.last`, ...) for tests and
// for `--dump`. The model calls a CaptureFn with a device tensor while it is valid; TensorCapture
// downloads it to host memory and owns the copies. Used by the thread that drives the Backend.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/status.h"
#include "kernels/backend.h"

namespace vv {

// Called with an F32 2-D device tensor; the view is only valid during the call.
using CaptureFn = std::function<void(const std::string& name, const Tensor& t)>;

struct CapturedTensor {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;  // row-major [rows, cols]
};

class TensorCapture {
 public:
  explicit TensorCapture(Backend& be) : be_(be) {}
  // A CaptureFn that stores every tensor it sees (a name seen again appends rows: chunked prefill
  // and segmented encoding then yield the whole tensor).
  CaptureFn fn();
  const std::map<std::string, CapturedTensor>& tensors() const { return tensors_; }
  const CapturedTensor* find(const std::string& name) const;
  void clear() { tensors_.clear(); }
  // Writes every captured tensor as F32 to a safetensors file (`--dump`): [rows, cols], except
  // `logits.last` with one row, stored [vocab] as in golden.safetensors.
  Status save_safetensors(const std::string& path) const;

 private:
  Backend& be_;
  std::map<std::string, CapturedTensor> tensors_;
};

}  // namespace vv
