// libFuzzer target over the WAV reader: any bytes must give a clean Status or a well-formed clip,
// never a crash, overflow or out-of-bounds read. Valid clips of modest size also run through the
// rest of the front end (resample, normalise, pad).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "engine/audio/audio_preparer.h"
#include "engine/audio/wav_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  (void)vv::audio::looks_like_wav(bytes);
  vv::Result<vv::audio::DecodedAudio> clip = vv::audio::read_wav(bytes, 600.0);
  if (!clip.is_ok()) {
    if (clip.status().message().empty()) std::abort();  // every failure must say why
    return 0;
  }
  const vv::audio::DecodedAudio& a = *clip;
  // Every output sample comes from at least one input byte.
  if (a.sample_rate <= 0 || a.channels <= 0 || a.samples.size() > size) std::abort();
  if (a.samples.empty() || a.samples.size() > 20000 || a.sample_rate < 2000 || a.sample_rate > 200000) return 0;
  vv::Result<vv::audio::PreparedAudio> prepared = vv::audio::prepare_decoded(a);
  if (!prepared.is_ok()) return 0;
  const vv::audio::PreparedAudio& p = *prepared;
  if (p.frames * 3200 != static_cast<std::int64_t>(p.input_values.size()) || p.samples <= 0 ||
      p.samples > static_cast<std::int64_t>(p.input_values.size())) {
    std::abort();
  }
  return 0;
}
