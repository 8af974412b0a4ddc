// SegmentRepetitionDetector: segment-level loop detector, API.md §3.7 rule (a): 4 consecutive
// segments whose normalised Content (case-folded, whitespace collapsed, punctuation removed) is
// identical and at least 8 characters long. One per request; not thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vv {

// Case-folded, punctuation removed, whitespace runs collapsed to one space, trimmed.
std::string normalise_for_repetition(std::string_view text);

class SegmentRepetitionDetector {
 public:
  explicit SegmentRepetitionDetector(std::size_t run = 4, std::size_t min_chars = 8);

  // Records the next completed segment's text (segment index = how many were added before).
  // Returns the index of the first segment of the repeated run when this segment completes one;
  // the output is then cut back to the end of that first segment.
  std::optional<std::size_t> add(std::string_view text);
  void reset();

 private:
  std::size_t run_;
  std::size_t min_chars_;
  std::size_t count_ = 0;
  std::string last_;
  std::size_t last_run_ = 0;
};

}  // namespace vv
