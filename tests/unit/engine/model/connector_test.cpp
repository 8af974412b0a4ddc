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

namespace vv::test {
namespace {

TEST(TensorCapture, SavedDumpReadsBackWithNamesShapesAndValues) {
  auto be = cpu_backend(1);
  TensorCapture cap(*be);
  DeviceTensor a = alloc_f32(*be, 3, 4);
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i);
  be->upload(a.buf.data(), v.data(), v.size() * sizeof(float));
  CaptureFn fn = cap.fn();
  fn("hidden.0", a.t.row_slice(0, 2));
  fn("hidden.0", a.t.row_slice(2, 1));  // a second chunk appends rows
  fn("logits.last", a.t.row_slice(1, 1));
  const std::string dir = make_temp_dir("vv_dump");
  const std::string path = dir + "/dump.safetensors";
  ASSERT_TRUE(cap.save_safetensors(path).is_ok());
  auto st = SafetensorsArchive::open_file(path);
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  auto h = (*st)->find("hidden.0");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(std::memcmp(h->data, v.data(), v.size() * sizeof(float)), 0);
  auto l = (*st)->find("logits.last");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(static_cast<const float*>(l->data)[0], 2.0f);
  st->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace vv::test
