#include "service/api/realtime_audio.h"

#include <algorithm>
#include <cmath>

namespace vv::api {

std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;  // '-' / '_': the URL-safe alphabet is accepted too
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3 + 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

bool valid_pcm_rate(std::int64_t rate) {
  switch (rate) {
    case 8000:
    case 16000:
    case 22050:
    case 24000:
    case 32000:
    case 44100:
    case 48000:
      return true;
    default:
      return false;
  }
}

float mulaw_to_float(unsigned char v) {
  // ITU-T G.711 µ-law expansion to a 16-bit linear value.
  v = static_cast<unsigned char>(~v);
  const int sign = v & 0x80;
  const int exponent = (v >> 4) & 0x07;
  const int mantissa = v & 0x0F;
  int sample = ((mantissa << 3) + 0x84) << exponent;
  sample -= 0x84;
  return static_cast<float>(sign ? -sample : sample) / 32768.0f;
}

float alaw_to_float(unsigned char v) {
  v ^= 0x55;
  const int sign = v & 0x80;
  const int exponent = (v >> 4) & 0x07;
  const int mantissa = v & 0x0F;
  int sample = exponent == 0 ? (mantissa << 4) + 8 : ((mantissa << 4) + 0x108) << (exponent - 1);
  return static_cast<float>(sign ? sample : -sample) / 32768.0f;
}

void SampleDecoder::append(std::string_view bytes, std::vector<float>& out) {
  if (format_.encoding == AudioEncoding::kPcmu || format_.encoding == AudioEncoding::kPcma) {
    const bool mu = format_.encoding == AudioEncoding::kPcmu;
    out.reserve(out.size() + bytes.size());
    for (char c : bytes) {
      const auto b = static_cast<unsigned char>(c);
      out.push_back(mu ? mulaw_to_float(b) : alaw_to_float(b));
    }
    return;
  }
  std::size_t i = 0;
  auto push = [&out](unsigned char lo, unsigned char hi) {
    const auto s = static_cast<std::int16_t>(static_cast<std::uint16_t>(lo | (hi << 8)));
    out.push_back(static_cast<float>(s) / 32768.0f);
  };
  if (carry_ && !bytes.empty()) {
    push(*carry_, static_cast<unsigned char>(bytes[0]));
    carry_.reset();
    i = 1;
  }
  out.reserve(out.size() + (bytes.size() - i) / 2);
  for (; i + 1 < bytes.size(); i += 2) {
    push(static_cast<unsigned char>(bytes[i]), static_cast<unsigned char>(bytes[i + 1]));
  }
  if (i < bytes.size()) carry_ = static_cast<unsigned char>(bytes[i]);
}

void VoiceActivityDetector::configure(VadOptions o, int rate) {
  opt_ = o;
  rate_ = rate;
  frame_ = static_cast<std::size_t>(std::max(1, rate / 50));
}

void VoiceActivityDetector::reset() {
  pending_.clear();
  in_speech_ = false;
  silence_run_ = 0;
}

std::vector<VoiceActivityDetector::Event> VoiceActivityDetector::feed(const float* samples, std::size_t n,
                                                                      std::int64_t first_sample) {
  std::vector<Event> events;
  if (pending_.empty()) pending_start_ = first_sample;
  const double level = std::pow(10.0, threshold_dbfs(opt_.threshold) / 20.0);
  const double level_sq = level * level;
  const auto silence_needed = static_cast<std::int64_t>(opt_.silence_duration_ms) * rate_ / 1000;
  for (std::size_t i = 0; i < n; ++i) {
    pending_.push_back(samples[i]);
    if (pending_.size() < frame_) continue;
    double energy = 0;
    for (float x : pending_) energy += static_cast<double>(x) * x;
    energy /= static_cast<double>(pending_.size());
    const bool speech = energy > level_sq;
    const std::int64_t frame_end = pending_start_ + static_cast<std::int64_t>(pending_.size());
    if (speech) {
      if (!in_speech_) events.push_back({Event::Kind::kStarted, pending_start_});
      in_speech_ = true;
      silence_run_ = 0;
    } else if (in_speech_) {
      silence_run_ += static_cast<std::int64_t>(pending_.size());
      if (silence_run_ >= silence_needed) {
        events.push_back({Event::Kind::kStopped, frame_end});
        in_speech_ = false;
        silence_run_ = 0;
      }
    }
    pending_.clear();
    pending_start_ = frame_end;
  }
  return events;
}

}  // namespace vv::api
