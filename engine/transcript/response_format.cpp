#include "engine/transcript/response_format.h"

#include "engine/transcript/json_responses.h"
#include "engine/transcript/subtitle_writers.h"

namespace vv {
namespace {

struct FormatName {
  ResponseFormat format;
  std::string_view name;
};
constexpr FormatName kFormats[] = {
    {ResponseFormat::kJson, "json"},       {ResponseFormat::kText, "text"},
    {ResponseFormat::kSrt, "srt"},         {ResponseFormat::kVerboseJson, "verbose_json"},
    {ResponseFormat::kVtt, "vtt"},         {ResponseFormat::kDiarizedJson, "diarized_json"},
};

}  // namespace

std::optional<ResponseFormat> parse_response_format(std::string_view name) {
  for (const auto& f : kFormats) {
    if (f.name == name) return f.format;
  }
  return std::nullopt;
}

std::string_view response_format_name(ResponseFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "json";
}

std::string_view content_type(ResponseFormat format) {
  switch (format) {
    case ResponseFormat::kText:
    case ResponseFormat::kSrt:
    case ResponseFormat::kVtt: return "text/plain; charset=utf-8";
    default: return "application/json";
  }
}

bool streams_segment_events(ResponseFormat format) {
  return format == ResponseFormat::kDiarizedJson || format == ResponseFormat::kVerboseJson ||
         format == ResponseFormat::kSrt || format == ResponseFormat::kVtt;
}

std::string write_text(const Transcript& t) { return t.text + "\n"; }

std::string write_response(const Transcript& t, ResponseFormat format, const WriterOptions& options) {
  switch (format) {
    case ResponseFormat::kJson: return write_json(t, options);
    case ResponseFormat::kText: return write_text(t);
    case ResponseFormat::kSrt: return write_srt(t, options);
    case ResponseFormat::kVerboseJson: return write_verbose_json(t, options);
    case ResponseFormat::kVtt: return write_vtt(t, options);
    case ResponseFormat::kDiarizedJson: return write_diarized_json(t);
  }
  return write_json(t, options);
}

}  // namespace vv
