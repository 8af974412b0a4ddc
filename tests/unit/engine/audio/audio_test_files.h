// Test-only helpers for the audio tests: read files, pull one float32 tensor out of a safetensors
// file and one field out of golden.json (both by plain text scanning: the tests link only the audio
// library), and write WAV files of any layout.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vv::audio_test {

// A WAV file under construction: fmt fields, optional extra chunks, then data.
struct WavSpec {
  std::uint16_t format_tag = 1;  // 1 PCM, 3 float, 0xFFFE extensible
  std::uint16_t sub_format = 1;  // for extensible: 1 PCM, 3 float
  std::uint16_t channels = 1;
  std::uint32_t sample_rate = 24000;
  std::uint16_t bits = 16;
  std::vector<std::pair<std::string, std::vector<std::uint8_t>>> chunks_before_data;  // e.g. LIST, fact
};

inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The F32 tensor `name` from a safetensors file; nullopt when absent.
inline std::optional<std::vector<float>> read_f32_tensor(const std::string& path, const std::string& name) {
  const std::vector<std::uint8_t> bytes = read_bytes(path);
  if (bytes.size() < 8) return std::nullopt;
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) return std::nullopt;
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  const std::size_t at = header.find("\"" + name + "\":");
  if (at == std::string::npos) return std::nullopt;
  const std::size_t close = header.find('}', at);
  const std::string entry = header.substr(at, close - at);
  if (entry.find("\"F32\"") == std::string::npos) return std::nullopt;
  const std::size_t offsets = entry.find("\"data_offsets\"");
  if (offsets == std::string::npos) return std::nullopt;
  const char* p = entry.c_str() + entry.find('[', offsets) + 1;
  char* endp = nullptr;
  const std::uint64_t begin = std::strtoull(p, &endp, 10);
  const std::uint64_t end = std::strtoull(endp + 1, nullptr, 10);
  const std::size_t base = 8 + header_len;
  if (end < begin || base + end > bytes.size()) return std::nullopt;
  std::vector<float> out((end - begin) / 4);
  std::memcpy(out.data(), bytes.data() + base + begin, out.size() * 4);
  return out;
}

// The raw text of `"key": value` (strings without quotes) after the first `"section"`; "" when absent.
inline std::string json_field(const std::string& json, const std::string& section, const std::string& key) {
  std::size_t from = 0;
  if (!section.empty()) {
    from = json.find("\"" + section + "\"");
    if (from == std::string::npos) return "";
  }
  std::size_t at = json.find("\"" + key + "\"", from);
  if (at == std::string::npos) return "";
  at = json.find(':', at) + 1;
  while (at < json.size() && json[at] == ' ') ++at;
  if (at < json.size() && json[at] == '"') {
    const std::size_t end = json.find('"', at + 1);
    return json.substr(at + 1, end - at - 1);
  }
  std::size_t end = at;
  while (end < json.size() && json[end] != ',' && json[end] != '}' && json[end] != ']') ++end;
  return json.substr(at, end - at);
}

inline void put16(std::vector<std::uint8_t>* b, std::uint32_t v) {
  b->push_back(static_cast<std::uint8_t>(v));
  b->push_back(static_cast<std::uint8_t>(v >> 8));
}
inline void put32(std::vector<std::uint8_t>* b, std::uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}
inline void put_chunk(std::vector<std::uint8_t>* b, const std::string& id, const std::vector<std::uint8_t>& body) {
  b->insert(b->end(), id.begin(), id.end());
  put32(b, static_cast<std::uint32_t>(body.size()));
  b->insert(b->end(), body.begin(), body.end());
  if (body.size() % 2 == 1) b->push_back(0);
}

// Little-endian RIFF/WAVE bytes around raw interleaved sample bytes; odd chunks get a pad byte.
inline std::vector<std::uint8_t> make_wav(const WavSpec& spec, const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> fmt;
  put16(&fmt, spec.format_tag);
  put16(&fmt, spec.channels);
  put32(&fmt, spec.sample_rate);
  const std::uint32_t block_align = spec.channels * (spec.bits / 8u);
  put32(&fmt, spec.sample_rate * block_align);
  put16(&fmt, block_align);
  put16(&fmt, spec.bits);
  if (spec.format_tag == 0xFFFE) {
    put16(&fmt, 22);
    put16(&fmt, spec.bits);  // valid bits
    put32(&fmt, spec.channels == 2 ? 3u : 4u);
    put16(&fmt, spec.sub_format);
    const std::uint8_t tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
    fmt.insert(fmt.end(), tail, tail + 14);
  }
  std::vector<std::uint8_t> body = {'W', 'A', 'V', 'E'};
  put_chunk(&body, "fmt ", fmt);
  for (const auto& [id, chunk] : spec.chunks_before_data) put_chunk(&body, id, chunk);
  put_chunk(&body, "data", data);
  std::vector<std::uint8_t> out = {'R', 'I', 'F', 'F'};
  put32(&out, static_cast<std::uint32_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Samples in [-1, 1) to the raw bytes of a PCM (8 unsigned, 16/24/32 signed) or float container.
inline std::vector<std::uint8_t> pcm_bytes(const std::vector<double>& samples, int bits, bool is_float) {
  std::vector<std::uint8_t> out;
  for (double s : samples) {
    if (is_float && bits == 32) {
      const float f = static_cast<float>(s);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      put32(&out, u);
    } else if (is_float) {
      std::uint64_t u;
      std::memcpy(&u, &s, 8);
      put32(&out, static_cast<std::uint32_t>(u));
      put32(&out, static_cast<std::uint32_t>(u >> 32));
    } else if (bits == 8) {
      out.push_back(static_cast<std::uint8_t>(std::lround(s * 128.0) + 128));
    } else {
      const double full = std::ldexp(1.0, bits - 1);
      const std::int64_t v = std::llround(s * full);
      for (int i = 0; i < bits / 8; ++i) out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
    }
  }
  return out;
}

inline int run_command(const std::string& command) { return std::system(command.c_str()); }

}  // namespace vv::audio_test
