// Response writers: exact bodies for the API.md §3.5 example transcript (7.52 s, two speakers).
// The expected strings are the spec's examples, copied from API.md §3.5 (a fenced block plus the
// final newline that the closing fence line stands for in text bodies).
#include <gtest/gtest.h>

#include "engine/transcript/json_responses.h"
#include "engine/transcript/response_format.h"
#include "engine/transcript/subtitle_writers.h"

namespace vv {
namespace {

// API.md §3.5 json example.
const std::string kJson = R"EX({"text": "Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with the budget.", "usage": {"type": "duration", "seconds": 8}})EX";
// text example; the body is the block's line followed by exactly one "\n".
const std::string kText = std::string(R"EX(Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with the budget.)EX") + "\n";
// srt example; the block ends with the blank line that closes the last cue.
const std::string kSrt = std::string(R"EX(1
00:00:00,000 --> 00:00:02,480
[A] Good morning, thanks for joining the call.

2
00:00:02,800 --> 00:00:05,100
[B] Happy to be here. Shall we start?

3
00:00:05,300 --> 00:00:07,400
[A] Yes, let's begin with the budget.
)EX") + "\n";
const std::string kVtt = std::string(R"EX(WEBVTT

00:00:00.000 --> 00:00:02.480
<v A>Good morning, thanks for joining the call.

00:00:02.800 --> 00:00:05.100
<v B>Happy to be here. Shall we start?

00:00:05.300 --> 00:00:07.400
<v A>Yes, let's begin with the budget.
)EX") + "\n";
const std::string kVerboseJson = R"EX({
  "task": "transcribe",
  "language": "en",
  "duration": 7.52,
  "text": "Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with the budget.",
  "segments": [
    {"id": 0, "seek": 0, "start": 0.0, "end": 2.48, "text": "Good morning, thanks for joining the call.", "tokens": [15216, 6556, 11, 9339, 369, 18169, 279, 1618, 13], "temperature": 0.0, "avg_logprob": -0.071, "compression_ratio": 0.93, "no_speech_prob": 0.0, "speaker": "A"},
    {"id": 1, "seek": 0, "start": 2.8, "end": 5.1, "text": "Happy to be here. Shall we start?", "tokens": [32847, 311, 387, 1588, 13, 29308, 582, 1191, 30], "temperature": 0.0, "avg_logprob": -0.102, "compression_ratio": 0.89, "no_speech_prob": 0.0, "speaker": "B"},
    {"id": 2, "seek": 0, "start": 5.3, "end": 7.4, "text": "Yes, let's begin with the budget.", "tokens": [9454, 11, 1077, 594, 3161, 448, 279, 8039, 13], "temperature": 0.0, "avg_logprob": -0.064, "compression_ratio": 0.91, "no_speech_prob": 0.0, "speaker": "A"}
  ],
  "usage": {"type": "duration", "seconds": 8},
  "finish_reason": "stop"
})EX";
const std::string kDiarizedJson = R"EX({
  "task": "transcribe",
  "duration": 7.52,
  "text": "Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin with the budget.",
  "segments": [
    {"type": "transcript.text.segment", "id": "seg_0", "start": 0.0, "end": 2.48, "speaker": "A", "text": "Good morning, thanks for joining the call."},
    {"type": "transcript.text.segment", "id": "seg_1", "start": 2.8, "end": 5.1, "speaker": "B", "text": "Happy to be here. Shall we start?"},
    {"type": "transcript.text.segment", "id": "seg_2", "start": 5.3, "end": 7.4, "speaker": "A", "text": "Yes, let's begin with the budget."}
  ],
  "usage": {"type": "duration", "seconds": 8},
  "finish_reason": "stop"
})EX";

Segment seg(double start, double end, const char* speaker, const char* text, std::vector<TokenId> tokens,
            double avg_logprob, double compression_ratio) {
  Segment s;
  s.start = start;
  s.end = end;
  s.speaker = speaker;
  s.text = text;
  s.tokens = std::move(tokens);
  s.avg_logprob = avg_logprob;
  s.compression_ratio = compression_ratio;
  s.temperature = 0.0f;
  return s;
}

Transcript example() {
  Transcript t;
  t.duration = 7.52;
  t.language = "en";
  t.finish_reason = FinishReason::kStop;
  t.text = "Good morning, thanks for joining the call. Happy to be here. Shall we start? Yes, let's begin "
           "with the budget.";
  t.segments = {
      seg(0.0, 2.48, "A", "Good morning, thanks for joining the call.",
          {15216, 6556, 11, 9339, 369, 18169, 279, 1618, 13}, -0.071, 0.93),
      seg(2.8, 5.1, "B", "Happy to be here. Shall we start?", {32847, 311, 387, 1588, 13, 29308, 582, 1191, 30},
          -0.102, 0.89),
      seg(5.3, 7.4, "A", "Yes, let's begin with the budget.", {9454, 11, 1077, 594, 3161, 448, 279, 8039, 13},
          -0.064, 0.91),
  };
  return t;
}

