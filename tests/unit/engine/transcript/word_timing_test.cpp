// Word timestamps by interpolation (API.md §3.4).
#include "engine/transcript/word_timing.h"

#include <gtest/gtest.h>

namespace vv {
namespace {

Segment seg(double start, double end, const std::string& text) {
  Segment s;
  s.start = start;
  s.end = end;
  s.text = text;
  return s;
}

TEST(WordTiming, SpanIsSharedByCodePointCount) {
  // "Good" 4, "morning," 8, "all." 4 → 16 characters over [0, 1.6].
  const auto w = interpolate_words({seg(0.0, 1.6, "Good morning, all.")});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].word, "Good");
  EXPECT_DOUBLE_EQ(w[0].start, 0.0);
  EXPECT_DOUBLE_EQ(w[0].end, 0.4);
  EXPECT_EQ(w[1].word, "morning");  // trailing punctuation stripped, still counted for timing
  EXPECT_DOUBLE_EQ(w[1].start, 0.4);
  EXPECT_DOUBLE_EQ(w[1].end, 1.2);
  EXPECT_EQ(w[2].word, "all");
  EXPECT_DOUBLE_EQ(w[2].start, 1.2);
  EXPECT_DOUBLE_EQ(w[2].end, 1.6);
}

TEST(WordTiming, PunctuationOnlyWordsAreDroppedButKeepTheirTime) {
  const auto w = interpolate_words({seg(1.0, 2.0, "yes — no")});  // 3 + 1 + 2 = 6 characters
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].word, "yes");
  EXPECT_DOUBLE_EQ(w[0].end, 1.5);
  EXPECT_EQ(w[1].word, "no");
  EXPECT_NEAR(w[1].start, 1.0 + 4.0 / 6.0, 1e-3);
  EXPECT_DOUBLE_EQ(w[1].end, 2.0);
}

TEST(WordTiming, CjkSegmentWithoutSpacesIsSplitPerCharacter) {
  const auto w = interpolate_words({seg(0.0, 2.0, "你好世界")});
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].word, "你");
  EXPECT_DOUBLE_EQ(w[1].start, 0.5);
  EXPECT_EQ(w[3].word, "界");
  EXPECT_DOUBLE_EQ(w[3].end, 2.0);
}

TEST(WordTiming, WordsAreOrderedNonOverlappingAndInsideTheirSegment) {
  const auto w = interpolate_words({seg(0.0, 2.48, "Good morning, thanks for joining the call."),
                                    seg(2.8, 5.1, "Happy to be here. Shall we start?")});
  ASSERT_EQ(w.size(), 14u);
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_LE(w[i].start, w[i].end);
    if (i) {
      EXPECT_LE(w[i - 1].end, w[i].start);
    }
  }
  EXPECT_DOUBLE_EQ(w[0].end, 0.276);  // rounded to the millisecond
  EXPECT_DOUBLE_EQ(w[7].start, 2.8);
  EXPECT_DOUBLE_EQ(w.back().end, 5.1);
}

}  // namespace
}  // namespace vv
