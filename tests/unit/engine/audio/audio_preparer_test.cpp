// prepare_audio against the golden cases: each case's audio.wav through the whole front end must
// give the golden input_values (24 kHz files within 1e-6, resampled ones within 2e-5), and the
// golden length, frame count and duration string.
#include "engine/audio/audio_preparer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>

#include "tests/support/test_paths.h"
#include "tests/unit/engine/audio/audio_test_files.h"

namespace vv::audio {
namespace {

using audio_test::json_field;
using audio_test::read_bytes;
using audio_test::read_f32_tensor;

std::string case_dir(const std::string& name) { return vv::test::golden_dir() + "/cases/" + name; }

std::string read_text(const std::string& path) {
  const std::vector<std::uint8_t> b = read_bytes(path);
  return std::string(b.begin(), b.end());
}

TEST(AudioPreparer, EveryGoldenCaseMatchesGoldenInputValuesLengthFramesAndDuration) {
  const std::vector<std::string> cases = vv::test::golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases under " << vv::test::golden_dir();
  int compared_values = 0;
  for (const std::string& name : cases) {
    SCOPED_TRACE("case " + name);
    const std::string json = read_text(case_dir(name) + "/golden.json");
    ASSERT_FALSE(json.empty());
    const std::vector<std::uint8_t> wav = read_bytes(case_dir(name) + "/audio.wav");
    ASSERT_FALSE(wav.empty());

    Result<PreparedAudio> prepared = prepare_audio(wav);
    ASSERT_TRUE(prepared.is_ok()) << prepared.status().to_string();
    const PreparedAudio& p = *prepared;

    EXPECT_EQ(std::to_string(p.source_rate), json_field(json, "audio", "file_sample_rate"));
    EXPECT_EQ(std::to_string(p.source_channels), json_field(json, "audio", "file_channels"));
    EXPECT_EQ(std::to_string(p.samples), json_field(json, "audio", "num_samples_24k"));
    EXPECT_EQ(std::to_string(p.input_values.size()), json_field(json, "audio", "num_samples_padded"));
    EXPECT_EQ(std::to_string(p.frames), json_field(json, "audio", "num_audio_tokens"));
    EXPECT_EQ(p.duration, json_field(json, "audio", "duration_seconds_in_prompt"));
    EXPECT_EQ(p.peak_renormalised ? "true" : "false", json_field(json, "normalisation_check", "peak_renormalised"));

    // The float64 redo of the loader and normaliser in golden.json: RMS before and peak after.
    const std::string rms_before = json_field(json, "normalisation_check", "rms_before");
    const std::string peak_after = json_field(json, "normalisation_check", "max_abs_value");
    if (!rms_before.empty() && !peak_after.empty()) {
      PrepareOptions raw_options;
      raw_options.normalize = false;
      Result<PreparedAudio> raw = prepare_audio(wav, raw_options);
      ASSERT_TRUE(raw.is_ok());
      double sum = 0.0;
      for (std::int64_t i = 0; i < raw->samples; ++i) sum += static_cast<double>(raw->input_values[i]) * raw->input_values[i];
      EXPECT_NEAR(std::sqrt(sum / static_cast<double>(raw->samples)), std::stod(rms_before), 1e-6 * std::stod(rms_before));
      float peak = 0.0f;
      for (float v : p.input_values) peak = std::max(peak, std::fabs(v));
      EXPECT_NEAR(peak, std::stod(peak_after), 1e-6);
    }

    const auto golden = read_f32_tensor(case_dir(name) + "/golden.safetensors", "input_values");
    if (!golden) {
      // The long case omits input_values; its length, frames and duration were checked above.
      std::printf("[ case %-9s ] rate %6d ch %d  T %8lld  frames %4lld  (no golden input_values)\n", name.c_str(),
                  p.source_rate, p.source_channels, static_cast<long long>(p.samples), static_cast<long long>(p.frames));
      continue;
    }
    ASSERT_EQ(golden->size(), p.input_values.size());
    const double tolerance = p.source_rate == 24000 ? 1e-6 : 2e-5;
    double worst = 0.0;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < golden->size(); ++i) {
      const double d = std::fabs(static_cast<double>((*golden)[i]) - p.input_values[i]);
      if (d > worst) {
        worst = d;
        worst_at = i;
      }
    }
    EXPECT_LE(worst, tolerance) << "worst |diff| at sample " << worst_at;
    for (std::size_t i = static_cast<std::size_t>(p.samples); i < p.input_values.size(); ++i) {
      ASSERT_EQ(p.input_values[i], 0.0f) << "padding sample " << i;
    }
    std::printf("[ case %-9s ] rate %6d ch %d  T %8lld  frames %4lld  max|diff| %.3g\n", name.c_str(), p.source_rate,
                p.source_channels, static_cast<long long>(p.samples), static_cast<long long>(p.frames), worst);
    ++compared_values;
  }
  EXPECT_GT(compared_values, 0);
}

TEST(AudioPreparer, DurationStringRoundsTheBinaryValueLikePython) {
  EXPECT_EQ(format_duration(36000, 24000), "1.50");
  EXPECT_EQ(format_duration(1234567, 24000), "51.44");
  EXPECT_EQ(format_duration(72000, 24000), "3.00");
  // 0.125 s is exactly representable: half-way rounds to even, "0.12".
  EXPECT_EQ(format_duration(3000, 24000), "0.12");
  EXPECT_EQ(format_duration(9000, 24000), "0.38");  // 0.375 -> even
}

TEST(AudioPreparer, PadsToTheHopAndCountsFramesByCeil) {
  DecodedAudio a;
  a.sample_rate = 24000;
  a.channels = 1;
  a.samples.assign(3201, 0.25f);
  PrepareOptions o;
  o.normalize = false;
  Result<PreparedAudio> p = prepare_decoded(a, o);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->samples, 3201);
  EXPECT_EQ(p->frames, 2);
  EXPECT_EQ(p->input_values.size(), 6400u);
  EXPECT_EQ(p->input_values[3200], 0.25f);
  EXPECT_EQ(p->input_values[3201], 0.0f);
  o.hop = 1000;
  p = prepare_decoded(a, o);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->frames, 4);
  EXPECT_EQ(p->input_values.size(), 4000u);
  o.pad_to_hop = false;  // MS parity: same frame count, no padded samples
  p = prepare_decoded(a, o);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->frames, 4);
  EXPECT_EQ(p->input_values.size(), 3201u);
}

