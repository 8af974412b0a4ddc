// Payloads of the transcription stream's SSE events (API.md §4.3) as compact JSON, without the
// "data: " framing: transcript.text.delta, transcript.text.segment, transcript.text.done.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/transcript/transcript.h"

namespace vv {

// Token usage of a stream's done event: input = audio tokens (speech pads) + text prompt tokens.
struct TokenUsage {
  std::int64_t audio_tokens = 0;
  std::int64_t text_tokens = 0;
  std::int64_t output_tokens = 0;
};

// "seg_<n>".
std::string segment_id(std::size_t index);

// Appends the logprobs array of the transcription events: [{"token","logprob" (≤ 0),"bytes":[…]}, …].
void append_logprobs(std::string& out, const std::vector<TokenLogprob>& logprobs);

// {"type":"transcript.text.delta","delta":…[,"logprobs":[…]][,"segment_id":"seg_<n>"]}
std::string write_delta_event(std::string_view delta, std::optional<std::size_t> segment_index,
                              const std::vector<TokenLogprob>* logprobs = nullptr);
// {"type":"transcript.text.segment","id":"seg_<n>","start":…,"end":…,"speaker":…,"text":…}
std::string write_segment_event(const Segment& segment, std::size_t index);
// {"type":"transcript.text.done","text":…[,"logprobs":[…]],"usage":{"type":"tokens",…},
//  "finish_reason":…}
std::string write_done_event(const Transcript& t, const TokenUsage& usage, bool include_logprobs = false);

}  // namespace vv
