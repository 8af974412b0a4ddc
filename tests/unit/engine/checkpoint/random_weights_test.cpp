// Checkpoint::random: spec shapes, determinism per seed, the init distribution, the 7B preset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/checkpoint/checkpoint.h"
#include "tests/unit/engine/checkpoint/crafted_files.h"

namespace vv {
namespace {

float value_at(const HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32: return static_cast<const float*>(t.data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: return f16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
  }
}

TEST(RandomCheckpoint, HasTheShapesOfTheGoldenCheckpointAtItsSpec) {
  auto spec = load_model_spec(test::golden_hf_dir());
  ASSERT_TRUE(spec.is_ok());
  auto real = Checkpoint::open(test::golden_hf_dir());
  ASSERT_TRUE(real.is_ok()) << real.status().to_string();
  auto rnd = Checkpoint::random(*spec, 7, DType::kBF16);
  ASSERT_TRUE(rnd.is_ok()) << rnd.status().to_string();
  const auto& a = (*real)->bound_tensors();
  const auto& b = (*rnd)->bound_tensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->shape, b[i]->shape) << a[i]->name;
    EXPECT_EQ(b[i]->dtype, DType::kBF16);
    EXPECT_NE(b[i]->data, nullptr);
  }
  EXPECT_EQ((*rnd)->parameter_count(), (*real)->parameter_count());
  EXPECT_EQ((*rnd)->lm_head_tied(), (*real)->lm_head_tied());
}

TEST(RandomCheckpoint, SameSeedGivesSameBytesAndOtherSeedDiffers) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    auto a = Checkpoint::random(tiny_spec(), 42, dt);
    auto b = Checkpoint::random(tiny_spec(), 42, dt);
    auto c = Checkpoint::random(tiny_spec(), 43, dt);
    ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
    const auto& ta = (*a)->bound_tensors();
    const auto& tb = (*b)->bound_tensors();
    const auto& tc = (*c)->bound_tensors();
    size_t differ = 0;
    for (size_t i = 0; i < ta.size(); ++i) {
      EXPECT_EQ(std::memcmp(ta[i]->data, tb[i]->data, ta[i]->bytes()), 0) << ta[i]->name;
      differ += std::memcmp(ta[i]->data, tc[i]->data, ta[i]->bytes()) != 0;
    }
    EXPECT_EQ(differ, ta.size());
  }
}

TEST(RandomCheckpoint, LinearWeightsHaveStdOneOverSqrtFanInAndNormsNearOne) {
  auto c = Checkpoint::random(tiny_spec(), 1, DType::kF32);
  ASSERT_TRUE(c.is_ok());
  const HostTensor& embed = (*c)->weights().decoder.embed;  // [V, H]: many samples
  double sum = 0, sq = 0;
  const int64_t n = embed.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = value_at(embed, i);
    sum += v;
    sq += v * v;
  }
  const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  const double expected = 1.0 / std::sqrt(static_cast<double>(embed.shape[1]));
  EXPECT_NEAR(mean, 0.0, 0.01 * expected);
  EXPECT_NEAR(std, expected, 0.01 * expected);
  const HostTensor& norm = (*c)->weights().decoder.final_norm;
  for (int64_t i = 0; i < norm.numel(); ++i) EXPECT_NEAR(value_at(norm, i), 1.0f, 0.2f);
  const HostTensor& bias = (*c)->weights().decoder.layers[0].q_b;
  for (int64_t i = 0; i < bias.numel(); ++i) EXPECT_LT(std::fabs(value_at(bias, i)), 0.2f);
}

TEST(RandomCheckpoint, TiedSpecReusesTheEmbeddingAsLmHead) {
  auto c = Checkpoint::random(tiny_spec(), 3, DType::kBF16);
  ASSERT_TRUE(c.is_ok());
  ASSERT_TRUE(tiny_spec().decoder.tie_word_embeddings);
  EXPECT_TRUE((*c)->lm_head_tied());
  EXPECT_EQ((*c)->weights().decoder.lm_head.data, (*c)->weights().decoder.embed.data);
}

TEST(RandomCheckpoint, IntegerDtypeAndMalformedSpecAreRefused) {
  EXPECT_FALSE(Checkpoint::random(tiny_spec(), 1, DType::kI8).is_ok());
  ModelSpec bad = tiny_spec();
  bad.acoustic.depths.pop_back();
  EXPECT_FALSE(Checkpoint::random(bad, 1, DType::kBF16).is_ok());
  bad = tiny_spec();
  bad.decoder.hidden_size = 0;
  EXPECT_FALSE(Checkpoint::random(bad, 1, DType::kBF16).is_ok());
}

TEST(ModelPresets, Qwen7bAsrSpecHasTheReleasedParameterCountMinusTheAcousticDecoder) {
  // MODEL.md §1: 8 674 021 857 parameters in the release, of which the unused acoustic decoder
  // holds 343 695 969.
  ModelSpec spec = qwen7b_asr_spec();
  ModelWeights w;
  int64_t params = 0;
  for (const auto& slot : weight_slots(spec, w)) {
    int64_t n = 1;
    for (int64_t d : slot.shape) n *= d;
    params += n;
  }
  EXPECT_EQ(params, int64_t{8674021857} - int64_t{343695969});
  EXPECT_EQ(spec.acoustic.hop(), 3200);
  EXPECT_FALSE(spec.decoder.tie_word_embeddings);
  EXPECT_EQ(spec.decoder.head_dim, 128);
}

}  // namespace
}  // namespace vv
