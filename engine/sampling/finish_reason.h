// FinishReason: why a request's generation ended (API.md §3.7).
// A plain enum; header-only so the transcript writers can name it without linking the sampler.
#pragma once

#include <string_view>

namespace vv {

enum class FinishReason {
  kNone,        // still generating
  kStop,        // a stop id was generated
  kLength,      // max_new_tokens or the context limit was reached
  kRepetition,  // a decoding loop was detected and not recovered
};

// "stop", "length", "repetition"; "" for kNone.
constexpr std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kRepetition: return "repetition";
    case FinishReason::kNone: break;
  }
  return "";
}

}  // namespace vv
