// DecodedAudio: a clip decoded to mono float32 at the file's own sample rate.
// A plain value type; whoever holds it owns the samples. Safe to move between threads.
#pragma once

#include <cstdint>
#include <vector>

namespace vv::audio {

struct DecodedAudio {
  std::vector<float> samples;  // mono: the mean of the file's channels, computed in float32
  int sample_rate = 0;         // Hz, the file's own rate
  int channels = 0;            // channel count of the source before the downmix
};

}  // namespace vv::audio
