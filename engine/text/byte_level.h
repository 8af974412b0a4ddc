// The GPT-2 byte-level alphabet: each of the 256 byte values is spelled as one printable code point
// (printable Latin-1 bytes as themselves, the rest as U+0100 + n). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vv::byte_level {

// The code point that spells byte b.
char32_t char_of_byte(std::uint8_t b);
// The byte a code point spells, or nullopt when it is not in the alphabet.
std::optional<std::uint8_t> byte_of_char(char32_t cp);
// Converts a byte-level token spelling (valid UTF-8) to its raw bytes. Characters outside the
// alphabet are kept as their own UTF-8 (what HF's ByteLevel decoder does with them).
std::string to_bytes(std::string_view spelled);
// Spells raw bytes in the byte-level alphabet (UTF-8).
std::string to_spelling(std::string_view bytes);

}  // namespace vv::byte_level
