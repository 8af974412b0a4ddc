// Tokenizer::Impl: the loaded tables shared by tokenizer.cpp (encode/decode) and
// tokenizer_json.cpp (loading). Internal to engine/text; immutable after load.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "engine/text/bpe_model.h"
#include "engine/text/tokenizer.h"

namespace vv {

struct Tokenizer::Impl {
  BpeModel bpe;
  std::unordered_map<std::string, TokenId> vocab;  // byte-level spelling → id
  std::vector<std::string> bytes_of;                // id → raw bytes
  std::vector<std::uint8_t> known, special;         // per id
  std::vector<AddedToken> added;                    // in file order
  std::unordered_map<std::string, TokenId> added_by_content;
  // Added tokens grouped by first byte, longest first (leftmost-longest matching).
  std::vector<std::vector<std::size_t>> added_by_first_byte = std::vector<std::vector<std::size_t>>(256);
  bool any_added_first_byte[256] = {};
};

}  // namespace vv
