// WAV reader: walks the RIFF chunks, validates fmt against data, converts to float32 as libsndfile
// does and averages the channels in float32 as numpy's mean does (sequential sum, then divide).
#include "engine/audio/wav_reader.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace vv::audio {
namespace {

constexpr std::uint16_t kFormatPcm = 0x0001;
constexpr std::uint16_t kFormatFloat = 0x0003;
constexpr std::uint16_t kFormatExtensible = 0xFFFE;
// The 14 bytes that follow the format tag in a KSDATAFORMAT_SUBTYPE_* GUID.
constexpr std::uint8_t kGuidTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                        0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
// Streaming writers leave the data size at this value when they cannot seek back.
constexpr std::uint32_t kUnknownSize = 0xFFFFFFFFu;

std::uint16_t u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

// A chunk id for messages: printable ASCII kept, anything else as \xNN.
std::string chunk_name(const std::uint8_t* id) {
  std::string s = "'";
  for (int i = 0; i < 4; ++i) {
    if (id[i] >= 0x20 && id[i] < 0x7F) {
      s += static_cast<char>(id[i]);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", id[i]);
      s += buf;
    }
  }
  return s + "'";
}

enum class SampleKind { kPcm, kFloat };

struct WavFormat {
  SampleKind kind = SampleKind::kPcm;
  int channels = 0;
  int sample_rate = 0;
  int bits = 0;         // container bits per sample
  int block_align = 0;  // bytes per frame
};

Status parse_fmt(const std::uint8_t* p, std::uint32_t size, std::size_t offset, WavFormat* fmt) {
  const std::string where = "WAV 'fmt ' chunk at byte " + std::to_string(offset);
  if (size < 16) return invalid_argument(where + ": " + std::to_string(size) + " bytes, needs at least 16");
  std::uint16_t tag = u16(p);
  const int channels = u16(p + 2);
  const std::uint32_t rate = u32(p + 4);
  const int block_align = u16(p + 12);
  const int bits = u16(p + 14);
  if (tag == kFormatExtensible) {
    if (size < 40) {
      return invalid_argument(where + ": WAVE_FORMAT_EXTENSIBLE needs 40 bytes, has " + std::to_string(size));
    }
    if (std::memcmp(p + 26, kGuidTail, sizeof kGuidTail) != 0) {
      return unsupported(where + ": WAVE_FORMAT_EXTENSIBLE sub-format GUID (byte " +
                         std::to_string(offset + 24) + ") is not a KSDATAFORMAT_SUBTYPE_* GUID");
    }
    tag = u16(p + 24);
  }
  if (tag == kFormatPcm) {
    fmt->kind = SampleKind::kPcm;
    if (bits != 8 && bits != 16 && bits != 24 && bits != 32) {
      return unsupported(where + ": PCM with " + std::to_string(bits) +
                         " bits per sample (8/16/24/32 supported)");
    }
  } else if (tag == kFormatFloat) {
    fmt->kind = SampleKind::kFloat;
    if (bits != 32 && bits != 64) {
      return unsupported(where + ": IEEE float with " + std::to_string(bits) +
                         " bits per sample (32/64 supported)");
    }
  } else {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%04X", tag);
    return unsupported(where + ": format tag " + buf + " (only PCM, IEEE float and EXTENSIBLE are read)");
  }
  if (channels == 0) return invalid_argument(where + ": channel count is 0");
  if (rate == 0 || rate > 0x7FFFFFFFu) {
    return invalid_argument(where + ": sample rate " + std::to_string(rate) + " is out of range");
  }
  if (block_align != channels * (bits / 8)) {
    return invalid_argument(where + ": block_align " + std::to_string(block_align) + " != channels " +
                            std::to_string(channels) + " x " + std::to_string(bits / 8) + " bytes");
  }
  fmt->channels = channels;
  fmt->sample_rate = static_cast<int>(rate);
  fmt->bits = bits;
  fmt->block_align = block_align;
  return Status::ok();
}

// One sample to float32 exactly as libsndfile's sf_readf_float does with normalisation on.
float sample_to_float(const std::uint8_t* p, const WavFormat& fmt) {
  if (fmt.kind == SampleKind::kFloat) {
    if (fmt.bits == 32) {
      float f;
      std::memcpy(&f, p, 4);  // little-endian host assumed (x86-64, aarch64)
      return f;
    }
    double d;
    std::memcpy(&d, p, 8);
    return static_cast<float>(d);
  }
  switch (fmt.bits) {
    case 8:
      return static_cast<float>(static_cast<int>(p[0]) - 128) * (1.0f / 128.0f);
    case 16:
      return static_cast<float>(static_cast<std::int16_t>(u16(p))) * (1.0f / 32768.0f);
    case 24: {
      const std::uint32_t raw = static_cast<std::uint32_t>(p[0]) << 8 |
                                static_cast<std::uint32_t>(p[1]) << 16 |
                                static_cast<std::uint32_t>(p[2]) << 24;
      return static_cast<float>(static_cast<std::int32_t>(raw)) * (1.0f / 2147483648.0f);
    }
    default:
      return static_cast<float>(static_cast<std::int32_t>(u32(p))) * (1.0f / 2147483648.0f);
  }
}

// Frames to mono float32 (channels averaged in channel order). The per-format choice is made once,
// outside the loop, so the common case (PCM16) is a tight loop; each sample's value is exactly
// sample_to_float's.
template <typename ToFloat>
void decode_frames_as(const std::uint8_t* data, std::size_t frames, const WavFormat& fmt, float* out,
                      ToFloat to_float) {
  const std::size_t stride = static_cast<std::size_t>(fmt.block_align);
  const std::size_t bytes = static_cast<std::size_t>(fmt.bits / 8);
  if (fmt.channels == 1) {
    for (std::size_t i = 0; i < frames; ++i) out[i] = to_float(data + i * stride);
    return;
  }
  const float divisor = static_cast<float>(fmt.channels);
  for (std::size_t i = 0; i < frames; ++i) {
    const std::uint8_t* frame = data + i * stride;
    float sum = to_float(frame);
    for (int c = 1; c < fmt.channels; ++c) sum += to_float(frame + static_cast<std::size_t>(c) * bytes);
    out[i] = sum / divisor;
  }
}

void decode_frames(const std::uint8_t* data, std::size_t frames, const WavFormat& fmt,
                   std::vector<float>* out) {
  out->resize(frames);
  float* o = out->data();
  if (fmt.kind == SampleKind::kPcm && fmt.bits == 16) {
    decode_frames_as(data, frames, fmt, o, [](const std::uint8_t* p) {
      return static_cast<float>(static_cast<std::int16_t>(u16(p))) * (1.0f / 32768.0f);
    });
  } else {
    decode_frames_as(data, frames, fmt, o, [&fmt](const std::uint8_t* p) { return sample_to_float(p, fmt); });
  }
}

}  // namespace

