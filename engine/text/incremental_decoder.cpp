#include "engine/text/incremental_decoder.h"

#include "engine/text/utf8.h"

namespace vv {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(TokenId id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_.append(tokenizer_->token_bytes(id));
  std::size_t hold = text_utf8::incomplete_tail(pending_);
  std::string out;
  text_utf8::append_lossy(out, std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  text_utf8::append_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace vv
