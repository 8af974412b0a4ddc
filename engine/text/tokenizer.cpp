// Tokenizer encode/decode: added-token split → NFC → pre-tokenizer → byte-level BPE, and back.
#include "engine/text/tokenizer.h"

#include <cstring>

#include "engine/text/nfc.h"
#include "engine/text/pretokenizer.h"
#include "engine/text/tokenizer_impl.h"
#include "engine/text/utf8.h"

namespace vv {
namespace {

// NFC, pre-tokenize and BPE one stretch of text that holds no added token.
void encode_plain(const Tokenizer::Impl& t, std::string_view text, std::vector<TokenId>& out) {
  if (text.empty()) return;
  thread_local std::string normalized;
  thread_local std::vector<std::string_view> pieces;
  std::string_view src = text;
  if (!unicode::is_nfc_quick(text)) {
    normalized.clear();
    unicode::append_nfc(normalized, text);
    src = normalized;
  }
  pieces.clear();
  pretokenize(src, pieces);
  for (std::string_view p : pieces) t.bpe.encode_piece(p, out);
}

// The longest added token that starts at text[i], or nullptr.
const AddedToken* added_at(const Tokenizer::Impl& t, std::string_view text, std::size_t i) {
  for (std::size_t k : t.added_by_first_byte[static_cast<std::uint8_t>(text[i])]) {
    const std::string& c = t.added[k].content;
    if (text.size() - i >= c.size() && std::memcmp(text.data() + i, c.data(), c.size()) == 0) {
      return &t.added[k];
    }
  }
  return nullptr;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view utf8, bool parse_special) const {
  if (auto bad = text_utf8::first_invalid(utf8)) {
    return invalid_argument("text to encode: invalid UTF-8 at byte offset " + std::to_string(*bad));
  }
  std::vector<TokenId> out;
  out.reserve(utf8.size() / 3 + 4);
  const Impl& t = *impl_;
  if (!parse_special || t.added.empty()) {
    encode_plain(t, utf8, out);
    return out;
  }
  std::size_t start = 0;
  for (std::size_t i = 0; i < utf8.size();) {
    if (!t.any_added_first_byte[static_cast<std::uint8_t>(utf8[i])]) {
      ++i;
      continue;
    }
    const AddedToken* a = added_at(t, utf8, i);
    if (a == nullptr) {
      ++i;
      continue;
    }
    encode_plain(t, utf8.substr(start, i - start), out);
    out.push_back(a->id);
    i += a->content.size();
    start = i;
  }
  encode_plain(t, utf8.substr(start), out);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (!is_known(id)) continue;
    if (skip_special && impl_->special[static_cast<std::size_t>(id)]) continue;
    bytes.append(impl_->bytes_of[static_cast<std::size_t>(id)]);
  }
  std::string out;
  out.reserve(bytes.size());
  text_utf8::append_lossy(out, bytes);
  return out;
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (!is_known(id)) return {};
  return impl_->bytes_of[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_known(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->known.size() &&
         impl_->known[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(TokenId id) const {
  return is_known(id) && impl_->special[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

TokenId Tokenizer::id_count() const { return static_cast<TokenId>(impl_->known.size()); }

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace vv
