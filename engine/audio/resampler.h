// Resampling with libsoxr's HQ recipe, as python-soxr 1.1.0 `soxr.resample(x, sr, out,
// quality="soxr_hq")` runs it on float32 mono (SOXR_HQ, float32 I/O, 48000-output-sample input
// chunks, then a flush). Any thread: each call owns its soxr object (taken from the calling thread's
// spare when prepare_resampler made one).
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

// Creates, on the calling thread, the soxr object that this thread's next resample_hq from in_rate
// to out_rate will use (one spare per thread; another pair of rates replaces it). soxr_create designs
// the filter, about a tenth of resampling a 2 s clip: a server calls this after answering a request
// so that the next one does not wait for it. A fresh object is used either way, so the output is the
// same with or without it. Equal or invalid rates: nothing to prepare.
void prepare_resampler(int in_rate, int out_rate);

}  // namespace vv::audio
