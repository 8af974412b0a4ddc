#include "engine/transcript/segment_repetition.h"

#include <utf8proc.h>

#include "engine/transcript/utf8_text.h"

namespace vv {

std::string normalise_for_repetition(std::string_view text) {
  std::string out;
  bool space = false;
  for (std::size_t i = 0; i < text.size();) {
    utf8::Decoded d = utf8::decode(text, i);
    if (d.length == 0) d.length = text.size() - i;
    i += d.length;
    if (utf8::is_space(d.cp)) {
      space = !out.empty();
      continue;
    }
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(d.cp));
    if (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) continue;
    if (space) out.push_back(' ');
    space = false;
    utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(d.cp))));
  }
  return out;
}

SegmentRepetitionDetector::SegmentRepetitionDetector(std::size_t run, std::size_t min_chars)
    : run_(run < 2 ? 2 : run), min_chars_(min_chars) {}

void SegmentRepetitionDetector::reset() {
  count_ = 0;
  last_.clear();
  last_run_ = 0;
}

std::optional<std::size_t> SegmentRepetitionDetector::add(std::string_view text) {
  std::string norm = normalise_for_repetition(text);
  const std::size_t index = count_++;
  if (!norm.empty() && norm == last_) {
    ++last_run_;
  } else {
    last_ = std::move(norm);
    last_run_ = 1;
  }
  if (last_run_ >= run_ && utf8::length(last_) >= min_chars_) return index + 1 - last_run_;
  return std::nullopt;
}

}  // namespace vv
