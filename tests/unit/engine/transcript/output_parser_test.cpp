// OutputParser: the model's answer (MODEL.md §9) → segments; header, fences, truncation, malformed
// items, key variants, the missing "Start": repair, escapes, and incremental feeding.
#include "engine/transcript/output_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vv {
namespace {

struct Parsed {
  std::vector<ParsedSegment> segments;
  std::string content;  // all kContent text in order
  ParseSummary summary;
};

Parsed parse_pieces(const std::vector<std::string>& pieces) {
  OutputParser p;
  std::vector<ParseEvent> events;
  for (const auto& piece : pieces) p.feed(piece, events);
  Parsed r;
  r.summary = p.finish(events);
  for (auto& e : events) {
    if (e.kind == ParseEvent::Kind::kContent) {
      r.content += e.content;
    } else {
      r.segments.push_back(e.segment);
    }
  }
  return r;
}

Parsed parse(const std::string& text) { return parse_pieces({text}); }

Parsed parse_bytewise(const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return parse_pieces(pieces);
}

const std::string kTwo =
    "<|im_start|>assistant\n[{\"Start\":0.0,\"End\":7.56,\"Speaker\":0,\"Content\":\"Hello there.\"},"
    "{\"Start\":7.6,\"End\":12.1,\"Speaker\":1,\"Content\":\"Hi!\"}]<|im_end|>\n<|endoftext|>";

TEST(OutputParser, WellFormedArrayWithHeaderGivesEverySegment) {
  const Parsed r = parse(kTwo);
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_EQ(r.segments[0].start, 0.0);
  EXPECT_EQ(r.segments[0].end, 7.56);
  EXPECT_EQ(r.segments[0].speaker, 0);
  EXPECT_EQ(r.segments[0].content, "Hello there.");
  EXPECT_EQ(r.segments[1].start, 7.6);
  EXPECT_EQ(r.segments[1].end, 12.1);
  EXPECT_EQ(r.segments[1].speaker, 1);
  EXPECT_EQ(r.segments[1].content, "Hi!");
  EXPECT_FALSE(r.segments[1].partial);
  EXPECT_FALSE(r.summary.failed);
  EXPECT_FALSE(r.summary.truncated);
  EXPECT_EQ(r.summary.malformed, 0u);
  EXPECT_EQ(r.content, "Hello there.Hi!");
  EXPECT_EQ(r.summary.answer_begin, std::string("<|im_start|>assistant\n").size());
}

TEST(OutputParser, SkipSpecialTokensFormAndIntegerTimes) {
  const Parsed r = parse("assistant\n[{\"Start\":0,\"End\":3,\"Speaker\":0,\"Content\":\"a b\"}]\n");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].start, 0.0);
  EXPECT_EQ(r.segments[0].end, 3.0);
  EXPECT_EQ(r.segments[0].content, "a b");
}

TEST(OutputParser, CodeFenceIsStripped) {
  const Parsed r = parse("```json\n[{\"Start\":1,\"End\":2,\"Speaker\":0,\"Content\":\"fenced\"}]\n```");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].content, "fenced");
  EXPECT_FALSE(r.summary.truncated);
}

TEST(OutputParser, TruncatedTailKeepsCompleteObjectsAndFlagsThePartialOne) {
  const Parsed r = parse(
      "[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"one\"},{\"Start\":1.5,\"End\":2,\"Speaker\":1,"
      "\"Content\":\"tw");
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_FALSE(r.segments[0].partial);
  EXPECT_TRUE(r.segments[1].partial);
  EXPECT_EQ(r.segments[1].content, "tw");
  EXPECT_EQ(r.segments[1].start, 1.5);
  EXPECT_TRUE(r.summary.truncated);
  EXPECT_FALSE(r.summary.failed);
}

TEST(OutputParser, TruncatedBeforeContentIsNotASegmentNorAFailure) {
  const Parsed r = parse("[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"one\"},{\"Sta");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_TRUE(r.summary.truncated);
  EXPECT_FALSE(r.summary.failed);
  const Parsed only = parse("[{\"Start\":0,\"En");
  EXPECT_TRUE(only.segments.empty());
  EXPECT_TRUE(only.summary.truncated);
  EXPECT_FALSE(only.summary.failed);  // a cut-off array is `length`, not a parse failure
}

