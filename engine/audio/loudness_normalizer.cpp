// Loudness normalisation (MODEL.md §4.2), computed as recommended there: the sum of squares in
// double, the scale rounded once to float32 and applied in float32, the peak divisor fl32(peak+eps).
#include "engine/audio/loudness_normalizer.h"

#include <algorithm>
#include <cmath>

namespace vv::audio {

bool normalize_loudness(std::span<float> x, const LoudnessOptions& options) {
  if (x.empty()) return false;
  // Eight partial sums (a fixed order, so the result is the same on every run and machine): one
  // chain would wait on each add's latency. They differ from a single chain by ~1e-16 relative,
  // far below the float32 rounding of the scale.
  constexpr std::size_t kLanes = 8;
  const std::size_t n = x.size();
  double part[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l)
      part[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
  }
  for (; i < n; ++i) part[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double sum_sq =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const double rms = std::sqrt(sum_sq / static_cast<double>(n));
  const float scale = static_cast<float>(std::pow(10.0, options.target_dbfs / 20.0) / (rms + options.eps));
  // The peak: a maximum is the same in any order (NaNs are skipped either way), so lanes are exact.
  float lane_peak[kLanes] = {};
  i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      x[i + l] *= scale;
      lane_peak[l] = std::max(lane_peak[l], std::fabs(x[i + l]));
    }
  }
  for (; i < n; ++i) {
    x[i] *= scale;
    lane_peak[0] = std::max(lane_peak[0], std::fabs(x[i]));
  }
  float peak = 0.0f;
  for (float p : lane_peak) peak = std::max(peak, p);
  if (!(peak > 1.0f)) return false;
  const float divisor = static_cast<float>(static_cast<double>(peak) + options.eps);
  for (float& v : x) v /= divisor;
  return true;
}

}  // namespace vv::audio
