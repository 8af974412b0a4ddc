// Stream event payloads: exact JSON of the API.md §4.3 example frames (copied from the spec).
#include "engine/transcript/stream_events.h"

#include <gtest/gtest.h>

namespace vv {
namespace {

TEST(StreamEvents, DeltaEventsMatchApiExample) {
  EXPECT_EQ(write_delta_event("Good morning,", 0), R"EX({"type":"transcript.text.delta","delta":"Good morning,","segment_id":"seg_0"})EX");
  EXPECT_EQ(write_delta_event(" thanks for joining the call.", 0), R"EX({"type":"transcript.text.delta","delta":" thanks for joining the call.","segment_id":"seg_0"})EX");
  EXPECT_EQ(write_delta_event(" Happy to be here.", 1), R"EX({"type":"transcript.text.delta","delta":" Happy to be here.","segment_id":"seg_1"})EX");
}

TEST(StreamEvents, SegmentEventMatchesApiExample) {
  Segment s;
  s.start = 0.0;
  s.end = 2.48;
  s.speaker = std::string(1, 'A');
  s.text = "Good morning, thanks for joining the call.";
  EXPECT_EQ(write_segment_event(s, 0), R"EX({"type":"transcript.text.segment","id":"seg_0","start":0.0,"end":2.48,"speaker":"A","text":"Good morning, thanks for joining the call."})EX");
}

TEST(StreamEvents, DoneEventMatchesApiExample) {
  Transcript t;
  t.text = "Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with "
           "the budget.";
  t.finish_reason = FinishReason::kStop;
  TokenUsage u;
  u.audio_tokens = 57;
  u.text_tokens = 59;
  u.output_tokens = 96;
  EXPECT_EQ(write_done_event(t, u), R"EX({"type":"transcript.text.done","text":"Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with the budget.","usage":{"type":"tokens","input_tokens":116,"output_tokens":96,"total_tokens":212,"input_token_details":{"audio_tokens":57,"text_tokens":59}},"finish_reason":"stop"})EX");
}

TEST(StreamEvents, DeltaWithoutSegmentIdAndWithLogprobs) {
  const std::vector<TokenLogprob> lp{{"Hi", -0.25, "Hi"}};
  EXPECT_EQ(write_delta_event("Hi \"x\"", std::nullopt, &lp),
            R"({"type":"transcript.text.delta","delta":"Hi \"x\"","logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105]}]})");
}

TEST(StreamEvents, DoneEventCarriesLengthAndLogprobsWhenAsked) {
  Transcript t;
  t.text = "cut";
  t.finish_reason = FinishReason::kLength;
  t.logprobs = {{"cut", -1.5, "cut"}};
  TokenUsage u;
  u.audio_tokens = 3;
  u.text_tokens = 4;
  u.output_tokens = 64;
  EXPECT_EQ(write_done_event(t, u, true),
            R"({"type":"transcript.text.done","text":"cut","logprobs":[{"token":"cut","logprob":-1.5,"bytes":[99,117,116]}],)"
            R"("usage":{"type":"tokens","input_tokens":7,"output_tokens":64,"total_tokens":71,)"
            R"("input_token_details":{"audio_tokens":3,"text_tokens":4}},"finish_reason":"length"})");
}

}  // namespace
}  // namespace vv
