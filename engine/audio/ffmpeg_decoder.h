// FFmpeg decoder: any container/codec FFmpeg knows, decoded in-process from a memory buffer
// (custom AVIOContext; no temp file, no child process) to mono float32 at the stream's own rate.
// Pure function over the caller's bytes; any thread (each call owns its FFmpeg contexts).
// Without FFmpeg at build time (VV_HAVE_FFMPEG undefined) every call fails with kUnsupported.
#pragma once

#include <cstdint>
#include <span>

#include "config/status.h"
#include "engine/audio/decoded_audio.h"

namespace vv::audio {

// Whether this build can decode through FFmpeg.
bool ffmpeg_available();

// Decodes the best audio stream. max_seconds > 0 is checked while decoding: once more than that
// much audio has come out, decoding stops with out_of_range. Encoder delay/padding is removed the
// way FFmpeg's own decoders do it (skip-samples side data).
Result<DecodedAudio> decode_with_ffmpeg(std::span<const std::uint8_t> bytes, double max_seconds = 0.0);

}  // namespace vv::audio
