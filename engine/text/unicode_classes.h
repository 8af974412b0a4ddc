// Character classes of the Qwen2 pre-tokenizer regex: \p{L} and \p{N} as of Unicode 16.0 (what the
// reference regex engine knows) and \s = the White_Space property. Static tables built once on
// first use (thread-safe static init); any thread.
#pragma once

namespace vv::unicode {

bool is_letter(char32_t cp);       // general category L*
bool is_number(char32_t cp);       // general category Nd, Nl, No
bool is_white_space(char32_t cp);  // White_Space (U+0085, U+00A0, U+3000 yes; U+200B, U+FEFF no)

}  // namespace vv::unicode
