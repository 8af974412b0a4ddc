// Loudness normalisation of a whole clip (MODEL.md §4.2; MS AudioNormalizer / HF feature
// extractor): scale to a target RMS in dBFS, then rescale if the peak exceeds 1. In place on the
// caller's samples; pure; any thread.
#pragma once

#include <span>

namespace vv::audio {

struct LoudnessOptions {
  double target_dbfs = -25.0;
  double eps = 1e-6;
};

// rms = sqrt(mean(x^2)) accumulated in double; scale = 10^(target/20) / (rms + eps) rounded to
// float32 and applied in float32; then if max|x| > 1: x /= fl32(max|x| + eps).
// Returns true when the peak guard rescaled the clip.
bool normalize_loudness(std::span<float> x, const LoudnessOptions& options = {});

}  // namespace vv::audio
