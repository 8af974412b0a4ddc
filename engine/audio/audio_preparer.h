// prepare_audio: the model's whole audio front end. File bytes -> decoded mono -> 24 kHz (soxr HQ)
// -> loudness-normalised -> zero-padded to a multiple of the hop; plus the frame count and the
// duration string the prompt needs. Pure functions; any thread (run them off the I/O threads).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/audio/decoded_audio.h"

namespace vv::audio {

struct PrepareOptions {
  int sample_rate = 24000;     // the model's rate
  bool normalize = true;       // normalize_audio
  double target_dbfs = -25.0;  // target_dB_FS
  double eps = 1e-6;
  int hop = 3200;              // samples per audio token; the padding multiple
  double max_seconds = 0.0;    // > 0: longer input is rejected (out_of_range)
  bool pad_to_hop = true;      // HF behaviour (the goldens); false: MS parity, input_values unpadded
};

struct PreparedAudio {
  std::vector<float> input_values;  // normalised, zero-padded to frames * hop samples (pad_to_hop)
  std::int64_t samples = 0;         // unpadded length at sample_rate (T)
  std::int64_t frames = 0;          // ceil(samples / hop): the number of audio tokens
  std::string duration;             // "%.2f" of samples / sample_rate, as the prompt writes it
  int source_rate = 0;              // the file's own rate
  int source_channels = 0;          // the file's channel count
  bool peak_renormalised = false;   // the peak guard fired
};

// Formats a duration as the prompt does: printf("%.2f", samples / rate).
std::string format_duration(std::int64_t samples, int rate);

// From file bytes (WAV, or anything FFmpeg decodes when built with it).
Result<PreparedAudio> prepare_audio(std::span<const std::uint8_t> bytes, const PrepareOptions& options = {});

// From already decoded mono samples (e.g. captured audio); takes ownership of them.
Result<PreparedAudio> prepare_decoded(DecodedAudio audio, const PrepareOptions& options = {});

}  // namespace vv::audio
