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
  if (params.top_k < 0) {
    return invalid_argument("sampling: top_k must be >= 0, got " + std::to_string(params.top_k));
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
