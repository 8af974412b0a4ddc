// UTF-8 helpers for the tokenizer: strict decoding of valid text, lossy decoding (U+FFFD per
// maximal invalid subpart, like Rust from_utf8_lossy) and the "unfinished but completable" test
// the incremental decoder uses. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vv::text_utf8 {

// Appends cp (must be a Unicode scalar value) as UTF-8.
void append(std::string& out, char32_t cp);
// Decodes one scalar value at s[i] of valid UTF-8 and advances i (on invalid input it still
// advances, returning U+FFFD, so a caller can never loop forever).
char32_t next(std::string_view s, std::size_t& i);
// The byte offset of the first invalid UTF-8 sequence, or nullopt when s is valid.
std::optional<std::size_t> first_invalid(std::string_view s);
// Appends bytes as text, each maximal invalid subpart replaced by U+FFFD.
void append_lossy(std::string& out, std::string_view bytes);
// Length of the trailing bytes of s that form an unfinished but still valid UTF-8 prefix
// (a lead C2–F4 with fewer continuation bytes than it needs, respecting the E0/ED/F0/F4
// second-byte limits); 0 when s ends on a complete or invalid sequence.
std::size_t incomplete_tail(std::string_view s);

}  // namespace vv::text_utf8
