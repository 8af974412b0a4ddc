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
  const std::int64_t period_cap = config_.max_period;
  for (std::int64_t p = 1; p <= period_cap; ++p) {
    if (count_ >= p && ring_[static_cast<std::size_t>((count_ - p) % period_cap)] == id) {
      run_[static_cast<std::size_t>(p)] += run_[static_cast<std::size_t>(p)] < config_.window;
    } else {
      run_[static_cast<std::size_t>(p)] = 0;
    }
  }
  ring_[static_cast<std::size_t>(count_ % period_cap)] = id;
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
