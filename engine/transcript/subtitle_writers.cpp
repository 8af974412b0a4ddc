#include "engine/transcript/subtitle_writers.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace vv {
namespace {

std::string format_timestamp(Seconds t, char ms_separator) {
  const std::int64_t total_ms = std::isfinite(t) && t > 0.0 ? std::llround(t * 1000.0) : 0;
  const std::int64_t ms = total_ms % 1000;
  const std::int64_t s = (total_ms / 1000) % 60;
  const std::int64_t m = (total_ms / 60000) % 60;
  const std::int64_t h = total_ms / 3600000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03lld", static_cast<long long>(h),
                static_cast<long long>(m), static_cast<long long>(s), ms_separator,
                static_cast<long long>(ms));
  return buf;
}

// Newlines (\r\n, \r, \n) inside a segment become single spaces.
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out.push_back(' ');
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else if (text[i] == '\n') {
      out.push_back(' ');
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::string format_srt_timestamp(Seconds t) { return format_timestamp(t, ','); }
std::string format_vtt_timestamp(Seconds t) { return format_timestamp(t, '.'); }

std::string vtt_escape(std::string_view text) {
  const std::string line = one_line(text);
  std::string arrows;
  arrows.reserve(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line.compare(i, 3, "-->") == 0) {
      arrows += "->";
      i += 2;
    } else {
      arrows.push_back(line[i]);
    }
  }
  std::string out;
  out.reserve(arrows.size());
  for (char c : arrows) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string write_srt(const Transcript& t, const WriterOptions& options) {
  std::string out;
  std::size_t n = 0;
  for (const Segment& s : t.segments) {
    out += std::to_string(++n);
    out += '\n';
    out += format_srt_timestamp(s.start);
    out += " --> ";
    out += format_srt_timestamp(s.end);
    out += '\n';
    if (options.speaker_labels && !s.speaker.empty()) out += "[" + s.speaker + "] ";
    out += one_line(s.text);
    out += "\n\n";
  }
  return out;
}

std::string write_vtt(const Transcript& t, const WriterOptions& options) {
  std::string out = "WEBVTT\n\n";
  for (const Segment& s : t.segments) {
    out += format_vtt_timestamp(s.start);
    out += " --> ";
    out += format_vtt_timestamp(s.end);
    out += '\n';
    if (options.speaker_labels && !s.speaker.empty()) out += "<v " + s.speaker + ">";
    out += vtt_escape(s.text);
    out += "\n\n";
  }
  return out;
}

}  // namespace vv
