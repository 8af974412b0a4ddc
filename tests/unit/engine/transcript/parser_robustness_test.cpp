// Robustness: randomly damaged model outputs, fed in random pieces, never break the assembler:
// the result equals one-shot feeding, deltas concatenate to the text and are valid UTF-8, and
// segment times stay inside the audio.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/transcript/transcript_assembler.h"
#include "engine/transcript/utf8_text.h"

namespace vv {
namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed * 2654435761u + 1) {}
  std::uint64_t next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  std::size_t below(std::size_t n) { return n ? next() % n : 0; }

 private:
  std::uint64_t s_;
};

std::string random_output(Rng& r) {
  static const char* kPieces[] = {"hello", " ", "\\\"", "[", "]", "{", "}", "\\\\", "\\n", "\\u00e9",
                                  "\\ud83d\\ude00", "\xE4\xBD\xA0", ",", ":", "Speaker", "\\u12"};
  static const char* kKeys[] = {"Start", "End", "Speaker", "Content", "Start time", "Text", "x"};
  std::string s = r.below(2) ? "<|im_start|>assistant\n" : "";
  if (r.below(5) == 0) s += "```json\n";
  s += "[";
  const std::size_t n = r.below(6);
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ",";
    s += "{";
    const std::size_t keys = 1 + r.below(5);
    for (std::size_t k = 0; k < keys; ++k) {
      if (k) s += ",";
      const char* key = kKeys[r.below(7)];
      s += std::string("\"") + key + "\":";
      if (std::string(key) == "Content" || std::string(key) == "Text" || r.below(4) == 0) {
        s += "\"";
        const std::size_t parts = r.below(8);
        for (std::size_t p = 0; p < parts; ++p) s += kPieces[r.below(16)];
        s += "\"";
      } else {
        s += std::to_string(r.below(100)) + (r.below(2) ? ".5" : "");
      }
    }
    s += "}";
  }
  s += "]<|im_end|>\n";
  // Damage: delete, insert or replace a few bytes, or cut the tail.
  const std::size_t edits = r.below(4);
  for (std::size_t e = 0; e < edits && !s.empty(); ++e) {
    const std::size_t at = r.below(s.size());
    switch (r.below(4)) {
      case 0: s.erase(at, 1 + r.below(3)); break;
      case 1: s.insert(at, 1, "\"{}[],:\\ x\xC3\xFF"[r.below(13)]); break;
      case 2: s[at] = static_cast<char>(r.below(256)); break;
      default: s.resize(at); break;
    }
  }
  return s;
}

struct Outcome {
  Transcript transcript;
  std::string deltas;
  bool deltas_valid = true;
};

Outcome run(const std::string& text, Rng* pieces, double duration) {
  TranscriptAssembler a(duration);
  std::vector<TranscriptEvent> ev;
  if (!pieces) {
    a.feed(text, ev);
  } else {
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = 1 + pieces->below(7);
      a.feed(std::string_view(text).substr(i, n), ev);
      i += n;
    }
  }
  a.finish(ev);
  Outcome o;
  o.transcript = a.transcript();
  for (const auto& e : ev) {
    if (e.kind != TranscriptEvent::Kind::kDelta) continue;
    o.deltas += e.delta;
    o.deltas_valid &= !e.delta.empty() && utf8::sanitize(e.delta) == e.delta;
  }
  return o;
}

TEST(ParserRobustness, DamagedOutputsInRandomPiecesMatchOneShotAndKeepInvariants) {
  Rng r(20261202);
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = random_output(r);
    const double duration = 1.0 + static_cast<double>(r.below(100));
    const Outcome one = run(text, nullptr, duration);
    const Outcome split = run(text, &r, duration);
    SCOPED_TRACE(text);
    ASSERT_EQ(one.transcript.text, split.transcript.text);
    ASSERT_EQ(one.transcript.segments.size(), split.transcript.segments.size());
    for (std::size_t i = 0; i < one.transcript.segments.size(); ++i) {
      const Segment& a = one.transcript.segments[i];
      const Segment& b = split.transcript.segments[i];
      ASSERT_EQ(a.text, b.text);
      ASSERT_EQ(a.speaker, b.speaker);
      ASSERT_EQ(a.start, b.start);
      ASSERT_EQ(a.end, b.end);
      ASSERT_FALSE(a.text.empty());
      ASSERT_LE(0.0, a.start);
      ASSERT_LE(a.start, a.end);
      ASSERT_LE(a.end, duration);
    }
    ASSERT_EQ(one.transcript.parse_failed, split.transcript.parse_failed);
    ASSERT_EQ(one.deltas, one.transcript.text);
    ASSERT_EQ(split.deltas, split.transcript.text);
    ASSERT_TRUE(one.deltas_valid);
    ASSERT_TRUE(split.deltas_valid);
    ASSERT_EQ(utf8::sanitize(one.transcript.text), one.transcript.text);
  }
}

}  // namespace
}  // namespace vv