TEST(ResponseWriters, JsonMatchesApiExample) { EXPECT_EQ(write_json(example()), kJson); }

TEST(ResponseWriters, TextIsTextPlusOneNewline) { EXPECT_EQ(write_text(example()), kText); }

TEST(ResponseWriters, SrtMatchesApiExample) { EXPECT_EQ(write_srt(example()), kSrt); }

TEST(ResponseWriters, VttMatchesApiExample) { EXPECT_EQ(write_vtt(example()), kVtt); }

TEST(ResponseWriters, VerboseJsonMatchesApiExample) { EXPECT_EQ(write_verbose_json(example()), kVerboseJson); }

TEST(ResponseWriters, DiarizedJsonMatchesApiExample) { EXPECT_EQ(write_diarized_json(example()), kDiarizedJson); }

TEST(ResponseWriters, WriteResponseDispatchesEveryFormat) {
  const Transcript t = example();
  EXPECT_EQ(write_response(t, ResponseFormat::kJson), kJson);
  EXPECT_EQ(write_response(t, ResponseFormat::kText), kText);
  EXPECT_EQ(write_response(t, ResponseFormat::kSrt), kSrt);
  EXPECT_EQ(write_response(t, ResponseFormat::kVtt), kVtt);
  EXPECT_EQ(write_response(t, ResponseFormat::kVerboseJson), kVerboseJson);
  EXPECT_EQ(write_response(t, ResponseFormat::kDiarizedJson), kDiarizedJson);
}

TEST(ResponseWriters, FormatNamesAndContentTypes) {
  for (const char* name : {"json", "text", "srt", "verbose_json", "vtt", "diarized_json"}) {
    auto f = parse_response_format(name);
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_EQ(response_format_name(*f), name);
  }
  EXPECT_FALSE(parse_response_format("xml").has_value());
  EXPECT_FALSE(parse_response_format("JSON").has_value());
  EXPECT_EQ(content_type(ResponseFormat::kJson), "application/json");
  EXPECT_EQ(content_type(ResponseFormat::kVerboseJson), "application/json");
  EXPECT_EQ(content_type(ResponseFormat::kDiarizedJson), "application/json");
  EXPECT_EQ(content_type(ResponseFormat::kText), "text/plain; charset=utf-8");
  EXPECT_EQ(content_type(ResponseFormat::kSrt), "text/plain; charset=utf-8");
  EXPECT_EQ(content_type(ResponseFormat::kVtt), "text/plain; charset=utf-8");
  EXPECT_FALSE(streams_segment_events(ResponseFormat::kJson));
  EXPECT_FALSE(streams_segment_events(ResponseFormat::kText));
  EXPECT_TRUE(streams_segment_events(ResponseFormat::kSrt));
  EXPECT_TRUE(streams_segment_events(ResponseFormat::kDiarizedJson));
}

