// SRT and WebVTT bodies of a transcript (API.md §3.5). Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

#include "engine/transcript/transcript.h"
#include "engine/transcript/writer_options.h"

namespace vv {

// "HH:MM:SS,mmm" (srt) and "HH:MM:SS.mmm" (vtt), rounded to the millisecond; negative → 0.
std::string format_srt_timestamp(Seconds t);
std::string format_vtt_timestamp(Seconds t);

// Cues numbered from 1, "<n>\n<start> --> <end>\n[<label>] <text>\n\n"; newlines in text become
// spaces; an empty transcript is an empty body.
std::string write_srt(const Transcript& t, const WriterOptions& options = {});
// "WEBVTT\n\n" then "<start> --> <end>\n<v <label>><text>\n\n" per cue; text has "-->" made "->",
// then &, <, > escaped; newlines become spaces (a blank line would end the cue).
std::string write_vtt(const Transcript& t, const WriterOptions& options = {});

// Cue text for VTT: "-->" → "->", then & < > → &amp; &lt; &gt;, newlines → spaces.
std::string vtt_escape(std::string_view text);

}  // namespace vv
