// Word timestamps by interpolation (API.md §3.4, asr.word_timestamps = "interpolate"): the model
// gives none, so each segment's span is shared among its words by code-point count.
// Pure function; any thread.
#pragma once

#include <vector>

#include "engine/transcript/transcript.h"

namespace vv {

// Words of all segments in order. A segment is split on Unicode whitespace; one without whitespace
// made of CJK characters (and punctuation) is split per character. Word i starts at
// start + (end - start) * chars_before_i / total_chars and ends where the next word starts (the
// segment's last word at end); leading/trailing punctuation is stripped from the word and words left
// empty are dropped (their characters still count). Times are rounded to milliseconds.
std::vector<Word> interpolate_words(const std::vector<Segment>& segments);

}  // namespace vv