bool looks_like_wav(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 &&
         std::memcmp(bytes.data() + 8, "WAVE", 4) == 0;
}

Result<DecodedAudio> read_wav(std::span<const std::uint8_t> bytes, double max_seconds) {
  if (bytes.size() < 12) {
    return invalid_argument("WAV: file is " + std::to_string(bytes.size()) +
                            " bytes, shorter than the 12-byte RIFF header");
  }
  if (!looks_like_wav(bytes)) return invalid_argument("WAV: bytes 0-11 are not a RIFF/WAVE header");
  const std::uint8_t* base = bytes.data();
  const std::size_t end = bytes.size();

  WavFormat fmt;
  bool have_fmt = false;
  const std::uint8_t* data = nullptr;
  std::size_t data_offset = 0;
  std::size_t data_size = 0;
  std::size_t offset = 12;
  while (!(have_fmt && data != nullptr)) {
    if (offset >= end) break;
    if (end - offset < 8) {
      return invalid_argument("WAV: truncated chunk header at byte " + std::to_string(offset) + " (" +
                              std::to_string(end - offset) + " of 8 bytes)");
    }
    const std::uint8_t* id = base + offset;
    const std::uint32_t size = u32(base + offset + 4);
    const std::size_t body = offset + 8;
    const std::size_t available = end - body;
    // Only the first data chunk counts; a later one is skipped like any unknown chunk.
    const bool is_data = data == nullptr && std::memcmp(id, "data", 4) == 0;
    if (is_data) {
      if (size == kUnknownSize) {
        data_size = available;  // written by a streaming encoder: the rest of the file
      } else if (size > available) {
        return invalid_argument("WAV: 'data' chunk at byte " + std::to_string(offset) + " declares " +
                                std::to_string(size) + " bytes but only " + std::to_string(available) +
                                " remain (truncated file)");
      } else {
        data_size = size;
      }
      data = base + body;
      data_offset = offset;
    } else {
      if (size > available) {
        return invalid_argument("WAV: " + chunk_name(id) + " chunk at byte " + std::to_string(offset) +
                                " declares " + std::to_string(size) + " bytes but only " +
                                std::to_string(available) + " remain (truncated file)");
      }
      if (std::memcmp(id, "fmt ", 4) == 0) {
        if (have_fmt) return invalid_argument("WAV: second 'fmt ' chunk at byte " + std::to_string(offset));
        VV_RETURN_IF_ERROR(parse_fmt(base + body, size, offset, &fmt));
        have_fmt = true;
      }
    }
    // Chunks are word-aligned: an odd-sized chunk is followed by one pad byte.
    const std::size_t body_size = is_data ? data_size : static_cast<std::size_t>(size);
    const std::size_t advance = 8 + body_size + (body_size & 1u);
    if (advance > end - offset) break;
    offset += advance;
  }
  if (!have_fmt)
    return invalid_argument("WAV: no 'fmt ' chunk before the end of the file (byte " + std::to_string(end) +
                            ")");
  if (data == nullptr)
    return invalid_argument("WAV: no 'data' chunk before the end of the file (byte " + std::to_string(end) +
                            ")");

  // A trailing partial frame is dropped, as libsndfile does.
  const std::size_t frames = data_size / static_cast<std::size_t>(fmt.block_align);
  if (max_seconds > 0.0 && static_cast<double>(frames) > max_seconds * fmt.sample_rate) {
    return out_of_range("WAV: 'data' chunk at byte " + std::to_string(data_offset) + " holds " +
                        std::to_string(static_cast<double>(frames) / fmt.sample_rate) +
                        " s of audio, over the " + std::to_string(max_seconds) + " s limit");
  }
  DecodedAudio out;
  out.sample_rate = fmt.sample_rate;
  out.channels = fmt.channels;
  decode_frames(data, frames, fmt, &out.samples);
  return out;
}

}  // namespace vv::audio
