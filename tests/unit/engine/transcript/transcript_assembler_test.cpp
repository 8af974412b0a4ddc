// TranscriptAssembler: segments (trim, clamp, labels, empty skipped), the joined text with the CJK
// rule, stream-event invariants (API.md §4.3), the fallback segment and token attribution.
#include "engine/transcript/transcript_assembler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/transcript/segment_repetition.h"
#include "engine/transcript/utf8_text.h"

namespace vv {
namespace {

std::string obj(const std::string& start, const std::string& end, const std::string& speaker,
                const std::string& content) {
  std::string s = "{";
  if (!start.empty()) s += "\"Start\":" + start + ",";
  if (!end.empty()) s += "\"End\":" + end + ",";
  if (!speaker.empty()) s += "\"Speaker\":" + speaker + ",";
  return s + "\"Content\":\"" + content + "\"}";
}

std::string array(const std::vector<std::string>& objs) {
  std::string s = "<|im_start|>assistant\n[";
  for (std::size_t i = 0; i < objs.size(); ++i) s += (i ? "," : "") + objs[i];
  return s + "]<|im_end|>\n";
}

struct Assembled {
  Transcript transcript;
  std::vector<TranscriptEvent> events;
};

Assembled assemble(const std::vector<std::string>& pieces, double duration) {
  TranscriptAssembler a(duration);
  Assembled r;
  for (const auto& p : pieces) a.feed(p, r.events);
  a.finish(r.events);
  r.transcript = a.transcript();
  return r;
}

Assembled assemble(const std::string& text, double duration) { return assemble(std::vector<std::string>{text}, duration); }

Assembled assemble_bytewise(const std::string& text, double duration) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return assemble(pieces, duration);
}

// API.md §4.3 invariants: deltas non-empty, valid UTF-8, concatenating to text; all deltas of
// segment k before its segment event, which precedes any delta of k+1; segment text has no separator.
void expect_stream_invariants(const Assembled& r) {
  std::string joined;
  std::size_t next_segment = 0;
  for (const auto& e : r.events) {
    if (e.kind == TranscriptEvent::Kind::kDelta) {
      EXPECT_FALSE(e.delta.empty());
      EXPECT_EQ(utf8::sanitize(e.delta), e.delta) << "delta splits or breaks UTF-8";
      EXPECT_EQ(e.segment_index, next_segment);
      joined += e.delta;
    } else {
      EXPECT_EQ(e.segment_index, next_segment);
      ++next_segment;
    }
  }
  EXPECT_EQ(next_segment, r.transcript.segments.size());
  EXPECT_EQ(joined, r.transcript.text);
  for (const auto& s : r.transcript.segments) {
    EXPECT_FALSE(s.text.empty());
    EXPECT_EQ(std::string(utf8::trim(s.text)), s.text);
  }
}

TEST(TranscriptAssembler, SegmentsAreTrimmedJoinedAndLabelled) {
  const Assembled r = assemble(array({obj("0.0", "1.5", "0", "  Hello there. "), obj("1.6", "3", "1", "Hi!"),
                                obj("3.1", "4", "0", "Bye.")}),
                         5.0);
  ASSERT_EQ(r.transcript.segments.size(), 3u);
  EXPECT_EQ(r.transcript.segments[0].text, "Hello there.");
  EXPECT_EQ(r.transcript.segments[0].speaker, "A");
  EXPECT_EQ(r.transcript.segments[1].speaker, "B");
  EXPECT_EQ(r.transcript.segments[2].speaker, "A");
  EXPECT_EQ(r.transcript.segments[1].start, 1.6);
  EXPECT_EQ(r.transcript.segments[1].end, 3.0);
  EXPECT_EQ(r.transcript.text, "Hello there. Hi! Bye.");
  EXPECT_FALSE(r.transcript.parse_failed);
  EXPECT_FALSE(r.transcript.truncated);
  expect_stream_invariants(r);
}

TEST(TranscriptAssembler, SpeakerIdsMapToLettersInOrderOfFirstAppearance) {
  const Assembled r = assemble(array({obj("0", "1", "5", "a"), obj("1", "2", "2", "b"), obj("2", "3", "5", "c"),
                                obj("3", "4", "", "d"), obj("4", "5", "\"N/A\"", "e"), obj("5", "6", "7", "f")}),
                         10);
  std::string labels;
  for (const auto& s : r.transcript.segments) labels += s.speaker;
  EXPECT_EQ(labels, "ABAAAC");  // missing/"N/A" take the previous label and allocate none
}

TEST(TranscriptAssembler, FirstSegmentWithoutSpeakerIsAAndAllocatesNothing) {
  const Assembled r = assemble(array({obj("0", "1", "", "[Silence]"), obj("1", "2", "3", "x"), obj("2", "3", "4", "y")}), 5);
  std::string labels;
  for (const auto& s : r.transcript.segments) labels += s.speaker + ",";
  EXPECT_EQ(labels, "A,A,B,");
}

TEST(TranscriptAssembler, LabelsGoPastZToAA) {
  std::vector<std::string> objs;
  for (int i = 0; i < 28; ++i) objs.push_back(obj(std::to_string(i), std::to_string(i + 1), std::to_string(100 + i), "w"));
  const Assembled r = assemble(array(objs), 60);
  ASSERT_EQ(r.transcript.segments.size(), 28u);
  EXPECT_EQ(r.transcript.segments[25].speaker, "Z");
  EXPECT_EQ(r.transcript.segments[26].speaker, "AA");
  EXPECT_EQ(r.transcript.segments[27].speaker, "AB");
  EXPECT_EQ(speaker_label(701), "ZZ");
  EXPECT_EQ(speaker_label(702), "AAA");
}

TEST(TranscriptAssembler, TimesAreClampedToTheAudio) {
  const Assembled r = assemble(array({obj("-1", "2", "0", "a"), obj("3", "2.5", "0", "b"), obj("4", "99", "0", "c"),
                                obj("50", "60", "0", "d"), obj("", "", "0", "e")}),
                         7.52);
  ASSERT_EQ(r.transcript.segments.size(), 5u);
  const auto& s = r.transcript.segments;
  EXPECT_EQ(s[0].start, 0.0);
  EXPECT_EQ(s[0].end, 2.0);
  EXPECT_EQ(s[1].start, 3.0);
  EXPECT_EQ(s[1].end, 3.0);  // end < start → end = start
  EXPECT_EQ(s[2].end, 7.52);
  EXPECT_EQ(s[3].start, 7.52);
  EXPECT_EQ(s[3].end, 7.52);
  EXPECT_EQ(s[4].start, 7.52);  // no times: starts where the previous ended
  EXPECT_EQ(s[4].end, 7.52);
  for (const auto& seg : s) EXPECT_LE(seg.start, seg.end);
}

TEST(TranscriptAssembler, EmptyContentSegmentsAreSkipped) {
  const Assembled r = assemble(array({obj("0", "1", "0", "a"), obj("1", "2", "1", "  \\n "), obj("2", "3", "2", "b")}), 5);
  ASSERT_EQ(r.transcript.segments.size(), 2u);
  EXPECT_EQ(r.transcript.segments[1].text, "b");
  EXPECT_EQ(r.transcript.segments[1].speaker, "B");  // the skipped segment allocated no label
  EXPECT_EQ(r.transcript.text, "a b");
  expect_stream_invariants(r);
}

TEST(TranscriptAssembler, NoSpaceBetweenCjkSegments) {
  const Assembled r = assemble(array({obj("0", "1", "0", "你好。"), obj("1", "2", "0", "世界"), obj("2", "3", "0", "OK"),
                                obj("3", "4", "0", "fine"), obj("4", "5", "0", "日本"), obj("5", "6", "0", "x")}),
                         9);
  EXPECT_EQ(r.transcript.text, "你好。世界OK fine日本x");
  expect_stream_invariants(r);
}

TEST(TranscriptAssembler, InnerWhitespaceAndNewlinesAreKept) {
  const Assembled r = assemble(array({obj("0", "1", "0", " two  spaces\\nline ")}), 2);
  ASSERT_EQ(r.transcript.segments.size(), 1u);
  EXPECT_EQ(r.transcript.segments[0].text, "two  spaces\nline");
}

TEST(TranscriptAssembler, ByteByByteStreamingKeepsTheInvariantsAndMatchesOneShot) {
  const std::string text = array({obj("0", "1.5", "0", " Good morning, "), obj("1.6", "2", "1", "  "),
                                  obj("2", "3", "1", "caf\\u00e9 \xE4\xBD\xA0\xE5\xA5\xBD \\ud83d\\ude00"),
                                  obj("3", "4", "", "[Silence]"), obj("4", "5", "0", "\xE4\xB8\x96\xE7\x95\x8C")});
  const Assembled one = assemble(text, 6);
  const Assembled bytes = assemble_bytewise(text, 6);
  expect_stream_invariants(one);
  expect_stream_invariants(bytes);
  EXPECT_EQ(one.transcript.text, bytes.transcript.text);
  ASSERT_EQ(one.transcript.segments.size(), bytes.transcript.segments.size());
  for (std::size_t i = 0; i < one.transcript.segments.size(); ++i) {
    EXPECT_EQ(one.transcript.segments[i].text, bytes.transcript.segments[i].text);
    EXPECT_EQ(one.transcript.segments[i].speaker, bytes.transcript.segments[i].speaker);
    EXPECT_EQ(one.transcript.segments[i].start, bytes.transcript.segments[i].start);
  }
  EXPECT_EQ(one.transcript.text, "Good morning, caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 [Silence]\xE4\xB8\x96\xE7\x95\x8C");
}

TEST(TranscriptAssembler, DeltasArriveBeforeTheSegmentCloses) {
  TranscriptAssembler a(10);
  std::vector<TranscriptEvent> ev;
  a.feed("assistant\n[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"Good ", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].delta, "Good");  // the trailing space waits: segments are trimmed
  ev.clear();
  a.feed("morning\"},{\"Start\":1,\"End\":2,\"Speaker\":1,\"Content\":\"Hi", ev);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].delta, " morning");
  EXPECT_EQ(ev[1].kind, TranscriptEvent::Kind::kSegment);
  EXPECT_EQ(ev[2].delta, " Hi");  // the separator travels with the next segment's first delta
  EXPECT_EQ(ev[2].segment_index, 1u);
}

