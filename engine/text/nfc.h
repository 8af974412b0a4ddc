// Unicode NFC with Unicode 9.0 data, the normaliser the reference tokenizer (HF tokenizers 0.23.3)
// runs: characters assigned after 9.0 have combining class 0 and never decompose or compose.
// Pure functions over static tables built once (thread-safe static init); any thread.
#pragma once

#include <string>
#include <string_view>

namespace vv::unicode {

// True when `utf8` (valid UTF-8) is certainly already NFC (no character that can change).
bool is_nfc_quick(std::string_view utf8);
// Appends NFC(utf8) to out; utf8 must be valid UTF-8.
void append_nfc(std::string& out, std::string_view utf8);

}  // namespace vv::unicode
