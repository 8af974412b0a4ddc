// Sampler: greedy ties, NaN handling, seeded reproducibility, temperature/top-k/top-p distributions.
#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "tests/unit/engine/sampling/log_probs.h"

namespace vv {
namespace {

using test::log_probs;

std::map<TokenId, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<TokenId, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits).id];
  return h;
}

TEST(Sampler, GreedyPicksArgmax) {
  Sampler s(SamplingParams{});
  const std::vector<float> logits{0.1f, -3.0f, 7.5f, 2.0f};
  EXPECT_EQ(s.sample(logits).id, 2);
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  Sampler s(SamplingParams{});
  const std::vector<float> logits{1.0f, 5.0f, 3.0f, 5.0f, 5.0f};
  EXPECT_EQ(s.sample(logits).id, 1);
}

TEST(Sampler, GreedyTreatsNaNAsMinusInfinity) {
  Sampler s(SamplingParams{});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits{nan, -1.0f, nan, 0.5f, nan};
  EXPECT_EQ(s.sample(logits).id, 3);
}

TEST(Sampler, GreedyTiesAcrossVectorLanesAndTailGoToLowestId) {
  Sampler s(SamplingParams{});
  for (std::size_t n : {1u, 7u, 8u, 9u, 19u, 64u, 1001u}) {
    std::vector<float> logits(n, -1.0f);
    logits[n - 1] = 4.0f;
    if (n > 3) logits[3] = 4.0f;
    EXPECT_EQ(s.sample(logits).id, n > 3 ? 3 : static_cast<TokenId>(n - 1)) << "n " << n;
  }
}

TEST(Sampler, GreedyOnARowWithoutFiniteValuesPicksIdZero) {
  Sampler s(SamplingParams{});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.sample(std::vector<float>{nan, -inf, nan}).id, 0);
  EXPECT_EQ(s.sample(std::vector<float>{nan, -inf, inf, inf}).id, 2);
}

TEST(Sampler, TopKOneIsGreedyEvenWithTemperature) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  Sampler s(p);
  const std::vector<float> logits{0.0f, 0.1f, 0.1f, -1.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits).id, 1);
}

TEST(Sampler, LogprobIsLogSoftmaxOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.logprobs = true;
  Sampler s(p);
  const std::vector<float> logits{1.0f, 2.0f, 0.5f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  for (int i = 0; i < 20; ++i) {
    const SampledToken t = s.sample(logits);
    EXPECT_NEAR(t.logprob, static_cast<double>(logits[t.id]) - std::log(z), 1e-6);
    EXPECT_LE(t.logprob, 0.0f);
  }
  EXPECT_NEAR(token_logprob(logits, 1), 2.0 - std::log(z), 1e-6);
}

TEST(Sampler, SameSeedReproducesTheSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.seed = 1234;
  std::vector<float> logits(1000);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 3);
  Sampler a(p), b(p);
  p.seed = 1235;
  Sampler c(p);
  int differ = 0;
  for (int i = 0; i < 300; ++i) {
    const TokenId ta = a.sample(logits).id;
    EXPECT_EQ(ta, b.sample(logits).id) << "draw " << i;
    differ += ta != c.sample(logits).id;
  }
  EXPECT_GT(differ, 100);  // another seed gives another stream
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  const std::vector<double> probs{0.5, 0.3, 0.15, 0.05};
  const int n = 40000;
  auto h = histogram(s, log_probs(probs), n);
  for (int id = 0; id < 4; ++id) {
    const double sd = std::sqrt(probs[id] * (1 - probs[id]) / n);
    EXPECT_NEAR(h[id] / double(n), probs[id], 5 * sd) << "id " << id;
  }
}