TEST(TranscriptAssembler, TruncatedOutputKeepsThePartialLastSegment) {
  const Assembled r = assemble("[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"one\"},"
                         "{\"Start\":1.5,\"End\":2.5,\"Speaker\":1,\"Content\":\"two thr",
                         4);
  ASSERT_EQ(r.transcript.segments.size(), 2u);
  EXPECT_EQ(r.transcript.segments[1].text, "two thr");
  EXPECT_EQ(r.transcript.segments[1].end, 2.5);
  EXPECT_TRUE(r.transcript.truncated);
  EXPECT_FALSE(r.transcript.parse_failed);
  EXPECT_EQ(r.transcript.text, "one two thr");
  expect_stream_invariants(r);
}

TEST(TranscriptAssembler, CutOffMultibyteCharacterAtTheEndBecomesReplacement) {
  const Assembled r = assemble(std::string("[{\"Content\":\"ab\xE4\xBD"), 4);
  ASSERT_EQ(r.transcript.segments.size(), 1u);
  EXPECT_EQ(r.transcript.segments[0].text, "ab\xEF\xBF\xBD");
  expect_stream_invariants(r);
}

TEST(TranscriptAssembler, UnparseableOutputBecomesOneFallbackSegment) {
  const Assembled r = assemble("<|im_start|>assistant\n Just words, no array. <|im_end|>", 3.25);
  ASSERT_EQ(r.transcript.segments.size(), 1u);
  EXPECT_TRUE(r.transcript.parse_failed);
  EXPECT_EQ(r.transcript.segments[0].text, "Just words, no array.");
  EXPECT_EQ(r.transcript.segments[0].start, 0.0);
  EXPECT_EQ(r.transcript.segments[0].end, 3.25);
  EXPECT_EQ(r.transcript.segments[0].speaker, "A");
  EXPECT_EQ(r.transcript.text, "Just words, no array.");
  ASSERT_EQ(r.events.size(), 2u);  // one delta, then one segment event
  EXPECT_EQ(r.events[0].delta, "Just words, no array.");
  EXPECT_EQ(r.events[1].kind, TranscriptEvent::Kind::kSegment);
}

