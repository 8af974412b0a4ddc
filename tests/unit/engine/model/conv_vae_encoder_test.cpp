// The Conv-VAE encoders against the golden latents (fed the golden input_values), segmentation
// with carried state, and the seeded sampling modes.
#include "engine/model/conv_vae_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace vv::test {
namespace {

class EncoderGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderGolden, BothEncodersMatchGoldenLatentsForEveryCase) {
  auto ckpt = open_layout(GetParam());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  int checked = 0;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    if (!gc.has("input_values")) continue;  // `long` ships none; covered in the runner tests
    const GoldenTensor x = gc.tensor("input_values");
    const int64_t n = static_cast<int64_t>(x.data.size());
    struct Which { const char* golden; const EncoderSpec* spec; const EncoderWeights* w; };
    for (const Which& wh : {Which{"acoustic.latents", &spec.acoustic, &(*ckpt)->weights().acoustic},
                            Which{"semantic.latents", &spec.semantic, &(*ckpt)->weights().semantic}}) {
      auto enc = ConvVaeEncoder::create(*be, *wh.spec, *wh.w, spec.chunk_size, wh.golden);
      ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
      auto lat = (*enc)->encode(x.data.data(), n);
      ASSERT_TRUE(lat.is_ok()) << lat.status().to_string();
      expect_end_to_end(name + " " + wh.golden + " (" + GetParam() + ")", *lat, gc.tensor(wh.golden));
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no golden case has input_values";
}

INSTANTIATE_TEST_SUITE_P(Layouts, EncoderGolden, ::testing::Values("hf", "orig"));

std::vector<float> synthetic_audio(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.05f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 24000.0;
    x[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * 180 * t) * std::sin(2 * M_PI * 3 * t) +
                              0.1 * std::sin(2 * M_PI * 1210 * t)) + noise(rng);
  }
  return x;
}

TEST(ConvVaeEncoder, SegmentsThatAreHopMultiplesGiveTheOnePassLatents) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const EncoderSpec& spec = (*ckpt)->spec().acoustic;
  const int hop = spec.hop();
  const int64_t n = static_cast<int64_t>(hop) * 23 - 1234;  // not a hop multiple: the tail is zero-padded
  const std::vector<float> x = synthetic_audio(n, 7);
  const int64_t whole = (n + hop - 1) / hop * hop;
  for (const EncoderSpec* s : {&(*ckpt)->spec().acoustic, &(*ckpt)->spec().semantic}) {
    const EncoderWeights& w = s == &(*ckpt)->spec().acoustic ? (*ckpt)->weights().acoustic : (*ckpt)->weights().semantic;
    auto enc = ConvVaeEncoder::create(*be, *s, w, whole, "enc");
    ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
    auto one = (*enc)->encode(x.data(), n, whole);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    ASSERT_EQ(one->size(), static_cast<size_t>(whole / hop * s->vae_dim));
    for (int k : {1, 2, 5, 7, 16}) {
      auto seg = (*enc)->encode(x.data(), n, static_cast<int64_t>(hop) * k);
      ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
      const Diff d = compare(seg->data(), one->data(), one->size());
      EXPECT_LE(d.rel_max(), 1e-5) << "segment " << hop * k << " samples: max|a-b| " << d.max_abs_err;
      EXPECT_LE(d.rel_l2, 1e-6) << "segment " << hop * k;
    }
  }
}

TEST(ConvVaeEncoder, SegmentNotAHopMultipleIsRefusedWithItsLength) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const EncoderSpec& spec = (*ckpt)->spec().acoustic;
  auto enc = ConvVaeEncoder::create(*be, spec, (*ckpt)->weights().acoustic, spec.hop() * 4, "acoustic");
  ASSERT_TRUE(enc.is_ok());
  std::vector<float> x(static_cast<size_t>(spec.hop() * 4), 0.f);
  auto r = (*enc)->encode(x.data(), static_cast<int64_t>(x.size()), spec.hop() + 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(std::to_string(spec.hop() + 1)), std::string::npos) << r.status().message();
}

TEST(ConvVaeEncoder, GaussianSamplingIsSeededAndAddsOneSigmaPerClip) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  EncoderSpec spec = (*ckpt)->spec().acoustic;
  if (spec.fix_std == 0.f) spec.fix_std = 0.5f;  // the noise scale must be non-zero for this test
  const int hop = spec.hop();
  const int64_t n = static_cast<int64_t>(hop) * 40;
  const std::vector<float> x = synthetic_audio(n, 11);
  auto enc = ConvVaeEncoder::create(*be, spec, (*ckpt)->weights().acoustic, n, "acoustic");
  ASSERT_TRUE(enc.is_ok());
  auto mean = (*enc)->encode(x.data(), n);
  SamplingOptions g{LatentSampling::kGaussian, 42};
  auto a = (*enc)->encode(x.data(), n, hop * 8, g);
  auto b = (*enc)->encode(x.data(), n, hop * 8, g);
  auto c = (*enc)->encode(x.data(), n, hop * 8, SamplingOptions{LatentSampling::kGaussian, 43});
  ASSERT_TRUE(mean.is_ok() && a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(*a, *b) << "same seed, same latents";
  EXPECT_NE(*a, *c) << "another seed, other noise";
  // The noise is σ·ε with one σ for the clip: its spread is |σ|, the same in every segment.
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.f, 1.f);
  const double sigma = std::fabs(spec.fix_std / 0.8f * normal(rng));
  const size_t half = mean->size() / 2;
  for (size_t part = 0; part < 2; ++part) {
    double ss = 0;
    for (size_t i = part * half; i < (part + 1) * half; ++i) ss += std::pow((*a)[i] - (*mean)[i], 2);
    EXPECT_NEAR(std::sqrt(ss / half), sigma, 0.1 * sigma + 1e-6) << "half " << part;
  }
  auto f = (*enc)->encode(x.data(), n, hop * 8, SamplingOptions{LatentSampling::kFix, 5});
  ASSERT_TRUE(f.is_ok());
  double ss = 0;
  for (size_t i = 0; i < f->size(); ++i) ss += std::pow((*f)[i] - (*mean)[i], 2);
  EXPECT_NEAR(std::sqrt(ss / f->size()), spec.fix_std, 0.1 * spec.fix_std);
}

}  // namespace
}  // namespace vv::test
