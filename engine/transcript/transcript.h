// Transcript: the finished (or in-progress) result of one request, as every response writer and
// stream event reads it (API.md §3.4–§3.7). Plain values owned by the request; copy to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling/finish_reason.h"
#include "engine/sampling/sampling_params.h"

namespace vv {

using Seconds = double;

struct Segment {
  Seconds start = 0.0;  // clamped to [0, duration]
  Seconds end = 0.0;    // clamped to [start, duration]
  std::string speaker;  // "A", "B", … "Z", "AA", … in order of first appearance
  std::string text;     // trimmed Content, valid UTF-8, never empty
  // verbose_json extras, filled by whoever attributes tokens (API.md §3.4 "tokens that carry text").
  std::vector<TokenId> tokens;
  double avg_logprob = 0.0;        // mean logprob of tokens; 0.0 if none
  double compression_ratio = 0.0;  // UTF-8 bytes / zlib(level 6) bytes of text
  float temperature = 0.0f;        // temperature in force when the segment was decoded
};

// One include[]=logprobs entry: token text (U+FFFD for bytes that are not valid UTF-8 on their
// own), logprob <= 0, and the token's raw bytes.
struct TokenLogprob {
  std::string token;
  double logprob = 0.0;
  std::string bytes;
};

struct Word {
  std::string word;
  Seconds start = 0.0;
  Seconds end = 0.0;
};

struct Transcript {
  std::vector<Segment> segments;
  std::string text;                     // segments joined (API.md §3.4), no outer whitespace
  Seconds duration = 0.0;               // decoded audio duration
  std::optional<std::string> language;  // from the request; verbose_json says "unknown" without
  FinishReason finish_reason = FinishReason::kStop;
  std::vector<TokenLogprob> logprobs;   // only with include[]=logprobs
  bool parse_failed = false;            // the fallback segment was used
  bool truncated = false;               // the model's array was cut off
};

}  // namespace vv
