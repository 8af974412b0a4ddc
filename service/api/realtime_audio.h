// Audio helpers of the realtime WebSocket sessions (API.md §11.2, §12.1): base64 decoding of
// input_audio_buffer.append, the session input formats (PCM16 little-endian at a rate, G.711 µ-law /
// A-law at 8 kHz) to float samples, and the energy-based voice activity detector behind
// turn_detection "server_vad". Pure values and functions; one detector per session (not shared).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vv::api {

// RFC 4648 base64 (padding optional, no whitespace); nullopt on any other character.
std::optional<std::string> base64_decode(std::string_view in);

enum class AudioEncoding { kPcm16, kPcmu, kPcma };

struct InputFormat {
  AudioEncoding encoding = AudioEncoding::kPcm16;
  int rate = 24000;
  bool operator==(const InputFormat&) const = default;
};

// Rates accepted for audio/pcm (§11.2).
bool valid_pcm_rate(std::int64_t rate);

// Turns appended bytes into samples in [-1, 1). PCM16 frames may be split across appends: an odd
// trailing byte is kept and completes the next append.
class SampleDecoder {
 public:
  void set_format(InputFormat f) { format_ = f; }
  const InputFormat& format() const { return format_; }
  void append(std::string_view bytes, std::vector<float>& out);
  void clear() { carry_.reset(); }

 private:
  InputFormat format_;
  std::optional<unsigned char> carry_;
};

float mulaw_to_float(unsigned char v);
float alaw_to_float(unsigned char v);

struct VadOptions {
  double threshold = 0.5;  // 0–1: higher needs louder speech
  int prefix_padding_ms = 300;
  int silence_duration_ms = 500;
};

// Energy VAD on 20 ms frames: a frame is speech when its RMS level is above a level derived from
// the threshold (0 → -60 dBFS, 0.5 → -35 dBFS, 1 → -10 dBFS). Speech starts on the first speech
// frame and stops once silence_duration_ms of non-speech frames followed it. Positions are sample
// counts on the session timeline (at the input rate).
class VoiceActivityDetector {
 public:
  struct Event {
    enum class Kind { kStarted, kStopped } kind;
    std::int64_t sample = 0;  // kStarted: first speech sample; kStopped: when the silence was confirmed
  };

  void configure(VadOptions o, int rate);
  // Feeds samples that start at session position `first_sample` (contiguous with earlier calls).
  std::vector<Event> feed(const float* samples, std::size_t n, std::int64_t first_sample);
  bool in_speech() const { return in_speech_; }
  void reset();

  static double threshold_dbfs(double threshold) { return -60.0 + 50.0 * threshold; }

 private:
  VadOptions opt_;
  int rate_ = 24000;
  std::size_t frame_ = 480;
  std::vector<float> pending_;  // samples of an incomplete frame
  std::int64_t pending_start_ = 0;
  bool in_speech_ = false;
  std::int64_t silence_run_ = 0;  // samples of consecutive non-speech frames while in speech
};

}  // namespace vv::api
