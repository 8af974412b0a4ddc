// Sampler: picks one request's next token from a float logits row (greedy, temperature, top-k,
// top-p) with the request's own seeded RNG, so a seed reproduces the same tokens.
// One Sampler per request, owned by whoever owns the request's decode state; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling/request_rng.h"
#include "engine/sampling/sampling_params.h"

namespace vv {

struct SampledToken {
  TokenId id = 0;
  float logprob = 0.0f;  // with params.logprobs: log-softmax of the raw logits (T = 1) at id; <= 0
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token from logits[0..vocab). NaN logits count as -inf. temperature 0 (or top_k 1) is
  // argmax with ties to the lowest id and draws nothing from the RNG.
  SampledToken sample(std::span<const float> logits);

  // Used when a repetition loop is cut back (API.md §3.7); the RNG stream continues.
  void set_temperature(float temperature) { params_.temperature = temperature; }
  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float weight;  // exp((logit - max) / T), or the logit before weighting
    TokenId id;
  };
  TokenId pick_greedy(std::span<const float> logits) const;
  TokenId pick_random(std::span<const float> logits);
  // Keeps the smallest most-probable prefix of candidates_ whose mass reaches top_p (sorted).
  void cut_nucleus(double total);

  SamplingParams params_;
  RequestRng rng_;
  std::vector<Candidate> candidates_;  // scratch, reused across tokens
};

// log-softmax of logits at id (NaN counts as -inf).
float token_logprob(std::span<const float> logits, TokenId id);

}  // namespace vv
