// The speech connectors fed the golden latents against the golden speech_embeds.
#include "engine/model/connector.h"

#include <gtest/gtest.h>

#include "engine/model/speech_embedder.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace vv::test {
namespace {

class ConnectorGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ConnectorGolden, FedGoldenLatentsMatchSpeechEmbedsForEveryCase) {
  auto ckpt = open_layout(GetParam());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  auto conn = SpeechConnector::create(*be, (*ckpt)->weights().acoustic_connector, (*ckpt)->weights().semantic_connector,
                                      spec.decoder.hidden_size, spec.acoustic.vae_dim, spec.semantic.vae_dim,
                                      /*max_rows=*/64);  // smaller than `long`: exercises the tiling
  ASSERT_TRUE(conn.is_ok()) << conn.status().to_string();
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    DeviceTensor a = upload_golden(*be, gc.tensor("acoustic.latents"));
    DeviceTensor s = upload_golden(*be, gc.tensor("semantic.latents"));
    DeviceTensor out = alloc_f32(*be, a.t.rows(), spec.decoder.hidden_size);
    ASSERT_TRUE((*conn)->run(a.t, s.t, out.t).is_ok());
    expect_fed_golden(name + " speech_embeds (" + GetParam() + ")", download(*be, out.t), gc.tensor("speech_embeds"));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ConnectorGolden, ::testing::Values("hf", "orig"));

TEST(SpeechConnector, MismatchedRowCountsAreRefused) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  auto conn = SpeechConnector::create(*be, (*ckpt)->weights().acoustic_connector, (*ckpt)->weights().semantic_connector,
                                      spec.decoder.hidden_size, spec.acoustic.vae_dim, spec.semantic.vae_dim);
  ASSERT_TRUE(conn.is_ok());
  DeviceTensor a = alloc_f32(*be, 3, spec.acoustic.vae_dim);
  DeviceTensor s = alloc_f32(*be, 4, spec.semantic.vae_dim);
  DeviceTensor out = alloc_f32(*be, 3, spec.decoder.hidden_size);
  EXPECT_FALSE((*conn)->run(a.t, s.t, out.t).is_ok());
}

TEST(SpeechConnector, WrongWeightShapeIsRefusedNamingTheTensor) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  auto conn = SpeechConnector::create(*be, (*ckpt)->weights().acoustic_connector, (*ckpt)->weights().semantic_connector,
                                      spec.decoder.hidden_size, spec.acoustic.vae_dim + 1, spec.semantic.vae_dim);
  ASSERT_FALSE(conn.is_ok());
  EXPECT_NE(conn.status().message().find((*ckpt)->weights().acoustic_connector.fc1_w.name), std::string::npos)
      << conn.status().message();
}

}  // namespace
}  // namespace vv::test