TEST(Sampler, TemperatureHalfSquaresTheOdds) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.seed = 8;
  Sampler s(p);
  const std::vector<double> probs{0.6, 0.4};  // at T=0.5: 0.36/0.52, 0.16/0.52
  const int n = 40000;
  auto h = histogram(s, log_probs(probs), n);
  const double want0 = 0.36 / 0.52;
  EXPECT_NEAR(h[0] / double(n), want0, 5 * std::sqrt(want0 * (1 - want0) / n));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  const std::vector<double> probs{0.05, 0.5, 0.15, 0.3};  // sorted: 1 (0.5), 3 (0.3), 2, 0
  for (auto [top_p, allowed] : std::vector<std::pair<float, std::set<TokenId>>>{
           {0.4f, {1}}, {0.75f, {1, 3}}, {0.85f, {1, 3, 2}}, {1.0f, {0, 1, 2, 3}}}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.seed = 99;
    Sampler s(p);
    auto h = histogram(s, log_probs(probs), 5000);
    std::set<TokenId> seen;
    for (auto& [id, count] : h) seen.insert(id);
    EXPECT_EQ(seen, allowed) << "top_p " << top_p;
  }
}

TEST(Sampler, TopPRenormalisesTheNucleusMass) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;  // nucleus {0.5, 0.3, 0.15}, renormalised by 0.95
  p.seed = 5;
  Sampler s(p);
  const int n = 40000;
  auto h = histogram(s, log_probs({0.5, 0.3, 0.15, 0.05}), n);
  EXPECT_EQ(h.count(3), 0u);
  for (auto [id, mass] : std::vector<std::pair<int, double>>{{0, 0.5}, {1, 0.3}, {2, 0.15}}) {
    const double want = mass / 0.95;
    EXPECT_NEAR(h[id] / double(n), want, 5 * std::sqrt(want * (1 - want) / n)) << "id " << id;
  }
}

TEST(Sampler, TopPOnFullVocabularyStaysInsideBruteForceNucleus) {
  const std::size_t vocab = 151936;
  std::vector<float> logits(vocab);
  std::uint64_t x = 42;
  for (auto& l : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = static_cast<float>((x >> 40) % 10000) / 700.0f;  // spread ~14 nats, many ties
  }
  const float top_p = 0.5f;
  // Brute force: sort all by probability (ties by id), keep the prefix reaching top_p.
  std::vector<TokenId> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](TokenId a, TokenId b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  double z = 0;
  const float mx = logits[order[0]];
  for (float l : logits) z += std::exp(double(l) - mx);
  std::set<TokenId> nucleus;
  double acc = 0;
  for (TokenId id : order) {
    nucleus.insert(id);
    acc += std::exp(double(logits[id]) - mx) / z;
    if (acc >= top_p) break;
  }
  ASSERT_GT(nucleus.size(), 64u);  // exercises the growing partition
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = top_p;
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const TokenId id = s.sample(logits).id;
    EXPECT_TRUE(nucleus.count(id)) << "token " << id << " outside the nucleus";
  }
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.seed = 11;
  Sampler s(p);
  auto h = histogram(s, log_probs({0.1, 0.35, 0.2, 0.35}), 3000);
  std::set<TokenId> seen;
  for (auto& [id, count] : h) seen.insert(id);
  EXPECT_EQ(seen, (std::set<TokenId>{1, 3}));
}

TEST(Sampler, ValidateRejectsOutOfRangeParams) {
  EXPECT_TRUE(validate(SamplingParams{}).is_ok());
  SamplingParams p;
  p.temperature = -0.1f;
  EXPECT_EQ(validate(p).code(), StatusCode::kInvalidArgument);
  p = {};
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.top_p = 1.5f;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.top_k = -2;
  EXPECT_FALSE(validate(p).is_ok());
  p = {};
  p.max_new_tokens = 0;
  EXPECT_NE(validate(p).message().find("max_new_tokens"), std::string::npos);
}

TEST(Sampler, RecoveryTemperatureFollowsApiRule) {
  EXPECT_FLOAT_EQ(recovery_temperature(0.0f), 0.3f);
  EXPECT_FLOAT_EQ(recovery_temperature(0.5f), 0.8f);
  EXPECT_FLOAT_EQ(recovery_temperature(0.9f), 1.0f);
}

TEST(Sampler, DefaultsAreGreedyWithBothStopIds) {
  const SamplingParams p;
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.stop_ids, (std::vector<TokenId>{151643, 151645}));
}

}  // namespace
}  // namespace vv
