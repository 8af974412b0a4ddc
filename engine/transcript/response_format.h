// ResponseFormat: the response_format values of /v1/audio/transcriptions (API.md §3.1, §3.5), their
// content types, and one entry point that writes any of them. Pure functions; any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/transcript/transcript.h"
#include "engine/transcript/writer_options.h"

namespace vv {

enum class ResponseFormat { kJson, kText, kSrt, kVerboseJson, kVtt, kDiarizedJson };

// "json", "text", "srt", "verbose_json", "vtt", "diarized_json"; anything else → nullopt.
std::optional<ResponseFormat> parse_response_format(std::string_view name);
std::string_view response_format_name(ResponseFormat format);
// "application/json" for the JSON formats, "text/plain; charset=utf-8" for text/srt/vtt.
std::string_view content_type(ResponseFormat format);
// Formats whose streams carry transcript.text.segment events (API.md §4.3).
bool streams_segment_events(ResponseFormat format);

// The text body: text followed by exactly one "\n".
std::string write_text(const Transcript& t);
std::string write_response(const Transcript& t, ResponseFormat format, const WriterOptions& options = {});

}  // namespace vv
