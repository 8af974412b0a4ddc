// StopCondition: stop ids, ignore_eos, max_new_tokens → length.
#include "engine/sampling/stop_condition.h"

#include <gtest/gtest.h>

namespace vv {
namespace {

TEST(StopCondition, EndOfTextAndImEndStopByDefault) {
  StopCondition a(SamplingParams{});
  EXPECT_EQ(a.append(100), FinishReason::kNone);
  EXPECT_EQ(a.append(151643), FinishReason::kStop);
  StopCondition b(SamplingParams{});
  EXPECT_EQ(b.append(151645), FinishReason::kStop);
  EXPECT_TRUE(b.is_stop_id(151645));
  EXPECT_FALSE(b.is_stop_id(151644));  // <|im_start|> is not a stop id
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
}

TEST(StopCondition, MaxNewTokensFinishesWithLength) {
  SamplingParams p;
  p.max_new_tokens = 3;
  StopCondition s(p);
  EXPECT_EQ(s.append(1), FinishReason::kNone);
  EXPECT_EQ(s.append(2), FinishReason::kNone);
  EXPECT_EQ(s.append(3), FinishReason::kLength);
  EXPECT_EQ(s.generated(), 3);
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
}

TEST(StopCondition, StopIdOnTheLastAllowedTokenIsStop) {
  SamplingParams p;
  p.max_new_tokens = 2;
  StopCondition s(p);
  EXPECT_EQ(s.append(1), FinishReason::kNone);
  EXPECT_EQ(s.append(151645), FinishReason::kStop);
}

TEST(StopCondition, IgnoreEosRunsToLength) {
  SamplingParams p;
  p.max_new_tokens = 3;
  p.ignore_eos = true;
  StopCondition s(p);
  EXPECT_EQ(s.append(151643), FinishReason::kNone);
  EXPECT_EQ(s.append(151645), FinishReason::kNone);
  EXPECT_TRUE(s.is_stop_id(151643));  // still hidden from output
  EXPECT_EQ(s.append(151643), FinishReason::kLength);
}

TEST(StopCondition, CustomStopIdsReplaceTheDefaults) {
  SamplingParams p;
  p.stop_ids = {7};
  StopCondition s(p);
  EXPECT_EQ(s.append(151643), FinishReason::kNone);
  EXPECT_EQ(s.append(7), FinishReason::kStop);
}

}  // namespace
}  // namespace vv
