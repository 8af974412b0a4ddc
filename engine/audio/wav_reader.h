// WAV (RIFF/WAVE) reader: bytes in memory -> mono float32 at the file's own rate.
// Pure functions over the caller's bytes (nothing retained); any thread.
// PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE, any channel count; samples are
// converted as libsndfile does (PCM16 v/32768, PCM8 (v-128)/128, ...) and averaged to mono in
// float32. Errors name the chunk and byte offset at fault.
// Tolerated as libsndfile tolerates them: a wrong RIFF size (ignored), unknown chunks (LIST, fact,
// junk; odd sizes with their pad byte), 'fmt ' after 'data', a data size of 0xFFFFFFFF (streaming
// writers: the rest of the file), a trailing partial frame (dropped). A chunk that runs past the end
// of the file is an error.
#pragma once

#include <cstdint>
#include <span>

#include "config/status.h"
#include "engine/audio/decoded_audio.h"

namespace vv::audio {

// True when the bytes start with a RIFF/WAVE header (what read_wav accepts).
bool looks_like_wav(std::span<const std::uint8_t> bytes);

// Decodes a whole WAV file. max_seconds > 0 rejects (out_of_range) a file whose data chunk is
// longer than that, before any sample is decoded. A codec other than PCM/float (A-law, ADPCM, ...)
// gives kUnsupported, so a caller may fall back to FFmpeg.
Result<DecodedAudio> read_wav(std::span<const std::uint8_t> bytes, double max_seconds = 0.0);

}  // namespace vv::audio