TEST(OutputParser, MalformedItemsAreSkipped) {
  const Parsed r = parse(
      "[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"a\"}, 42, \"junk\", [1,{\"x\":2}], "
      "{\"Start\":1,\"End\":2}, {\"Start\":2 \"End\":3,\"Content\":\"b\"}, {\"Start\":3,\"End\":4 :: bad},"
      "{\"Start\":4,\"End\":5,\"Speaker\":0,\"Content\":\"c\"}]");
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_EQ(r.segments[0].content, "a");
  EXPECT_EQ(r.segments[1].content, "b");  // missing comma tolerated
  EXPECT_EQ(r.segments[1].end, 3.0);
  EXPECT_EQ(r.segments[2].content, "c");
  EXPECT_EQ(r.summary.malformed, 5u);
  EXPECT_FALSE(r.summary.failed);
  EXPECT_FALSE(r.summary.truncated);
}

TEST(OutputParser, EscapesAndBracketsInsideStringsAreRespected) {
  const std::string text =
      R"([{"Start":0,"End":1,"Speaker":0,"Content":"He said \"[x]\" {y} ]} \\ \/ \u00e9 \ud83d\ude00\nend"},)"
      R"({"Start":1,"End":2,"Speaker":1,"Content":"next"}])";
  const Parsed r = parse(text);
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_EQ(r.segments[0].content, "He said \"[x]\" {y} ]} \\ / \xC3\xA9 \xF0\x9F\x98\x80\nend");
  EXPECT_EQ(r.segments[1].content, "next");
}

TEST(OutputParser, BrokenUnicodeEscapesBecomeReplacementCharacters) {
  const Parsed r = parse(R"([{"Content":"a\ud83d b \udc00 c \u12G4"}])");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].content, "a\xEF\xBF\xBD b \xEF\xBF\xBD c \xEF\xBF\xBDG4");
}

TEST(OutputParser, KeyVariantsAreAccepted) {
  const Parsed r = parse(
      R"([{"Start time":1.5,"End time":2.5,"Speaker ID":3,"Text":"variant"},)"
      R"({"start_time":3,"end_time":4,"speaker_id":1,"content":"lower"}])");
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_EQ(r.segments[0].start, 1.5);
  EXPECT_EQ(r.segments[0].end, 2.5);
  EXPECT_EQ(r.segments[0].speaker, 3);
  EXPECT_EQ(r.segments[0].content, "variant");
  EXPECT_EQ(r.segments[1].start, 3.0);
  EXPECT_EQ(r.segments[1].speaker, 1);
  EXPECT_EQ(r.segments[1].content, "lower");
}

TEST(OutputParser, MissingStartKeyIsRepaired) {
  const Parsed r = parse(
      R"([{"Start":0.0,"End":2.9,"Speaker":0,"Content":"before"},{"2.99,"End":3.5,"Speaker":0,"Content":"repaired"},)"
      R"({"Start":3.6,"End":4,"Speaker":1,"Content":"after"}])");
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_EQ(r.segments[1].start, 2.99);
  EXPECT_EQ(r.segments[1].end, 3.5);
  EXPECT_EQ(r.segments[1].content, "repaired");
  EXPECT_EQ(r.segments[2].content, "after");
}

TEST(OutputParser, MissingOrNonIntegerSpeakerIsAbsent) {
  const Parsed r = parse(
      R"([{"Start":0,"End":1,"Content":"[Silence]"},{"Start":1,"End":2,"Speaker":"N/A","Content":"[Music]"},)"
      R"({"Start":2,"End":3,"Speaker":1.5,"Content":"x"},{"Start":3,"End":4,"Speaker":"2","Content":"y"},)"
      R"({"Start":4,"End":5,"Speaker":1.0,"Content":"z"},{"Start":5,"End":6,"Speaker":null,"Content":"w"}])");
  ASSERT_EQ(r.segments.size(), 6u);
  EXPECT_FALSE(r.segments[0].speaker.has_value());
  EXPECT_FALSE(r.segments[1].speaker.has_value());
  EXPECT_FALSE(r.segments[2].speaker.has_value());
  EXPECT_EQ(r.segments[3].speaker, 2);
  EXPECT_EQ(r.segments[4].speaker, 1);
  EXPECT_FALSE(r.segments[5].speaker.has_value());
}

TEST(OutputParser, TimesGivenAsStringsAreRead) {
  const Parsed r = parse(R"([{"Start":"1.25","End":" 2 ","Speaker":0,"Content":"t"}])");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].start, 1.25);
  EXPECT_EQ(r.segments[0].end, 2.0);
}

TEST(OutputParser, FreeTextIsAParseFailureWithTheWholeTextAsFallback) {
  const Parsed r = parse("<|im_start|>assistant\n  Hello world, no JSON here.  <|im_end|>\n<|endoftext|>");
  EXPECT_TRUE(r.segments.empty());
  EXPECT_TRUE(r.summary.failed);
  EXPECT_EQ(r.summary.fallback_text, "Hello world, no JSON here.");
}

