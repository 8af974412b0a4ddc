#include "engine/sampling/stop_condition.h"

#include <algorithm>

namespace vv {

StopCondition::StopCondition(const SamplingParams& params)
    : stop_ids_(params.stop_ids), max_new_tokens_(params.max_new_tokens), ignore_eos_(params.ignore_eos) {}

bool StopCondition::is_stop_id(TokenId id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

FinishReason StopCondition::append(TokenId id) {
  ++generated_;
  if (!ignore_eos_ && is_stop_id(id)) return FinishReason::kStop;
  if (generated_ >= max_new_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace vv
