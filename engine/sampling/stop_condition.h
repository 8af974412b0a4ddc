// StopCondition: decides after each generated token whether a request is finished (stop id,
// max_new_tokens). One per request, owned by its decode state; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sampling/finish_reason.h"
#include "engine/sampling/sampling_params.h"

namespace vv {

class StopCondition {
 public:
  explicit StopCondition(const SamplingParams& params);

  // Records one generated token. kStop when it is a stop id (unless ignore_eos), else kLength when
  // it is the max_new_tokens-th token, else kNone. A stop id wins over length on the same token.
  FinishReason append(TokenId id);

  // True for a stop id (such tokens never reach any output, even with ignore_eos).
  bool is_stop_id(TokenId id) const;
  std::int32_t generated() const { return generated_; }

 private:
  std::vector<TokenId> stop_ids_;
  std::int32_t max_new_tokens_;
  bool ignore_eos_;
  std::int32_t generated_ = 0;
};

}  // namespace vv
