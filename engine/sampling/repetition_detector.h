// RepetitionDetector: token-level decoding-loop detector, API.md §3.7 rule (b): the last `window`
// generated tokens are periodic with some period p in 1..max_period (tok[i] == tok[i-p] over the
// whole window), evaluated every `check_every` generated tokens (and on demand after a segment).
// Incremental: O(max_period) compares and no allocation per token. One per request; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/sampling/sampling_params.h"

namespace vv {

struct RepetitionConfig {
  std::int32_t window = 256;      // tokens that must be periodic
  std::int32_t max_period = 64;   // longest period looked for
  std::int32_t check_every = 64;  // append() evaluates when generated() is a multiple of this
};

struct RepetitionLoop {
  std::int32_t period = 0;        // smallest period found
  std::int64_t window_start = 0;  // index (0-based, in generated tokens) of the window's first token
};

class RepetitionDetector {
 public:
  explicit RepetitionDetector(RepetitionConfig config = {});

  // Records one generated token; returns the loop when this token is a check point and the window
  // is periodic.
  std::optional<RepetitionLoop> append(TokenId id);
  // Evaluates now, whatever the cadence (after a completed segment).
  std::optional<RepetitionLoop> check() const;
  // Forgets everything (after cutting back, re-append the kept tokens).
  void reset();

  std::int64_t generated() const { return count_; }
  const RepetitionConfig& config() const { return config_; }

 private:
  RepetitionConfig config_;
  std::vector<TokenId> ring_;       // the last max_period tokens
  std::vector<std::int32_t> run_;   // run_[p]: consecutive latest i with tok[i] == tok[i-p]
  std::int64_t count_ = 0;
};

}  // namespace vv