TEST(TranscriptAssembler, EmptyUnparseableOutputHasNoSegment) {
  const Assembled r = assemble("<|im_start|>assistant\n   ", 3);
  EXPECT_TRUE(r.transcript.segments.empty());
  EXPECT_TRUE(r.transcript.text.empty());
  EXPECT_TRUE(r.events.empty());
}

TEST(TranscriptAssembler, InvalidUtf8InFallbackIsRepaired) {
  const Assembled r = assemble(std::string("bad \xFF byte"), 3);
  ASSERT_EQ(r.transcript.segments.size(), 1u);
  EXPECT_EQ(r.transcript.segments[0].text, "bad \xEF\xBF\xBD byte");
}

TEST(TranscriptAssembler, TokenBytesMapToTheSegmentWhoseContentTheyOverlap) {
  const std::string head = "<|im_start|>assistant\n[{\"Start\":0,\"End\":1,\"Speaker\":0,\"Content\":\"";
  const std::string text = head + "ab\"},{\"Start\":1,\"End\":2,\"Speaker\":1,\"Content\":\"cd\"}]";
  TranscriptAssembler a(3);
  std::vector<TranscriptEvent> ev;
  a.feed(text, ev);
  a.finish(ev);
  const std::size_t ab = head.size();
  EXPECT_FALSE(a.segment_at(0, 12).has_value());           // the header
  EXPECT_EQ(a.segment_at(ab - 2, ab + 1), 0u);              // straddles syntax and content
  EXPECT_EQ(a.segment_at(ab + 1, ab + 2), 0u);
  EXPECT_FALSE(a.segment_at(ab + 2, ab + 4).has_value());  // "},
  const std::size_t cd = text.find("cd");
  EXPECT_EQ(a.segment_at(cd, cd + 2), 1u);
  EXPECT_FALSE(a.segment_at(cd + 2, text.size()).has_value());
}

