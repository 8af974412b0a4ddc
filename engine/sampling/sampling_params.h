// SamplingParams: how one request picks its next token and when it stops.
// A plain value owned by the request; copied freely; safe to read from any thread.
// Defaults reproduce the reference decoding (greedy, stop on <|endoftext|> or <|im_end|>).
#pragma once

#include <cstdint>
#include <vector>

#include "config/status.h"

namespace vv {

using TokenId = std::int32_t;

inline constexpr TokenId kEndOfTextId = 151643;  // <|endoftext|>
inline constexpr TokenId kImEndId = 151645;      // <|im_end|>

struct SamplingParams {
  float temperature = 0.0f;     // 0 = greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;           // nucleus mass kept, in (0, 1]
  std::int32_t top_k = 0;       // 0 = no top-k cut
  std::uint64_t seed = 0;       // per-request RNG seed; the same seed reproduces the same tokens
  std::int32_t max_new_tokens = 32768;
  bool ignore_eos = false;      // keep generating through stop ids (benchmarks)
  bool logprobs = false;        // report each token's logprob (include[]=logprobs, verbose_json)
  std::vector<TokenId> stop_ids{kEndOfTextId, kImEndId};
};

// Checks ranges: temperature finite and >= 0, top_p in (0, 1], top_k >= 0, max_new_tokens >= 1.
Status validate(const SamplingParams& params);

// Temperature used after a repetition loop was cut back (API.md §3.7): max(t + 0.3, 0.3), at most 1.
float recovery_temperature(float temperature);

}  // namespace vv
