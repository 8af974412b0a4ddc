// SamplingParams: how one request picks its next token and when it stops.
// A plain value owned by the request; copied freely; safe to read from any thread.
// Defaults reproduce the reference decoding (greedy, stop on <|endoftext|> or <|im_end|>).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "config/status.h"

namespace vv {

using TokenId = std::int32_t;

inline constexpr TokenId kEndOfTextId = 151643;  // <|endoftext|>
inline constexpr TokenId kImEndId = 151645;      // <|im_end|>

struct SamplingParams {
  float temperature = 0.0f;     // 0 = greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;           // nucleus mass kept, in (0, 1]
  std::int32_t top_k = 0;       // 0 or -1 = no top-k cut
  std::uint64_t seed = 0;       // per-request RNG seed; the same seed reproduces the same tokens
  std::int32_t max_new_tokens = 32768;
  bool ignore_eos = false;      // keep generating through stop ids (benchmarks)
  bool logprobs = false;        // report each token's logprob (include[]=logprobs, verbose_json)
  std::int32_t top_logprobs = 0;  // also report this many most likely alternatives (0–20)
  std::vector<TokenId> stop_ids{kEndOfTextId, kImEndId};

  // Chat extensions (API.md §6.1, vLLM/OpenAI semantics); the defaults change nothing.
  float min_p = 0.0f;               // drop tokens whose probability < min_p × the top probability
  float repetition_penalty = 1.0f;  // tokens seen in prompt or output: logit / p if > 0, else × p
  float presence_penalty = 0.0f;    // logit -= presence × [token generated before]
  float frequency_penalty = 0.0f;   // logit -= frequency × times generated before
  std::vector<std::pair<TokenId, float>> logit_bias;  // added to the logit of each id
};

// Checks ranges: temperature finite and >= 0, top_p in (0, 1], top_k >= -1, max_new_tokens >= 1,
// top_logprobs 0–20, min_p in [0, 1], repetition_penalty > 0, finite penalties and biases.
Status validate(const SamplingParams& params);

// Temperature used after a repetition loop was cut back (API.md §3.7): max(t + 0.3, 0.3), at most 1.
float recovery_temperature(float temperature);

}  // namespace vv
