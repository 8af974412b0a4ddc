// Loudness normalisation (MODEL.md §4.2), computed as recommended there: the sum of squares in
// double, the scale rounded once to float32 and applied in float32, the peak divisor fl32(peak+eps).
#include "engine/audio/loudness_normalizer.h"

#include <algorithm>
#include <cmath>

namespace vv::audio {

bool normalize_loudness(std::span<float> x, const LoudnessOptions& options) {
  if (x.empty()) return false;
  double sum_sq = 0.0;
  for (float v : x) sum_sq += static_cast<double>(v) * static_cast<double>(v);
  const double rms = std::sqrt(sum_sq / static_cast<double>(x.size()));
  const float scale = static_cast<float>(std::pow(10.0, options.target_dbfs / 20.0) / (rms + options.eps));
  float peak = 0.0f;
  for (float& v : x) {
    v *= scale;
    peak = std::max(peak, std::fabs(v));
  }
  if (!(peak > 1.0f)) return false;
  const float divisor = static_cast<float>(static_cast<double>(peak) + options.eps);
  for (float& v : x) v /= divisor;
  return true;
}

}  // namespace vv::audio
