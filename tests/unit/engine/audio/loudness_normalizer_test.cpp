// Loudness normalisation as MODEL.md §4.2 specifies it, checked against a float64 evaluation of
// the formula: target RMS, the peak guard (divide, never clip) and the all-zero clip.
#include "engine/audio/loudness_normalizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace vv::audio {
namespace {

std::vector<float> speechish(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(0.2 * std::sin(0.01 * i) * std::sin(0.0003 * i));
  return x;
}

TEST(LoudnessNormalizer, ScalesToMinus25DbfsRmsWithinFloat32Rounding) {
  std::vector<float> x = speechish(48000);
  const std::vector<float> before = x;
  EXPECT_FALSE(normalize_loudness(x));
  double sum = 0.0;
  for (float v : before) sum += static_cast<double>(v) * v;
  const double scale = 0.056234132519034905 / (std::sqrt(sum / before.size()) + 1e-6);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(x[i], before[i] * scale, 2.5e-7 * std::fabs(before[i] * scale) + 1e-12) << "sample " << i;
  }
  double after = 0.0;
  for (float v : x) after += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(after / x.size()), 0.056234132519034905, 1e-6);
}

TEST(LoudnessNormalizer, PeakGuardDividesByPeakPlusEpsInsteadOfClipping) {
  std::vector<float> x(10000, 0.0f);
  x[0] = 0.5f;  // a lone spike: the RMS is tiny, so the gain pushes the peak far above 1
  x[1] = -0.25f;
  x[2] = 0.001f;
  EXPECT_TRUE(normalize_loudness(x));
  EXPECT_LT(std::fabs(x[0]), 1.0f);
  EXPECT_NEAR(x[0], 1.0f, 1e-5);
  EXPECT_NEAR(x[1] / x[0], -0.5f, 1e-6);  // shape kept
  EXPECT_NEAR(x[2] / x[0], 0.002f, 1e-6);
}

TEST(LoudnessNormalizer, OtherTargetAndEpsAreHonoured) {
  std::vector<float> x = speechish(24000);
  std::vector<float> y = x;
  normalize_loudness(x, {-20.0, 1e-6});
  normalize_loudness(y, {-26.0, 1e-6});
  EXPECT_NEAR(x[1234] / y[1234], std::pow(10.0, 6.0 / 20.0), 1e-5);
}

TEST(LoudnessNormalizer, AllZeroClipStaysZero) {
  std::vector<float> x(5000, 0.0f);
  EXPECT_FALSE(normalize_loudness(x));
  for (float v : x) ASSERT_EQ(v, 0.0f);
  std::vector<float> empty;
  EXPECT_FALSE(normalize_loudness(empty));
}

}  // namespace
}  // namespace vv::audio
