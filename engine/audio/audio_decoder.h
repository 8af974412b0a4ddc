// decode_audio: bytes of any supported file -> mono float32 at the file's own rate.
// WAV goes through the built-in reader (the bit-exact path); everything else, and WAV codecs the
// reader does not handle, goes through FFmpeg when built with it. Pure function; any thread.
#pragma once

#include <cstdint>
#include <span>

#include "config/status.h"
#include "engine/audio/decoded_audio.h"

namespace vv::audio {

// max_seconds > 0: longer input fails with out_of_range (checked before or while decoding).
Result<DecodedAudio> decode_audio(std::span<const std::uint8_t> bytes, double max_seconds = 0.0);

}  // namespace vv::audio