TEST(TranscriptAssembler, FallbackAttributesEveryAnswerToken) {
  TranscriptAssembler a(3);
  std::vector<TranscriptEvent> ev;
  a.feed("<|im_start|>assistant\nfree text", ev);
  a.finish(ev);
  EXPECT_FALSE(a.segment_at(0, 12).has_value());
  EXPECT_EQ(a.segment_at(22, 26), 0u);
}

}  // namespace
}  // namespace vv

namespace vv {
namespace {

TEST(TranscriptAssembler, RepeatedSegmentsAreCutBackToTheFirstOfTheRun) {
  // API.md C51: 5 identical 20-character segments → one segment (rule a), finish "repetition".
  std::vector<std::string> objs;
  for (int i = 0; i < 5; ++i) {
    objs.push_back(obj(std::to_string(i) + ".0", std::to_string(i) + ".9", "0", "This is a repeated !"));
  }
  const std::string text = array(objs);
  TranscriptAssembler a(10);
  SegmentRepetitionDetector detector;
  std::optional<std::size_t> cut_after;
  std::vector<TranscriptEvent> ev;
  for (std::size_t i = 0; i < text.size() && !cut_after; ++i) {
    ev.clear();
    a.feed(text.substr(i, 1), ev);
    for (const auto& e : ev) {
      if (e.kind != TranscriptEvent::Kind::kSegment) continue;
      if (auto first = detector.add(a.transcript().segments[e.segment_index].text)) cut_after = first;
    }
  }
  ASSERT_TRUE(cut_after.has_value());
  EXPECT_EQ(*cut_after, 0u);
  const auto offset = a.segment_end_offset(*cut_after);
  ASSERT_TRUE(offset.has_value());
  EXPECT_EQ(text[*offset - 1], '}');
  EXPECT_EQ(a.segments_ending_by(*offset), 1u);
  // Resume from the cut: a fresh assembler fed the kept text holds exactly the first segment.
  TranscriptAssembler kept(10);
  std::vector<TranscriptEvent> ev2;
  kept.feed(text.substr(0, *offset), ev2);
  kept.finish(ev2);
  kept.transcript().finish_reason = FinishReason::kRepetition;
  ASSERT_EQ(kept.transcript().segments.size(), 1u);
  EXPECT_EQ(kept.transcript().text, "This is a repeated !");
  EXPECT_TRUE(kept.transcript().truncated);  // the array was not closed: the caller knows why
}

TEST(TranscriptAssembler, SegmentEndOffsetsFollowEachObject) {
  const std::string text = array({obj("0", "1", "0", "a"), obj("1", "2", "1", "  "), obj("2", "3", "1", "b")});
  TranscriptAssembler a(5);
  std::vector<TranscriptEvent> ev;
  a.feed(text, ev);
  a.finish(ev);
  ASSERT_EQ(a.transcript().segments.size(), 2u);
  const std::size_t first_end = text.find('}') + 1;
  const std::size_t last_end = text.rfind('}') + 1;
  EXPECT_EQ(a.segment_end_offset(0), first_end);
  EXPECT_EQ(a.segment_end_offset(1), last_end);
  EXPECT_FALSE(a.segment_end_offset(2).has_value());
  EXPECT_EQ(a.segments_ending_by(first_end - 1), 0u);
  EXPECT_EQ(a.segments_ending_by(last_end - 1), 1u);
  EXPECT_EQ(a.segments_ending_by(text.size()), 2u);
}

}  // namespace
}  // namespace vv