TEST(OutputParser, ArrayOfJunkIsAParseFailure) {
  const Parsed r = parse("[Music] playing softly");
  EXPECT_TRUE(r.segments.empty());
  EXPECT_TRUE(r.summary.failed);
  EXPECT_EQ(r.summary.fallback_text, "[Music] playing softly");
}

TEST(OutputParser, EmptyArrayIsAnEmptyTranscriptNotAFailure) {
  const Parsed r = parse("assistant\n[]");
  EXPECT_TRUE(r.segments.empty());
  EXPECT_FALSE(r.summary.failed);
  EXPECT_FALSE(r.summary.truncated);
}

TEST(OutputParser, ArrayAfterProseIsRecoveredAtTheEnd) {
  const Parsed r = parse("Sure! Here it is: [{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"found\"}] done");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].content, "found");
  EXPECT_FALSE(r.summary.failed);
  const Parsed fenced = parse("Result:\n```json\n[{\"Content\":\"in fence\"}]\n```\n");
  ASSERT_EQ(fenced.segments.size(), 1u);
  EXPECT_EQ(fenced.segments[0].content, "in fence");
}

TEST(OutputParser, SingleObjectWithoutArrayIsOneSegment) {
  const Parsed r = parse("{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"solo\"}");
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].content, "solo");
  EXPECT_FALSE(r.summary.truncated);
}

TEST(OutputParser, ContentOffsetsPointAtTheRawValue) {
  const Parsed r = parse(kTwo);
  ASSERT_EQ(r.segments.size(), 2u);
  for (const auto& s : r.segments) {
    EXPECT_EQ(kTwo.substr(s.content_begin, s.content_end - s.content_begin), s.content);
  }
}

TEST(OutputParser, ByteByByteFeedingEqualsOneShot) {
  const std::vector<std::string> inputs = {
      kTwo,
      "```json\n[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"f\\u00e9\\ud83d\\ude00 \\\"q\\\"\"}]\n```",
      "[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"one\"}, 7, {\"2.5,\"End\":3,\"Content\":\"two\"},"
      "{\"Start\":4,\"End\":5,\"Speaker\":\"N/A\",\"Content\":\"thr",
      "assistant\nno json at all",
      "Here: [{\"Content\":\"late\"}]",
      "{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"\xE4\xBD\xA0\xE5\xA5\xBD\"}",
  };
  for (const auto& text : inputs) {
    const Parsed a = parse(text);
    const Parsed b = parse_bytewise(text);
    ASSERT_EQ(a.segments.size(), b.segments.size()) << text;
    for (std::size_t i = 0; i < a.segments.size(); ++i) {
      EXPECT_EQ(a.segments[i].content, b.segments[i].content) << text;
      EXPECT_EQ(a.segments[i].start, b.segments[i].start) << text;
      EXPECT_EQ(a.segments[i].end, b.segments[i].end) << text;
      EXPECT_EQ(a.segments[i].speaker, b.segments[i].speaker) << text;
      EXPECT_EQ(a.segments[i].partial, b.segments[i].partial) << text;
      EXPECT_EQ(a.segments[i].content_begin, b.segments[i].content_begin) << text;
      EXPECT_EQ(a.segments[i].content_end, b.segments[i].content_end) << text;
    }
    EXPECT_EQ(a.content, b.content) << text;
    EXPECT_EQ(a.summary.failed, b.summary.failed) << text;
    EXPECT_EQ(a.summary.truncated, b.summary.truncated) << text;
    EXPECT_EQ(a.summary.malformed, b.summary.malformed) << text;
    EXPECT_EQ(a.summary.fallback_text, b.summary.fallback_text) << text;
  }
}

TEST(OutputParser, ObjectsAreEmittedAsSoonAsTheyClose) {
  OutputParser p;
  std::vector<ParseEvent> events;
  p.feed("<|im_start|>assistant\n[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"He", events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ParseEvent::Kind::kContent);
  EXPECT_EQ(events[0].content, "He");
  events.clear();
  p.feed("llo\"}", events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].content, "llo");
  EXPECT_EQ(events[1].kind, ParseEvent::Kind::kSegment);
  EXPECT_EQ(events[1].segment.content, "Hello");
  events.clear();
  p.feed(",{\"Start\":1", events);
  EXPECT_TRUE(events.empty());
}

}  // namespace
}  // namespace vv
