// RepetitionDetector: API.md §3.7 rule (b) — fires on a degenerate loop, never on normal output.
#include "engine/sampling/repetition_detector.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace vv {
namespace {

// Feeds ids; returns the 1-based count at which the detector first fired (0 = never) and the loop.
std::pair<std::int64_t, RepetitionLoop> run(RepetitionDetector& d, const std::vector<TokenId>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (auto loop = d.append(ids[i])) return {static_cast<std::int64_t>(i + 1), *loop};
  }
  return {0, {}};
}

TEST(RepetitionDetector, FiresOnAPeriodicLoopAtTheNextCheckPoint) {
  std::vector<TokenId> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(1000 + i);  // normal prefix
  const std::vector<TokenId> pattern{5, 9, 13, 9, 21, 30, 2};
  for (int r = 0; r < 60; ++r) ids.insert(ids.end(), pattern.begin(), pattern.end());
  RepetitionDetector d;
  auto [at, loop] = run(d, ids);
  // Periodic from index 100 on; 256 periodic tokens end at index 355 (count 356); next check 384.
  EXPECT_EQ(at, 384);
  EXPECT_EQ(loop.period, 7);
  EXPECT_EQ(loop.window_start, 384 - 256);
}

TEST(RepetitionDetector, FindsPeriodsUpTo64ButNotBeyond) {
  for (int period : {1, 2, 64, 65}) {
    std::vector<TokenId> ids;
    for (int i = 0; i < 1024; ++i) ids.push_back(i % period);
    RepetitionDetector d;
    auto [at, loop] = run(d, ids);
    if (period <= 64) {
      EXPECT_EQ(at, 256) << "period " << period;
      EXPECT_EQ(loop.period, period);
    } else {
      EXPECT_EQ(at, 0) << "period " << period;
    }
  }
}

TEST(RepetitionDetector, NeedsTheWholeWindowPeriodic) {
  // At check point 320 the window is tokens [64, 320): a lone 1 then 255 sevens — not periodic.
  // At 384 the window is all sevens.
  std::vector<TokenId> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(500 + i);
  ids.push_back(1);
  ids.insert(ids.end(), 384 - 65, 7);
  RepetitionDetector d;
  auto [at, loop] = run(d, ids);
  EXPECT_EQ(at, 384);
  EXPECT_EQ(loop.period, 1);
  EXPECT_EQ(loop.window_start, 128);
}

TEST(RepetitionDetector, CheckEvaluatesBetweenCheckPoints) {
  RepetitionDetector d;
  for (int i = 0; i < 300; ++i) d.append(i % 3);
  EXPECT_TRUE(d.check().has_value());
  EXPECT_EQ(d.check()->period, 3);
  d.reset();
  EXPECT_EQ(d.generated(), 0);
  EXPECT_FALSE(d.check().has_value());
}

// A long, realistic transcript: JSON segments with advancing timestamps, repeated words and
// phrases ("no no no no", "thank you thank you"), identical short segments ("[Music]") spaced apart.
std::vector<TokenId> normal_transcript_tokens() {
  std::vector<std::string> pieces;
  const std::vector<std::string> lines{
      "no no no no no I said no", "thank you thank you thank you so much", "yeah", "yeah",
      "okay so let's go over the the the numbers again", "[Music]", "ha ha ha ha ha ha",
      "one two three four five six seven eight", "right right right", "[Music]", "[Music]"};
  double t = 0.0;
  for (int seg = 0; seg < 400; ++seg) {
    char head[96];
    std::snprintf(head, sizeof head, "{\"Start\":%.2f,\"End\":%.2f,\"Speaker\":%d,\"Content\":\"", t,
                  t + 1.37, seg % 3);
    t += 1.41;
    std::string s = head;
    for (std::size_t i = 0; i < s.size(); i += 3) pieces.push_back(s.substr(i, 3));
    const std::string& line = lines[static_cast<std::size_t>(seg) % lines.size()];
    std::size_t b = 0;
    while (b <= line.size()) {
      std::size_t e = line.find(' ', b);
      if (e == std::string::npos) e = line.size();
      std::string word = b ? std::string(" ") : std::string();
      word.append(line, b, e - b);
      pieces.push_back(word);
      b = e + 1;
    }
    pieces.push_back("\"},");
  }
  std::vector<TokenId> ids;
  for (const auto& p : pieces) ids.push_back(static_cast<TokenId>(std::hash<std::string>{}(p) % 150000));
  return ids;
}

TEST(RepetitionDetector, NeverFiresOnANormalLongTranscriptWithRepeatedWords) {
  const auto ids = normal_transcript_tokens();
  ASSERT_GT(ids.size(), 8000u);
  RepetitionDetector d;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ASSERT_FALSE(d.append(ids[i]).has_value()) << "fired at token " << i;
    ASSERT_FALSE(d.check().has_value()) << "periodic at token " << i;
  }
}

}  // namespace
}  // namespace vv
