// The Qwen2 pre-tokenizer: splits NFC text into pieces exactly like the regex
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// implemented by hand (leftmost alternative wins, greedy with the regex's backtracking).
// Pure function; any thread.
#pragma once

#include <string_view>
#include <vector>

namespace vv {

// Appends the pieces of `text` (valid UTF-8) to `pieces`; they cover the text in order.
void pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace vv
