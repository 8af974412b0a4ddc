// Chooses the decoder: the built-in WAV reader for RIFF/WAVE (the path the goldens pin down),
// FFmpeg for everything else and for WAV codecs the reader leaves unsupported.
#include "engine/audio/audio_decoder.h"

#include "engine/audio/ffmpeg_decoder.h"
#include "engine/audio/wav_reader.h"

namespace vv::audio {

Result<DecodedAudio> decode_audio(std::span<const std::uint8_t> bytes, double max_seconds) {
  if (bytes.empty()) return invalid_argument("audio: the input is empty (0 bytes)");
  if (looks_like_wav(bytes)) {
    Result<DecodedAudio> wav = read_wav(bytes, max_seconds);
    if (wav.is_ok() || wav.status().code() != StatusCode::kUnsupported || !ffmpeg_available()) return wav;
  }
  return decode_with_ffmpeg(bytes, max_seconds);
}

}  // namespace vv::audio
