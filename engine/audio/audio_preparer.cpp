// The front end in the reference's order: decode, downmix (done by the decoders), resample to the
// model rate, normalise over the whole clip, right-pad with zeros to a multiple of the hop.
#include "engine/audio/audio_preparer.h"

#include <cstdio>
#include <utility>

#include "engine/audio/audio_decoder.h"
#include "engine/audio/loudness_normalizer.h"
#include "engine/audio/resampler.h"

namespace vv::audio {

std::string format_duration(std::int64_t samples, int rate) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(samples) / static_cast<double>(rate));
  return buf;
}

Result<PreparedAudio> prepare_decoded(DecodedAudio audio, const PrepareOptions& options) {
  if (options.sample_rate <= 0) return invalid_argument("audio: options.sample_rate must be positive");
  if (options.hop <= 0) return invalid_argument("audio: options.hop must be positive");
  if (audio.sample_rate <= 0) return invalid_argument("audio: the decoded audio has no sample rate");
  if (audio.samples.empty()) return invalid_argument("audio: the input holds no samples");
  if (options.max_seconds > 0.0 &&
      static_cast<double>(audio.samples.size()) > options.max_seconds * audio.sample_rate) {
    return out_of_range("audio: " + std::to_string(static_cast<double>(audio.samples.size()) / audio.sample_rate) +
                        " s is over the " + std::to_string(options.max_seconds) + " s limit");
  }
  PreparedAudio out;
  out.source_rate = audio.sample_rate;
  out.source_channels = audio.channels;
  if (audio.sample_rate == options.sample_rate) {
    out.input_values = std::move(audio.samples);
  } else {
    VV_ASSIGN_OR_RETURN(out.input_values, resample_hq(audio.samples, audio.sample_rate, options.sample_rate));
    audio.samples = {};
  }
  out.samples = static_cast<std::int64_t>(out.input_values.size());
  if (options.normalize) {
    out.peak_renormalised = normalize_loudness(out.input_values, {options.target_dbfs, options.eps});
  }
  out.frames = (out.samples + options.hop - 1) / options.hop;
  if (options.pad_to_hop) out.input_values.resize(static_cast<std::size_t>(out.frames * options.hop), 0.0f);
  out.duration = format_duration(out.samples, options.sample_rate);
  return out;
}

Result<PreparedAudio> prepare_audio(std::span<const std::uint8_t> bytes, const PrepareOptions& options) {
  VV_ASSIGN_OR_RETURN(DecodedAudio audio, decode_audio(bytes, options.max_seconds));
  return prepare_decoded(std::move(audio), options);
}

}  // namespace vv::audio
