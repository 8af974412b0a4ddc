// Resampling with libsoxr's HQ recipe, as python-soxr 1.1.0 `soxr.resample(x, sr, out,
// quality="soxr_hq")` runs it on float32 mono (SOXR_HQ, float32 I/O, 48000-output-sample input
// chunks, then a flush). Pure function; any thread (each call owns its soxr object).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "config/status.h"

namespace vv::audio {

// The length every reference gives a resampled clip: ceil(n * out_rate / in_rate).
std::int64_t resampled_length(std::int64_t n, int in_rate, int out_rate);

// Resamples mono float32 from in_rate to out_rate, then zero-pads or trims to exactly
// resampled_length(x.size(), in_rate, out_rate). Equal rates return a copy.
Result<std::vector<float>> resample_hq(std::span<const float> x, int in_rate, int out_rate);

}  // namespace vv::audio
