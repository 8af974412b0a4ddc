#include "service/cli/progress_bar.h"

#include <cstdio>
#include <string>

namespace vv::cli {

void ProgressBar::update(const TranscriptionProgress& p) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool boundary = p.done == 0 || p.done == p.total || p.phase == TranscriptionProgress::Phase::kDone;
  if (!boundary && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const char* phase = "";
  switch (p.phase) {
    case TranscriptionProgress::Phase::kEncoding: phase = "encoding"; break;
    case TranscriptionProgress::Phase::kPrefill: phase = "prefill "; break;
    case TranscriptionProgress::Phase::kDecoding: phase = "decoding"; break;
    case TranscriptionProgress::Phase::kDone: phase = "done    "; break;
  }
  const int width = 30;
  const double frac = p.total > 0 ? std::min(1.0, static_cast<double>(p.done) / static_cast<double>(p.total)) : 0;
  std::string bar(static_cast<size_t>(frac * width), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r[%zu/%zu] %s [%s] %lld/%lld", p.request + 1, requests_, phase, bar.c_str(),
               static_cast<long long>(p.done), static_cast<long long>(p.total));
  if (p.tokens_per_second > 0) std::fprintf(stderr, "  %.1f tok/s", p.tokens_per_second);
  std::fprintf(stderr, "\033[K");
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace vv::cli
