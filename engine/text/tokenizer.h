// Tokenizer: Qwen2 byte-level BPE loaded from a Hugging Face tokenizer.json (vocab, merges, added
// tokens); encodes text to ids and ids to text exactly like HF `tokenizers` 0.23 does.
// Immutable after load, owned by the caller (one per model, shared); any thread may call any method.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/status.h"

namespace vv {

using TokenId = std::int32_t;

struct AddedToken {
  TokenId id = 0;
  std::string content;   // matched verbatim in text (no normalisation, no space stripping)
  bool special = false;  // dropped by decode(..., skip_special = true)
};

class Tokenizer {
 public:
  // Reads and parses a tokenizer.json file; errors name the file and the field at fault.
  static Result<std::unique_ptr<Tokenizer>> load_file(const std::string& path);
  // Parses tokenizer.json content; `origin` names it in error messages.
  static Result<std::unique_ptr<Tokenizer>> load_json(std::string_view json,
                                                      const std::string& origin = "tokenizer.json");
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text → ids: split out added tokens (when parse_special; off for user-supplied text, which then
  // gets ordinary bytes even for `<|im_end|>`), NFC (Unicode 9.0 data, as the reference), the Qwen2
  // pre-tokenizer regex, byte-level BPE. No BOS/EOS. Fails only on invalid UTF-8 (names the offset).
  Result<std::vector<TokenId>> encode(std::string_view utf8, bool parse_special = true) const;
  // Ids → text: token bytes concatenated, invalid UTF-8 replaced by U+FFFD per maximal invalid
  // subpart. skip_special drops the added tokens flagged special. Unknown ids are skipped (as HF).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The raw bytes one id stands for (an added token's content); empty for an unknown id.
  std::string_view token_bytes(TokenId id) const;
  bool is_known(TokenId id) const;
  bool is_special(TokenId id) const;  // an added token flagged "special"
  // An added token's id by its content, else a vocab token's id by its byte-level spelling.
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // 1 + the highest id (vocab and added tokens).
  TokenId id_count() const;
  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;  // defined in tokenizer_impl.h (engine/text internal)

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vv
