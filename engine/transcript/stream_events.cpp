#include "engine/transcript/stream_events.h"

#include <algorithm>

#include "engine/transcript/json_text.h"

namespace vv {
void append_logprobs(std::string& out, const std::vector<TokenLogprob>& logprobs) {
  out += "[";
  for (std::size_t i = 0; i < logprobs.size(); ++i) {
    if (i) out.push_back(',');
    out += "{\"token\":";
    json::append_string(out, logprobs[i].token);
    out += ",\"logprob\":";
    json::append_double(out, std::min(logprobs[i].logprob, 0.0));
    out += ",\"bytes\":[";
    for (std::size_t b = 0; b < logprobs[i].bytes.size(); ++b) {
      if (b) out.push_back(',');
      out += std::to_string(static_cast<unsigned char>(logprobs[i].bytes[b]));
    }
    out += "]}";
  }
  out += "]";
}

std::string segment_id(std::size_t index) {
  return "seg_" + std::to_string(index);
}

std::string write_delta_event(std::string_view delta, std::optional<std::size_t> segment_index,
                              const std::vector<TokenLogprob>* logprobs) {
  std::string out = "{\"type\":\"transcript.text.delta\",\"delta\":";
  json::append_string(out, delta);
  if (logprobs) {
    out += ",\"logprobs\":";
    append_logprobs(out, *logprobs);
  }
  if (segment_index) {
    out += ",\"segment_id\":\"" + segment_id(*segment_index) + "\"";
  }
  out += "}";
  return out;
}

std::string write_segment_event(const Segment& segment, std::size_t index) {
  std::string out = "{\"type\":\"transcript.text.segment\",\"id\":\"" + segment_id(index) + "\",\"start\":";
  json::append_double(out, segment.start);
  out += ",\"end\":";
  json::append_double(out, segment.end);
  out += ",\"speaker\":";
  json::append_string(out, segment.speaker);
  out += ",\"text\":";
  json::append_string(out, segment.text);
  out += "}";
  return out;
}

std::string write_done_event(const Transcript& t, const TokenUsage& usage, bool include_logprobs) {
  std::string out = "{\"type\":\"transcript.text.done\",\"text\":";
  json::append_string(out, t.text);
  if (include_logprobs) {
    out += ",\"logprobs\":";
    append_logprobs(out, t.logprobs);
  }
  const std::int64_t input = usage.audio_tokens + usage.text_tokens;
  out += ",\"usage\":{\"type\":\"tokens\",\"input_tokens\":" + std::to_string(input) +
         ",\"output_tokens\":" + std::to_string(usage.output_tokens) +
         ",\"total_tokens\":" + std::to_string(input + usage.output_tokens) +
         ",\"input_token_details\":{\"audio_tokens\":" + std::to_string(usage.audio_tokens) +
         ",\"text_tokens\":" + std::to_string(usage.text_tokens) + "}},\"finish_reason\":";
  json::append_string(out, finish_reason_name(t.finish_reason));
  out += "}";
  return out;
}

}  // namespace vv
