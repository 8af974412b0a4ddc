#include "engine/text/byte_level.h"

#include <array>

#include "engine/text/utf8.h"

namespace vv::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::int16_t, 0x144> to_byte{};  // every alphabet code point is below U+0144
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<std::int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of_byte(std::uint8_t b) { return tables().to_char[b]; }

std::optional<std::uint8_t> byte_of_char(char32_t cp) {
  if (cp >= tables().to_byte.size() || tables().to_byte[cp] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().to_byte[cp]);
}

std::string to_bytes(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (std::size_t i = 0; i < spelled.size();) {
    std::size_t start = i;
    char32_t cp = text_utf8::next(spelled, i);
    if (auto b = byte_of_char(cp)) {
      out.push_back(static_cast<char>(*b));
    } else {
      out.append(spelled.substr(start, i - start));
    }
  }
  return out;
}

std::string to_spelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) text_utf8::append(out, char_of_byte(static_cast<std::uint8_t>(c)));
  return out;
}

}  // namespace vv::byte_level