TEST(ResponseWriters, SubtitlesWithoutSpeakerLabelsHaveNoPrefix) {
  WriterOptions o;
  o.speaker_labels = false;
  const std::string srt = write_srt(example(), o);
  EXPECT_TRUE(srt.starts_with("1\n00:00:00,000 --> 00:00:02,480\nGood morning, thanks for joining the call.\n\n2\n"))
      << srt;
  const std::string vtt = write_vtt(example(), o);
  EXPECT_EQ(vtt.find("<v"), std::string::npos);
  EXPECT_TRUE(vtt.starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:02.480\nGood morning, thanks for joining the call.\n\n"))
      << vtt;
}

TEST(ResponseWriters, EmptyTranscriptGivesEmptySrtAndHeaderOnlyVtt) {
  Transcript t;
  t.duration = 0.4;
  EXPECT_EQ(write_srt(t), "");
  EXPECT_EQ(write_vtt(t), "WEBVTT\n\n");
  EXPECT_EQ(write_text(t), "\n");
  EXPECT_EQ(write_json(t), R"({"text": "", "usage": {"type": "duration", "seconds": 1}})");
}

TEST(ResponseWriters, SrtTurnsNewlinesIntoSpaces) {
  Transcript t;
  t.duration = 3;
  Segment s;
  s.start = 0.5;
  s.end = 1.25;
  s.speaker = "B";
  s.text = "first line\nsecond\r\nthird";
  t.segments.push_back(s);
  EXPECT_EQ(write_srt(t), "1\n00:00:00,500 --> 00:00:01,250\n[B] first line second third\n\n");
}

TEST(ResponseWriters, VttEscapesMarkupAndArrows) {
  EXPECT_EQ(vtt_escape("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
  EXPECT_EQ(vtt_escape("x --> y"), "x -&gt; y");
  EXPECT_EQ(vtt_escape("two\nlines"), "two lines");
  Transcript t;
  t.duration = 2;
  Segment s;
  s.end = 1.0;
  s.speaker = "A";
  s.text = "<b>bold</b> & -->";
  t.segments.push_back(s);
  EXPECT_EQ(write_vtt(t), "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n<v A>&lt;b&gt;bold&lt;/b&gt; &amp; -&gt;\n\n");
}

TEST(ResponseWriters, TimestampsRoundToMillisecondsAndCountHours) {
  EXPECT_EQ(format_srt_timestamp(0.0), "00:00:00,000");
  EXPECT_EQ(format_srt_timestamp(2.48), "00:00:02,480");
  EXPECT_EQ(format_srt_timestamp(59.9996), "00:01:00,000");
  EXPECT_EQ(format_srt_timestamp(3599.999), "00:59:59,999");
  EXPECT_EQ(format_srt_timestamp(3723.0506), "01:02:03,051");
  EXPECT_EQ(format_vtt_timestamp(3600.0), "01:00:00.000");
  EXPECT_EQ(format_vtt_timestamp(-1.0), "00:00:00.000");
}

TEST(ResponseWriters, UsageSecondsIsCeilingAtLeastOne) {
  EXPECT_EQ(usage_seconds(7.52), 8);
  EXPECT_EQ(usage_seconds(8.0), 8);
  EXPECT_EQ(usage_seconds(0.2), 1);
  EXPECT_EQ(usage_seconds(0.0), 1);
  EXPECT_EQ(usage_seconds(3600.01), 3601);
}

TEST(ResponseWriters, JsonLogprobsListTokensBytesAndClampToZero) {
  Transcript t = example();
  t.logprobs = {{"Good", -0.0012, "Good"}, {"\xEF\xBF\xBD", -0.5, std::string("\xE4\xBD", 2)}, {"!", 0.25, "!"}};
  WriterOptions o;
  o.include_logprobs = true;
  const std::string body = write_json(t, o);
  const std::string tail =
      R"(, "logprobs": [{"token": "Good", "logprob": -0.0012, "bytes": [71,111,111,100]}, )"
      R"({"token": "\xEF\xBF\xBD", "logprob": -0.5, "bytes": [228,189]}, {"token": "!", "logprob": 0.0, "bytes": [33]}]})";
  std::string want_tail = tail;
  // The raw string above spells the replacement character as escapes; put the real bytes in.
  const std::string esc = "\\xEF\\xBF\\xBD";
  want_tail.replace(want_tail.find(esc), esc.size(), "\xEF\xBF\xBD");
  ASSERT_GE(body.size(), want_tail.size());
  EXPECT_EQ(body.substr(0, kJson.size() - 1), kJson.substr(0, kJson.size() - 1));
  EXPECT_EQ(body.substr(kJson.size() - 1), want_tail);
}

TEST(ResponseWriters, VerboseJsonLanguageDefaultsToUnknownAndShowsFinishReason) {
  Transcript t = example();
  t.language.reset();
  t.finish_reason = FinishReason::kLength;
  const std::string body = write_verbose_json(t);
  EXPECT_NE(body.find("\n  \"language\": \"unknown\",\n"), std::string::npos);
  EXPECT_NE(body.find("\n  \"finish_reason\": \"length\"\n}"), std::string::npos);
}

TEST(ResponseWriters, VerboseJsonWordsOnlyOmitsSegments) {
  Transcript t = example();
  WriterOptions o;
  o.segment_granularity = false;
  o.word_granularity = true;
  const std::string body = write_verbose_json(t, o);
  EXPECT_EQ(body.find("\"segments\""), std::string::npos);
  // "Good" is 4 of the first segment's 36 non-space characters: [0, 2.48 * 4 / 36].
  EXPECT_NE(body.find("  \"words\": [\n    {\"word\": \"Good\", \"start\": 0.0, \"end\": 0.276},\n"),
            std::string::npos)
      << body;
}

TEST(ResponseWriters, VerboseJsonSegmentTemperatureIsWrittenAsSet) {
  Transcript t = example();
  t.segments[1].temperature = 0.3f;
  const std::string body = write_verbose_json(t);
  EXPECT_NE(body.find("\"temperature\": 0.3, \"avg_logprob\": -0.102"), std::string::npos) << body;
}

TEST(ResponseWriters, JsonEscapesControlCharactersAndKeepsUnicodeRaw) {
  Transcript t;
  t.duration = 1;
  t.text = "say \"hi\"\\\n\t\x01 \xE4\xBD\xA0\xE5\xA5\xBD";
  EXPECT_EQ(write_json(t),
            "{\"text\": \"say \\\"hi\\\"\\\\\\n\\t\\u0001 \xE4\xBD\xA0\xE5\xA5\xBD\", \"usage\": {\"type\": "
            "\"duration\", \"seconds\": 1}}");
}

}  // namespace
}  // namespace vv
