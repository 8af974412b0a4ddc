#include "service/api/audio_intake.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "engine/text/utf8.h"
#include "service/api/handlers.h"

namespace vv::api {

std::string sniff_container(std::string_view b) {
  auto at = [&](std::size_t off, const char* magic) {
    const std::size_t n = std::strlen(magic);
    return b.size() >= off + n && std::memcmp(b.data() + off, magic, n) == 0;
  };
  const auto u = [&](std::size_t i) { return i < b.size() ? static_cast<unsigned char>(b[i]) : 0u; };
  if ((at(0, "RIFF") && at(8, "WAVE")) || at(0, "RF64") || at(0, "BW64")) return "wav";
  if (at(0, "fLaC")) return "flac";
  if (at(0, "ID3")) return "mp3";
  if (at(0, "OggS")) return "ogg";
  if (u(0) == 0x1A && u(1) == 0x45 && u(2) == 0xDF && u(3) == 0xA3) return "webm";
  if (at(4, "ftyp")) return "mp4";
  if (at(0, "FORM") && (at(8, "AIFF") || at(8, "AIFC"))) return "aiff";
  if (at(0, "#!AMR")) return "amr";
  if (b.size() >= 2 && u(0) == 0xFF && (u(1) == 0xF1 || u(1) == 0xF9)) return "aac";
  // MPEG audio frame sync: 11 set bits, a valid layer and a non-reserved bitrate/rate.
  if (b.size() >= 4 && u(0) == 0xFF && (u(1) & 0xE0) == 0xE0 && (u(1) & 0x06) != 0 && (u(2) & 0xF0) != 0xF0 &&
      (u(2) & 0x0C) != 0x0C) {
    return "mp3";
  }
  return "";
}

namespace {

std::uint32_t le32(const std::string& b, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}

void put32(std::string& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// §2.6: a RIFF/WAVE file whose data simply ends early is transcribed up to the truncation. The
// header's sizes are rewritten to what arrived (whole sample frames), or nullopt if no data chunk.
std::optional<std::string> repair_truncated_wav(std::string_view bytes) {
  if (bytes.size() < 12 || bytes.substr(0, 4) != "RIFF" || bytes.substr(8, 4) != "WAVE") return std::nullopt;
  std::string b(bytes);
  std::size_t at = 12;
  std::uint32_t block_align = 1;
  while (at + 8 <= b.size()) {
    const std::uint32_t size = le32(b, at + 4);
    if (b.compare(at, 4, "fmt ") == 0 && at + 8 + 14 <= b.size()) {
      block_align = std::max<std::uint32_t>(1, static_cast<unsigned char>(b[at + 20]) | static_cast<unsigned char>(b[at + 21]) << 8);
    }
    if (b.compare(at, 4, "data") == 0) {
      const std::size_t have = b.size() - (at + 8);
      if (size <= have) return std::nullopt;  // not truncated
      const auto whole = static_cast<std::uint32_t>(have / block_align * block_align);
      put32(b, at + 4, whole);
      b.resize(at + 8 + whole);
      put32(b, 4, static_cast<std::uint32_t>(b.size() - 8));
      return b;
    }
    at += 8 + static_cast<std::size_t>(size) + (size & 1);
  }
  return std::nullopt;
}

}  // namespace

std::variant<audio::PreparedAudio, ApiError> intake_audio(std::string_view bytes, const audio::PrepareOptions& base,
                                                          const AudioLimits& limits, const std::string& param) {
  if (bytes.empty()) return bad_request("empty_file", "The audio file is empty.", param);
  const std::string container = sniff_container(bytes);
  if (container.empty()) {
    std::string msg =
        "Invalid file format. Supported formats: flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm, aac, aiff, amr.";
    if (bytes.size() < 1024 && !text_utf8::first_invalid(bytes)) {
      msg += " The 'file' field must contain the audio bytes (with curl use -F file=@path).";
    }
    return bad_request("invalid_file_format", msg, param);
  }
  audio::PrepareOptions opt = base;
  // Decoding stops once the decoded audio passes the limit by a second (a tiny file may expand to
  // days of audio).
  opt.max_seconds = limits.max_seconds + 1.0;
  auto prepared = audio::prepare_audio(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), opt);
  if (!prepared.is_ok() && prepared.status().code() != StatusCode::kOutOfRange && container == "wav") {
    if (auto repaired = repair_truncated_wav(bytes)) {
      prepared = audio::prepare_audio(
          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(repaired->data()), repaired->size()),
          opt);
    }
  }
  if (!prepared.is_ok()) {
    if (prepared.status().code() == StatusCode::kOutOfRange) {
      return bad_request("audio_too_long",
                         "The audio is longer than the limit of " + std::to_string(static_cast<int>(limits.max_seconds)) +
                             " seconds.",
                         param);
    }
    return bad_request("invalid_audio", "The file has no decodable audio stream (" + container + ").", param);
  }
  const double seconds = static_cast<double>(prepared->samples) / opt.sample_rate;
  if (seconds < limits.min_seconds) {
    return bad_request("audio_too_short", "The audio is shorter than the minimum of " +
                                              std::to_string(limits.min_seconds).substr(0, 4) + " seconds.",
                       param);
  }
  if (seconds > limits.max_seconds) {
    return bad_request("audio_too_long",
                       "The audio is longer than the limit of " + std::to_string(static_cast<int>(limits.max_seconds)) +
                           " seconds.",
                       param);
  }
  return std::move(prepared).value();
}

}  // namespace vv::api
