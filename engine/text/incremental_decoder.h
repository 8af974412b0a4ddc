// IncrementalDecoder: turns a stream of token ids into text deltas that always end on a whole
// UTF-8 character (an unfinished but still valid UTF-8 prefix is held back; bytes that can never
// become valid are emitted at once as U+FFFD). Joining every push() and the flush() equals
// Tokenizer::decode of all ids. One per stream; borrows the Tokenizer (must outlive it); not
// thread-safe (one thread at a time).
#pragma once

#include <string>

#include "engine/text/tokenizer.h"

namespace vv {

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Consumes one id; returns the text that became final (possibly empty).
  std::string push(TokenId id);
  // End of stream: whatever is held back, decoded with U+FFFD for the unfinished sequence.
  std::string flush();
  // Bytes currently held back (0..3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace vv