TEST(AudioPreparer, NormalizeOffLeavesSamplesUntouched) {
  DecodedAudio a;
  a.sample_rate = 24000;
  a.samples = {0.5f, -0.25f, 0.125f};
  PrepareOptions o;
  o.normalize = false;
  Result<PreparedAudio> p = prepare_decoded(a, o);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->input_values[0], 0.5f);
  EXPECT_EQ(p->input_values[1], -0.25f);
  EXPECT_EQ(p->input_values[2], 0.125f);
}

TEST(AudioPreparer, ResampledLengthIsCeilOfTheExactRatio) {
  DecodedAudio a;
  a.sample_rate = 44100;
  a.samples.assign(12345, 0.0f);
  for (std::size_t i = 0; i < a.samples.size(); ++i) a.samples[i] = static_cast<float>(std::sin(0.01 * i) * 0.3);
  Result<PreparedAudio> p = prepare_decoded(a);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->samples, 6719);  // libsoxr alone gives 6718 here (MODEL.md §4.1)
  EXPECT_EQ(p->frames, 3);
}

TEST(AudioPreparer, DurationLimitRejectsLongerInput) {
  const std::vector<std::uint8_t> wav = read_bytes(case_dir("short") + "/audio.wav");
  ASSERT_FALSE(wav.empty());
  PrepareOptions o;
  o.max_seconds = 1.0;
  Result<PreparedAudio> p = prepare_audio(wav, o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(p.status().message().find("limit"), std::string::npos) << p.status().message();
  o.max_seconds = 3600.0;
  EXPECT_TRUE(prepare_audio(wav, o).is_ok());
}

TEST(AudioPreparer, EmptyAndGarbageInputFailWithAMessage) {
  Result<PreparedAudio> p = prepare_audio({});
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  const std::vector<std::uint8_t> junk(100, 0x5A);
  p = prepare_audio(junk);
  ASSERT_FALSE(p.is_ok());
  EXPECT_FALSE(p.status().message().empty());
}

}  // namespace
}  // namespace vv::audio
