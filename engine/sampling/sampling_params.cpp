#include "engine/sampling/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace vv {

Status validate(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return invalid_argument("sampling: temperature must be a finite number >= 0, got " +
                            std::to_string(params.temperature));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return invalid_argument("sampling: top_p must be in (0, 1], got " + std::to_string(params.top_p));
  }
  if (params.top_k < -1) {
    return invalid_argument("sampling: top_k must be >= -1, got " + std::to_string(params.top_k));
  }
  if (params.top_logprobs < 0 || params.top_logprobs > 20) {
    return invalid_argument("sampling: top_logprobs must be in 0..20, got " + std::to_string(params.top_logprobs));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return invalid_argument("sampling: min_p must be in [0, 1], got " + std::to_string(params.min_p));
  }
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    return invalid_argument("sampling: repetition_penalty must be > 0, got " +
                            std::to_string(params.repetition_penalty));
  }
  if (!std::isfinite(params.presence_penalty) || !std::isfinite(params.frequency_penalty)) {
    return invalid_argument("sampling: presence_penalty and frequency_penalty must be finite");
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0 || !std::isfinite(bias)) {
      return invalid_argument("sampling: logit_bias entry for token " + std::to_string(id) +
                              " must have a token id >= 0 and a finite bias");
    }
  }
  if (params.max_new_tokens < 1) {
    return invalid_argument("sampling: max_new_tokens must be >= 1, got " +
                            std::to_string(params.max_new_tokens));
  }
  return Status::ok();
}

float recovery_temperature(float temperature) {
  return std::min(1.0f, std::max(temperature + 0.3f, 0.3f));
}

}  // namespace vv
