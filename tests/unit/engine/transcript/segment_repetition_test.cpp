// SegmentRepetitionDetector: API.md §3.7 rule (a) and its normalisation.
#include "engine/transcript/segment_repetition.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vv {
namespace {

TEST(SegmentRepetition, NormalisationFoldsCaseDropsPunctuationCollapsesSpace) {
  EXPECT_EQ(normalise_for_repetition("  Hello,   WORLD!  "), "hello world");
  EXPECT_EQ(normalise_for_repetition("¿Qué tal?"), "qué tal");
  EXPECT_EQ(normalise_for_repetition("你好，世界。"), "你好世界");
}

TEST(SegmentRepetition, FiveIdenticalSegmentsAreCutToTheFirst) {
  // API.md C51: 5 identical 20-character segments → cut to one segment.
  SegmentRepetitionDetector d;
  const std::string line = "This is a repeated !";  // 20 characters
  ASSERT_EQ(line.size(), 20u);
  std::optional<std::size_t> hit;
  std::size_t at = 0;
  for (std::size_t i = 0; i < 5 && !hit; ++i) {
    hit = d.add(line);
    at = i;
  }
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(at, 3u);    // detected when the 4th consecutive copy completes
  EXPECT_EQ(*hit, 0u);  // keep segments [0, 0]: output is cut back to the end of segment 0
}

TEST(SegmentRepetition, VariantsThatNormaliseEquallyCount) {
  SegmentRepetitionDetector d;
  EXPECT_FALSE(d.add("Intro words here.").has_value());
  EXPECT_FALSE(d.add("Thank you very much.").has_value());
  EXPECT_FALSE(d.add("thank you very much").has_value());
  EXPECT_FALSE(d.add("THANK YOU, very much!").has_value());
  auto hit = d.add("Thank  you very much");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, 1u);
}

TEST(SegmentRepetition, ShortRepeatsAndInterruptedRunsDoNotFire) {
  SegmentRepetitionDetector d;
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(d.add("Yeah.").has_value());  // 4 characters
  SegmentRepetitionDetector e;
  const std::vector<std::string> lines{"I don't know about that", "I don't know about that",
                                       "I don't know about that", "Well, maybe.", "I don't know about that",
                                       "I don't know about that", "I don't know about that"};
  for (const auto& l : lines) EXPECT_FALSE(e.add(l).has_value()) << l;
  EXPECT_FALSE(e.add("[Music]").has_value());
}

}  // namespace
}  // namespace vv
