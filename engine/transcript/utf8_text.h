// UTF-8 helpers for transcript text: decoding one code point, repairing invalid bytes, Unicode
// whitespace and the CJK ranges of API.md §3.4. Pure functions on caller-owned strings; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vv::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

struct Decoded {
  char32_t cp = kReplacement;  // kReplacement for an invalid sequence
  std::size_t length = 0;      // bytes consumed (>= 1), or 0 when the sequence is cut off at the end
  bool valid = false;
};

// Decodes the code point starting at s[pos]. An incomplete sequence at the end of s gives length 0;
// an invalid one gives one byte of kReplacement.
Decoded decode(std::string_view s, std::size_t pos);
void append(std::string& out, char32_t cp);
// Length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// multi-byte sequence.
std::size_t complete_prefix(std::string_view s);
// s with every invalid byte sequence replaced by U+FFFD.
std::string sanitize(std::string_view s);

bool is_space(char32_t cp);  // White_Space property
// U+3000–U+30FF, U+3400–U+4DBF, U+4E00–U+9FFF, U+F900–U+FAFF, U+FF00–U+FFEF.
bool is_cjk(char32_t cp);
// s without leading/trailing Unicode whitespace.
std::string_view trim(std::string_view s);
// First / last code point of s (0 if s is empty).
char32_t first_cp(std::string_view s);
char32_t last_cp(std::string_view s);
// Number of code points.
std::size_t length(std::string_view s);

}  // namespace vv::utf8
