// soxr HQ resampling to 24 kHz: sines at common rates come out as the analytic sine at >= 90 dB SNR
// away from the edges, and the length is always ceil(n * 24000 / sr).
#include "engine/audio/resampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <vector>

namespace vv::audio {
namespace {

std::vector<float> sine(int rate, double freq, double amplitude, std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2.0 * std::numbers::pi * freq * static_cast<double>(i) / rate));
  }
  return x;
}

// SNR in dB of y against the analytic sine at 24 kHz, skipping `edge` samples at both ends.
double snr_db(const std::vector<float>& y, double freq, double amplitude, std::size_t edge) {
  double signal = 0.0;
  double noise = 0.0;
  for (std::size_t i = edge; i + edge < y.size(); ++i) {
    const double ref = amplitude * std::sin(2.0 * std::numbers::pi * freq * static_cast<double>(i) / 24000.0);
    signal += ref * ref;
    noise += (y[i] - ref) * (y[i] - ref);
  }
  return 10.0 * std::log10(signal / noise);
}

TEST(Resampler, SinesAt16k441k48kMatchTheAnalyticSineAbove90dB) {
  for (int rate : {16000, 44100, 48000, 8000, 22050}) {
    for (double freq : {440.0, 1000.0, 3100.0}) {
      if (freq > 0.4 * rate) continue;
      const std::size_t n = static_cast<std::size_t>(rate) * 2 + 17;
      Result<std::vector<float>> y = resample_hq(sine(rate, freq, 0.5, n), rate, 24000);
      ASSERT_TRUE(y.is_ok()) << y.status().to_string();
      ASSERT_EQ(static_cast<std::int64_t>(y->size()), resampled_length(static_cast<std::int64_t>(n), rate, 24000));
      const double snr = snr_db(*y, freq, 0.5, 2400);
      std::printf("[ sine %5d Hz -> 24 kHz, %6.0f Hz ] SNR %.1f dB\n", rate, freq, snr);
      EXPECT_GE(snr, 90.0) << rate << " Hz input, " << freq << " Hz tone";
    }
  }
}

TEST(Resampler, LengthIsCeilOfTheExactRatioForAnyInputLength) {
  EXPECT_EQ(resampled_length(12345, 44100, 24000), 6719);
  EXPECT_EQ(resampled_length(176000, 16000, 24000), 264000);
  EXPECT_EQ(resampled_length(1, 48000, 24000), 1);
  EXPECT_EQ(resampled_length(0, 48000, 24000), 0);
  for (std::size_t n : {1u, 2u, 3u, 7u, 100u, 12345u, 44101u, 96001u}) {
    for (int rate : {8000, 11025, 16000, 22050, 44100, 48000, 96000}) {
      Result<std::vector<float>> y = resample_hq(sine(rate, 300.0, 0.3, n), rate, 24000);
      ASSERT_TRUE(y.is_ok());
      const std::int64_t want = static_cast<std::int64_t>(std::ceil(static_cast<double>(n) * 24000.0 / rate - 1e-9));
      EXPECT_EQ(static_cast<std::int64_t>(y->size()), want) << n << " samples at " << rate;
    }
  }
}

TEST(Resampler, SameRateIsAnExactCopy) {
  const std::vector<float> x = sine(24000, 500.0, 0.7, 1001);
  Result<std::vector<float>> y = resample_hq(x, 24000, 24000);
  ASSERT_TRUE(y.is_ok());
  EXPECT_EQ(*y, x);
}

// A soxr object prepared ahead (prepare_resampler) gives the same bytes as one made inside the call,
// for the prepared pair of rates, after a switch to other rates, and when prepared twice.
TEST(Resampler, PreparedObjectGivesTheSameBytes) {
  std::vector<float> x = sine(16000, 440.0, 0.5, 32000);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] += 0.01f;  // not a pure tone
  const Result<std::vector<float>> fresh = resample_hq(x, 16000, 24000);
  ASSERT_TRUE(fresh.is_ok());
  const std::vector<float> x44 = sine(44100, 1000.0, 0.3, 44100);
  const Result<std::vector<float>> fresh44 = resample_hq(x44, 44100, 24000);
  ASSERT_TRUE(fresh44.is_ok());
  for (int round = 0; round < 3; ++round) {
    prepare_resampler(16000, 24000);
    if (round == 2) prepare_resampler(16000, 24000);
    const Result<std::vector<float>> y = resample_hq(x, 16000, 24000);
    ASSERT_TRUE(y.is_ok());
    ASSERT_EQ(y->size(), fresh->size());
    EXPECT_EQ(std::memcmp(y->data(), fresh->data(), y->size() * sizeof(float)), 0) << "round " << round;
    prepare_resampler(16000, 24000);  // a spare for 16 kHz; a 44.1 kHz call makes its own
    const Result<std::vector<float>> y44 = resample_hq(x44, 44100, 24000);
    ASSERT_TRUE(y44.is_ok());
    ASSERT_EQ(y44->size(), fresh44->size());
    EXPECT_EQ(std::memcmp(y44->data(), fresh44->data(), y44->size() * sizeof(float)), 0) << "round " << round;
  }
  prepare_resampler(24000, 24000);  // nothing to prepare
  prepare_resampler(0, 24000);
  EXPECT_FALSE(resample_hq(x, 0, 24000).is_ok());
}

TEST(Resampler, NonPositiveRatesAreRejected) {
  const std::vector<float> x(10, 0.0f);
  EXPECT_EQ(resample_hq(x, 0, 24000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resample_hq(x, 16000, -1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vv::audio
