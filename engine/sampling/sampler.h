// Sampler: picks one request's next token from a float logits row (greedy, temperature, top-k,
// top-p, min-p, logit bias and penalties) with its own seeded RNG: a seed reproduces the tokens.
// One Sampler per request, owned by whoever owns the request's decode state; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/sampling/request_rng.h"
#include "engine/sampling/sampling_params.h"

namespace vv {

struct TokenLogprobEntry {
  TokenId id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  TokenId id = 0;
  float logprob = 0.0f;  // with params.logprobs: log-softmax of the raw logits (T = 1) at id; <= 0
  // With params.top_logprobs = n > 0: the n most likely tokens of the raw logits, most likely
  // first (ties by id), with their logprobs.
  std::vector<TokenLogprobEntry> top_logprobs;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token from logits[0..vocab). NaN logits count as -inf. logit_bias and the penalties
  // apply first (on a copy; the row is not modified); then temperature 0 (or top_k 1) is argmax
  // with ties to the lowest id and draws nothing from the RNG; otherwise temperature, min_p, top_k
  // and top_p shape the distribution that is drawn from. The picked token is recorded (observe()).
  SampledToken sample(std::span<const float> logits);

  // Records the prompt (for repetition_penalty) / a generated token picked elsewhere (for all
  // penalties), e.g. by a device-side argmax.
  void observe_prompt(std::span<const TokenId> prompt);
  void observe(TokenId id);

  // Used when a repetition loop is cut back (API.md §3.7); the RNG stream continues.
  void set_temperature(float temperature) { params_.temperature = temperature; }
  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float weight;  // exp((logit - max) / T), or the logit before weighting
    TokenId id;
  };
  bool adjusts_logits() const;
  std::span<const float> adjusted(std::span<const float> logits);
  TokenId pick_greedy(std::span<const float> logits) const;
  TokenId pick_random(std::span<const float> logits);
  TokenId draw(const std::vector<float>& weights);  // one draw, in id order, from weights
  TokenId draw_candidates(double total);            // one draw, in order, from candidates_
  // Keeps the smallest most-probable prefix of candidates_ whose mass reaches top_p (sorted).
  void cut_nucleus(double total);

  SamplingParams params_;
  RequestRng rng_;
  std::vector<Candidate> candidates_;  // scratch, reused across tokens
  std::vector<float> adjusted_;        // scratch: the logits row after bias and penalties
  std::vector<float> weights_;         // scratch: exp((logit - max) / T) per token
  std::vector<double> block_sums_;     // scratch: weight sums per block of 1024 tokens
  std::unordered_map<TokenId, std::int32_t> generated_counts_;
  std::unordered_set<TokenId> prompt_ids_;
};

// The n most likely tokens of a logits row with their log-softmax, most likely first, ties by id.
std::vector<TokenLogprobEntry> top_logprobs(std::span<const float> logits, std::size_t n);

// log-softmax of logits at id (NaN counts as -inf).
float token_logprob(std::span<const float> logits, TokenId id);

}  // namespace vv
