// JSON bodies of a transcript: json, verbose_json and diarized_json (API.md §3.5, §3.6), laid out
// exactly as the spec's examples (", " and ": " separators; verbose/diarized one member per line,
// one segment per line). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "engine/transcript/transcript.h"
#include "engine/transcript/writer_options.h"

namespace vv {

// usage.seconds: ⌈duration⌉ as an integer, at least 1.
std::int64_t usage_seconds(Seconds duration);

// {"text": …, "usage": {"type": "duration", "seconds": N}} (+ "logprobs" with include_logprobs).
std::string write_json(const Transcript& t, const WriterOptions& options = {});
// task, language ("unknown" when none), duration, text, segments (unless segment_granularity is
// off), words (with word_granularity), usage, finish_reason.
std::string write_verbose_json(const Transcript& t, const WriterOptions& options = {});
// task, duration, text, segments (type, id "seg_<n>", start, end, speaker, text), usage,
// finish_reason.
std::string write_diarized_json(const Transcript& t);

}  // namespace vv
