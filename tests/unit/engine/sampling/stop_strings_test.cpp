// StopStringMatcher: stop strings end the text before them, across piece boundaries.
#include "engine/sampling/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vv {
namespace {

std::pair<std::string, bool> run(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  bool stopped = false;
  for (const auto& p : pieces) {
    auto step = m.feed(p);
    out += step.text;
    if (step.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) out += m.flush();
  return {out, stopped};
}

TEST(StopStrings, TextBeforeTheStopStringIsEmittedAndTheStopIsNot) {
  StopStringMatcher m({"END"});
  auto [text, stopped] = run(m, {"hello E", "N", "D world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hello ");
}

TEST(StopStrings, PossiblePrefixesAreHeldBackThenReleased) {
  StopStringMatcher m({"###"});
  auto a = m.feed("value #");
  EXPECT_EQ(a.text, "value ");
  auto b = m.feed("# not");
  EXPECT_EQ(b.text, "## not");
  EXPECT_FALSE(b.stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, EarliestOfSeveralStopsWins) {
  StopStringMatcher m({"world", "lo w"});
  auto [text, stopped] = run(m, {"hello world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hel");
}

TEST(StopStrings, ByteByByteEqualsOneShot) {
  const std::string input = "a\xE4\xBD\xA0 stop\xE5\xA5\xBD here STOP\xE5\xA5\xBD tail";
  StopStringMatcher one({"STOP\xE5\xA5\xBD", "zz"});
  auto [t1, s1] = run(one, {input});
  std::vector<std::string> bytes;
  for (char c : input) bytes.emplace_back(1, c);
  StopStringMatcher many({"STOP\xE5\xA5\xBD", "zz"});
  auto [t2, s2] = run(many, bytes);
  EXPECT_TRUE(s1);
  EXPECT_TRUE(s2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(t1, "a\xE4\xBD\xA0 stop\xE5\xA5\xBD here ");
}

TEST(StopStrings, NoStopFlushesEverything) {
  StopStringMatcher m({"xyz"});
  auto [text, stopped] = run(m, {"ends with x", "y"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(text, "ends with xy");
  StopStringMatcher none({});
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.feed("abc").text, "abc");
}

}  // namespace
}  // namespace vv
