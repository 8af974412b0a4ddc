// Sampler chat extensions (API.md §6.1): min_p, repetition/presence/frequency penalties,
// logit_bias, top_logprobs, top_k = -1.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "engine/sampling/sampler.h"
#include "tests/unit/engine/sampling/log_probs.h"

namespace vv {
namespace {

using test::log_probs;

TEST(SamplerExtensions, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.35f;  // keeps p >= 0.175: {0.5, 0.3}
  p.seed = 17;
  for (int top_k : {0, 3}) {
    p.top_k = top_k;
    Sampler s(p);
    std::set<TokenId> seen;
    for (int i = 0; i < 3000; ++i) seen.insert(s.sample(log_probs({0.5, 0.3, 0.15, 0.05})).id);
    EXPECT_EQ(seen, (std::set<TokenId>{0, 1})) << "top_k " << top_k;
  }
}

TEST(SamplerExtensions, TopKMinusOneMeansNoCut) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = -1;
  p.seed = 2;
  EXPECT_TRUE(validate(p).is_ok());
  Sampler s(p);
  std::set<TokenId> seen;
  for (int i = 0; i < 3000; ++i) seen.insert(s.sample(log_probs({0.4, 0.3, 0.2, 0.1})).id);
  EXPECT_EQ(seen.size(), 4u);
}

TEST(SamplerExtensions, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  {
    Sampler s(p);
    const TokenId prompt[] = {0};
    s.observe_prompt(prompt);
    EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.9f, -1.0f}).id, 1);  // 2.0 / 1.1 < 1.9
  }
  {
    Sampler s(p);
    const TokenId prompt[] = {0};
    s.observe_prompt(prompt);
    EXPECT_EQ(s.sample(std::vector<float>{-1.0f, -1.05f}).id, 1);  // -1.0 * 1.1 < -1.05
  }
  {
    Sampler s(p);  // generated tokens count too
    const std::vector<float> logits{2.0f, 1.9f};
    EXPECT_EQ(s.sample(logits).id, 0);
    EXPECT_EQ(s.sample(logits).id, 1);
  }
}

TEST(SamplerExtensions, PresenceAndFrequencyPenalisePreviouslyGeneratedTokens) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  Sampler s(p);
  const std::vector<float> logits{1.0f, 0.8f, 0.1f};
  EXPECT_EQ(s.sample(logits).id, 0);
  EXPECT_EQ(s.sample(logits).id, 1);  // 0 now at 0.5
  EXPECT_EQ(s.sample(logits).id, 0);  // 0.5 vs 0.3: presence does not grow with the count
  SamplingParams f;
  f.frequency_penalty = 0.15f;
  Sampler t(f);
  std::vector<TokenId> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(t.sample(logits).id);
  // 0: 1.0 → 0.85 → 0.70; 1: 0.8 → 0.65.
  EXPECT_EQ(picks, (std::vector<TokenId>{0, 0, 1, 0}));
}

TEST(SamplerExtensions, PenaltiesCountTokensObservedFromElsewhere) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  Sampler s(p);
  s.observe(0);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 0.5f}).id, 1);
}

TEST(SamplerExtensions, LogitBiasIsAddedBeforePicking) {
  SamplingParams p;
  p.logit_bias = {{2, 5.0f}};
  Sampler s(p);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 1.0f, -1.0f}).id, 2);
  SamplingParams ban;
  ban.logit_bias = {{0, -100.0f}, {99, 3.0f}};  // an id beyond the row is ignored
  Sampler b(ban);
  EXPECT_EQ(b.sample(std::vector<float>{3.0f, 1.0f, -1.0f}).id, 1);
}

TEST(SamplerExtensions, LogprobsComeFromTheRawLogitsNotThePenalisedOnes) {
  SamplingParams p;
  p.logit_bias = {{1, 10.0f}};
  p.logprobs = true;
  Sampler s(p);
  const std::vector<float> logits{1.0f, 0.0f};
  const SampledToken t = s.sample(logits);
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, 0.0 - std::log(std::exp(1.0) + 1.0), 1e-6);
}

TEST(SamplerExtensions, TopLogprobsAreTheMostLikelyInOrder) {
  SamplingParams p;
  p.top_logprobs = 3;
  Sampler s(p);
  const std::vector<float> logits{0.5f, 2.0f, 1.0f, 2.0f, -3.0f};
  const SampledToken t = s.sample(logits);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].id, 1);  // tie with 3: lower id first
  EXPECT_EQ(t.top_logprobs[1].id, 3);
  EXPECT_EQ(t.top_logprobs[2].id, 2);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(t.top_logprobs[2].logprob, 1.0 - std::log(z), 1e-6);
  EXPECT_EQ(top_logprobs(logits, 10).size(), logits.size());
}

TEST(SamplerExtensions, ValidateChecksTheExtensionRanges) {
  SamplingParams p;
  p.top_k = -2;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.top_logprobs = 21;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.min_p = 1.5f;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.temperature = 2.0f;
  p.min_p = 0.1f;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logit_bias = {{5, -100.0f}};
  p.top_logprobs = 20;
  EXPECT_TRUE(validate(p).is_ok());
}

}  // namespace
}  // namespace vv
