// Tokenizer::Impl: the loaded tables shared by tokenizer.cpp (encode/decode) and
// tokenizer_json.cpp (loading). Internal to engine/text; immutable after load.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/text/bpe_model.h"
#include "engine/text/tokenizer.h"

namespace vv {

// Hash for heterogeneous (string_view) lookup in string-keyed maps.
struct TextHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, TokenId, TextHash, std::equal_to<>>;

struct Tokenizer::Impl {
  BpeModel bpe;
  TextMap vocab;  // byte-level spelling → id
  std::vector<std::string> bytes_of;                // id → raw bytes
  std::vector<std::uint8_t> known, special;         // per id
  std::vector<AddedToken> added;                    // in file order
  TextMap added_by_content;
  // Added tokens grouped by first byte, longest first (leftmost-longest matching).
  std::vector<std::vector<std::size_t>> added_by_first_byte = std::vector<std::vector<std::size_t>>(256);
  bool any_added_first_byte[256] = {};
};

}  // namespace vv
