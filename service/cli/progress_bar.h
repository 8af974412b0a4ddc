// ProgressBar: one self-overwriting status line on stderr for long CLI jobs (encoding, prefill,
// decoding with tok/s). Disabled instances print nothing. Main thread only.
#pragma once

#include <chrono>
#include <cstddef>

#include "scheduler/batch_transcriber.h"

namespace vv::cli {

class ProgressBar {
 public:
  ProgressBar(bool enabled, size_t requests) : enabled_(enabled), requests_(requests) {}
  void update(const TranscriptionProgress& p);
  void finish();  // ends the line

 private:
  bool enabled_;
  size_t requests_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace vv::cli
