// The speech connectors (MODEL.md §6): per frame, fc1 → RMSNorm(eps 1e-6) → fc2, for the acoustic
// and the semantic latents; the two results are summed into the decoder's speech rows [F, H].
// A SpeechConnector owns its device weights and a workspace of max_rows rows (longer inputs are
// tiled). One thread (the Backend's driver) at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "config/status.h"
#include "engine/checkpoint/weights.h"
#include "engine/model/device_tensor.h"
#include "kernels/backend.h"

namespace vv {

class SpeechConnector {
 public:
  static constexpr float kNormEps = 1e-6f;

  static Result<std::unique_ptr<SpeechConnector>> create(Backend& be, const ConnectorWeights& acoustic,
                                                         const ConnectorWeights& semantic, int hidden,
                                                         int acoustic_dim, int semantic_dim, int64_t max_rows = 1024);

  // out[F, H] = connector_a(acoustic[F, Da]) + connector_s(semantic[F, Ds]); F32 on the backend.
  Status run(const Tensor& acoustic, const Tensor& semantic, Tensor& out);

  int hidden() const { return hidden_; }

 private:
  struct Branch {
    DeviceTensor fc1_w, fc1_b, norm, fc2_w, fc2_b;
  };
  SpeechConnector(Backend& be) : be_(be) {}
  static Result<Branch> load_branch(Backend& be, const ConnectorWeights& w, int hidden, int in_dim);
  void run_branch(const Branch& b, const Tensor& in, Tensor& out, Epilogue ep);

  Backend& be_;
  int hidden_ = 0;
  int64_t max_rows_ = 0;
  Branch acoustic_, semantic_;
  DeviceTensor h_;  // [max_rows, H]
};

}  // namespace vv
