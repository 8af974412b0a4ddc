#include "engine/sampling/repetition_detector.h"

#include <algorithm>

namespace vv {

RepetitionDetector::RepetitionDetector(RepetitionConfig config) : config_(config) {
  config_.max_period = std::max(1, config_.max_period);
  config_.window = std::max(config_.window, config_.max_period + 1);
  config_.check_every = std::max(1, config_.check_every);
  reset();
}

void RepetitionDetector::reset() {
  ring_.assign(static_cast<std::size_t>(config_.max_period), 0);
  run_.assign(static_cast<std::size_t>(config_.max_period) + 1, 0);
  count_ = 0;
}

std::optional<RepetitionLoop> RepetitionDetector::append(TokenId id) {
  const std::size_t cap = ring_.size();
  const std::size_t head = static_cast<std::size_t>(count_ % static_cast<std::int64_t>(cap));
  const std::int32_t window = config_.window;
  for (std::size_t p = 1; p <= cap; ++p) {
    const std::size_t at = head >= p ? head - p : head + cap - p;  // the token p steps back
    std::int32_t& run = run_[p];
    if (count_ >= static_cast<std::int64_t>(p) && ring_[at] == id) {
      run += run < window;
    } else {
      run = 0;
    }
  }
  ring_[head] = id;
  ++count_;
  if (count_ % config_.check_every != 0) return std::nullopt;
  return check();
}

std::optional<RepetitionLoop> RepetitionDetector::check() const {
  if (count_ < config_.window) return std::nullopt;
  for (std::int32_t p = 1; p <= config_.max_period; ++p) {
    // Periodic over the window: every i in the window whose i-p is also in it matches.
    if (run_[static_cast<std::size_t>(p)] >= config_.window - p) {
      return RepetitionLoop{p, count_ - config_.window};
    }
  }
  return std::nullopt;
}

}  // namespace vv
