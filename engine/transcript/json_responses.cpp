#include "engine/transcript/json_responses.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "engine/transcript/json_text.h"
#include "engine/transcript/word_timing.h"

namespace vv {
namespace {

// A float (temperature) printed with its own shortest digits: 0.3f → 0.3, not 0.30000001192092896.
double float_as_written(float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf - 1, v);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

void append_usage(std::string& out, Seconds duration) {
  out += "{\"type\": \"duration\", \"seconds\": ";
  out += std::to_string(usage_seconds(duration));
  out += "}";
}

void append_member(std::string& out, const char* indent, const char* name) {
  out += indent;
  out += '"';
  out += name;
  out += "\": ";
}

void append_int_list(std::string& out, const std::vector<TokenId>& ids, const char* separator) {
  out.push_back('[');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += separator;
    out += std::to_string(ids[i]);
  }
  out.push_back(']');
}

}  // namespace

std::int64_t usage_seconds(Seconds duration) {
  if (!std::isfinite(duration) || duration <= 1.0) return 1;
  return static_cast<std::int64_t>(std::ceil(duration));
}

std::string write_json(const Transcript& t, const WriterOptions& options) {
  std::string out = "{\"text\": ";
  json::append_string(out, t.text);
  out += ", \"usage\": ";
  append_usage(out, t.duration);
  if (options.include_logprobs) {
    out += ", \"logprobs\": [";
    for (std::size_t i = 0; i < t.logprobs.size(); ++i) {
      const TokenLogprob& lp = t.logprobs[i];
      if (i) out += ", ";
      out += "{\"token\": ";
      json::append_string(out, lp.token);
      out += ", \"logprob\": ";
      json::append_double(out, std::min(lp.logprob, 0.0));
      out += ", \"bytes\": [";
      for (std::size_t b = 0; b < lp.bytes.size(); ++b) {
        if (b) out.push_back(',');
        out += std::to_string(static_cast<unsigned char>(lp.bytes[b]));
      }
      out += "]}";
    }
    out += "]";
  }
  out += "}";
  return out;
}

std::string write_verbose_json(const Transcript& t, const WriterOptions& options) {
  std::string out = "{\n";
  append_member(out, "  ", "task");
  out += "\"transcribe\",\n";
  append_member(out, "  ", "language");
  json::append_string(out, t.language && !t.language->empty() ? *t.language : "unknown");
  out += ",\n";
  append_member(out, "  ", "duration");
  json::append_double(out, t.duration);
  out += ",\n";
  append_member(out, "  ", "text");
  json::append_string(out, t.text);
  out += ",\n";
  if (options.segment_granularity) {
    append_member(out, "  ", "segments");
    out += t.segments.empty() ? "[" : "[\n";
    for (std::size_t i = 0; i < t.segments.size(); ++i) {
      const Segment& s = t.segments[i];
      out += "    {\"id\": " + std::to_string(i) + ", \"seek\": 0, \"start\": ";
      json::append_double(out, s.start);
      out += ", \"end\": ";
      json::append_double(out, s.end);
      out += ", \"text\": ";
      json::append_string(out, s.text);
      out += ", \"tokens\": ";
      append_int_list(out, s.tokens, ", ");
      out += ", \"temperature\": ";
      json::append_double(out, float_as_written(s.temperature));
      out += ", \"avg_logprob\": ";
      json::append_double(out, s.avg_logprob);
      out += ", \"compression_ratio\": ";
      json::append_double(out, s.compression_ratio);
      out += ", \"no_speech_prob\": 0.0, \"speaker\": ";
      json::append_string(out, s.speaker);
      out += i + 1 < t.segments.size() ? "},\n" : "}\n  ";
    }
    out += "],\n";
  }
  if (options.word_granularity) {
    const std::vector<Word> words = interpolate_words(t.segments);
    append_member(out, "  ", "words");
    out += words.empty() ? "[" : "[\n";
    for (std::size_t i = 0; i < words.size(); ++i) {
      out += "    {\"word\": ";
      json::append_string(out, words[i].word);
      out += ", \"start\": ";
      json::append_double(out, words[i].start);
      out += ", \"end\": ";
      json::append_double(out, words[i].end);
      out += i + 1 < words.size() ? "},\n" : "}\n  ";
    }
    out += "],\n";
  }
  append_member(out, "  ", "usage");
  append_usage(out, t.duration);
  out += ",\n";
  append_member(out, "  ", "finish_reason");
  json::append_string(out, finish_reason_name(t.finish_reason));
  out += "\n}";
  return out;
}

std::string write_diarized_json(const Transcript& t) {
  std::string out = "{\n";
  append_member(out, "  ", "task");
  out += "\"transcribe\",\n";
  append_member(out, "  ", "duration");
  json::append_double(out, t.duration);
  out += ",\n";
  append_member(out, "  ", "text");
  json::append_string(out, t.text);
  out += ",\n";
  append_member(out, "  ", "segments");
  out += t.segments.empty() ? "[" : "[\n";
  for (std::size_t i = 0; i < t.segments.size(); ++i) {
    const Segment& s = t.segments[i];
    out += "    {\"type\": \"transcript.text.segment\", \"id\": \"seg_" + std::to_string(i) + "\", \"start\": ";
    json::append_double(out, s.start);
    out += ", \"end\": ";
    json::append_double(out, s.end);
    out += ", \"speaker\": ";
    json::append_string(out, s.speaker);
    out += ", \"text\": ";
    json::append_string(out, s.text);
    out += i + 1 < t.segments.size() ? "},\n" : "}\n  ";
  }
  out += "],\n";
  append_member(out, "  ", "usage");
  append_usage(out, t.duration);
  out += ",\n";
  append_member(out, "  ", "finish_reason");
  json::append_string(out, finish_reason_name(t.finish_reason));
  out += "\n}";
  return out;
}

}  // namespace vv
