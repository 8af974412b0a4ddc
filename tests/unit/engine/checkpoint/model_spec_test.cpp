// config.json in both layouts -> one ModelSpec: normalisation rules of MODEL.md §2 and the errors
// that name the missing or malformed field.
#include "engine/checkpoint/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/checkpoint/checkpoint.h"
#include "tests/unit/engine/checkpoint/crafted_files.h"

namespace vv {
namespace {

using ::testing::HasSubstr;

// A small original-layout config; DECODER_EXTRA / ENC_EXTRA are spliced in by the tests.
std::string original_config(const std::string& decoder_extra = R"("rope_theta": 10000.0,)",
                            const std::string& depths = R"("1-2-1")", const std::string& root_extra = "") {
  return R"({
  "model_type": "vibevoice", )" + root_extra + R"(
  "acoustic_tokenizer_config": {"vae_dim": 8, "encoder_n_filters": 4, "encoder_ratios": [5, 2],
    "encoder_depths": )" + depths + R"(, "fix_std": 0.5, "std_dist_type": "gaussian", "layernorm_eps": 1e-5},
  "semantic_tokenizer_config": {"vae_dim": 16, "encoder_n_filters": 4, "encoder_ratios": [5, 2],
    "encoder_depths": )" + depths + R"(, "fix_std": 0, "std_dist_type": "none"},
  "decoder_config": {)" + decoder_extra + R"( "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "model_type": "qwen2"}
})";
}

std::string hf_config(const std::string& text_extra = R"("rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},)",
                      const std::string& depths = "[1, 2, 1]") {
  return R"({
  "model_type": "vibevoice_asr", "audio_token_id": 7, "acoustic_tokenizer_chunk_size": 1000,
  "acoustic_tokenizer_encoder_config": {"hidden_size": 8, "num_filters": 4, "downsampling_ratios": [2, 5],
    "depths": )" + depths + R"(, "vae_std": 0.625, "rms_norm_eps": 1e-5},
  "semantic_tokenizer_encoder_config": {"hidden_size": 16, "num_filters": 4, "downsampling_ratios": [2, 5],
    "depths": )" + depths + R"(, "vae_std": 0.625},
  "text_config": {)" + text_extra + R"( "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": true}
})";
}

void expect_same_encoder(const EncoderSpec& a, const EncoderSpec& b) {
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.num_filters, b.num_filters);
  EXPECT_EQ(a.ratios, b.ratios);
  EXPECT_EQ(a.depths, b.depths);
  EXPECT_EQ(a.vae_dim, b.vae_dim);
  EXPECT_EQ(a.kernel_size, b.kernel_size);
  EXPECT_EQ(a.ffn_expansion, b.ffn_expansion);
  EXPECT_FLOAT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.std_dist_type, b.std_dist_type);
  EXPECT_FLOAT_EQ(a.fix_std, b.fix_std);
}

void expect_same_decoder(const DecoderSpec& a, const DecoderSpec& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_FLOAT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
}

TEST(ModelSpec, GoldenHfAndOriginalConfigsNormaliseToTheSameSpec) {
  auto hf = load_model_spec(test::golden_dir() + "/model-hf");
  auto orig = load_model_spec(test::golden_dir() + "/model-orig");
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  ASSERT_TRUE(orig.is_ok()) << orig.status().to_string();
  EXPECT_EQ(hf->layout, CheckpointLayout::kTransformers);
  EXPECT_EQ(orig->layout, CheckpointLayout::kOriginal);
  expect_same_encoder(hf->acoustic, orig->acoustic);
  expect_same_encoder(hf->semantic, orig->semantic);
  expect_same_decoder(hf->decoder, orig->decoder);
  EXPECT_EQ(hf->acoustic.depths.size(), hf->acoustic.ratios.size() + 1);
  EXPECT_EQ(hf->acoustic.hop(), 3200);
  EXPECT_EQ(hf->chunk_size % hf->acoustic.hop(), 0);
}

TEST(ModelSpec, BundledTinySpecMatchesTheBundledTinyConfig) {
  auto hf = load_model_spec(test::data_dir() + "/golden/model-hf");
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  const ModelSpec tiny = tiny_spec();
  expect_same_encoder(tiny.acoustic, hf->acoustic);
  expect_same_encoder(tiny.semantic, hf->semantic);
  expect_same_decoder(tiny.decoder, hf->decoder);
}

TEST(ModelSpec, OriginalRatiosAreReversedToTheAppliedOrder) {
  auto s = parse_model_spec(original_config(), "", "config.json");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->acoustic.ratios, (std::vector<int>{2, 5}));
  EXPECT_EQ(s->semantic.ratios, (std::vector<int>{2, 5}));
  EXPECT_EQ(s->acoustic.hop(), 10);
  auto h = parse_model_spec(hf_config(), "", "config.json");
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->acoustic.ratios, (std::vector<int>{2, 5}));  // transformers stores the applied order
}

TEST(ModelSpec, DepthsAcceptADashStringOrAListInEitherLayout) {
  for (const std::string& depths : {std::string(R"("1-2-1")"), std::string("[1, 2, 1]")}) {
    auto o = parse_model_spec(original_config(R"("rope_theta": 1.0,)", depths), "", "config.json");
    ASSERT_TRUE(o.is_ok()) << o.status().to_string();
    EXPECT_EQ(o->acoustic.depths, (std::vector<int>{1, 2, 1}));  // stem first, not reversed
    auto h = parse_model_spec(hf_config(R"("rope_theta": 1.0,)", depths), "", "config.json");
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ(h->semantic.depths, (std::vector<int>{1, 2, 1}));
  }
  auto bad = parse_model_spec(original_config(R"("rope_theta": 1.0,)", R"("1-x-1")"), "", "config.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("acoustic_tokenizer_config.encoder_depths"));
}

TEST(ModelSpec, DepthCountMustBeRatiosPlusOne) {
  auto s = parse_model_spec(original_config(R"("rope_theta": 1.0,)", R"("1-2")"), "", "config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.status().message(), HasSubstr("2 depths for 2 ratios"));
}

TEST(ModelSpec, ExplicitHeadDimWinsOverHiddenOverHeads) {
  auto derived = parse_model_spec(original_config(), "", "config.json");
  ASSERT_TRUE(derived.is_ok());
  EXPECT_EQ(derived->decoder.head_dim, 8);  // 32 / 4
  auto explicit_hd = parse_model_spec(original_config(R"("rope_theta": 1.0, "head_dim": 16,)"), "", "config.json");
  ASSERT_TRUE(explicit_hd.is_ok());
  EXPECT_EQ(explicit_hd->decoder.head_dim, 16);
  auto null_hd = parse_model_spec(original_config(R"("rope_theta": 1.0, "head_dim": null,)"), "", "config.json");
  ASSERT_TRUE(null_hd.is_ok());
  EXPECT_EQ(null_hd->decoder.head_dim, 8);
}

TEST(ModelSpec, RopeThetaIsReadTopLevelOrFromRopeParameters) {
  auto top = parse_model_spec(original_config(R"("rope_theta": 1000000.0,)"), "", "config.json");
  ASSERT_TRUE(top.is_ok());
  EXPECT_DOUBLE_EQ(top->decoder.rope_theta, 1e6);
  auto nested = parse_model_spec(hf_config(R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},)"), "",
                                 "config.json");
  ASSERT_TRUE(nested.is_ok());
  EXPECT_DOUBLE_EQ(nested->decoder.rope_theta, 5e5);
  auto both_in_hf = parse_model_spec(hf_config(R"("rope_theta": 20000.0,)"), "", "config.json");
  ASSERT_TRUE(both_in_hf.is_ok());
  EXPECT_DOUBLE_EQ(both_in_hf->decoder.rope_theta, 2e4);
}

TEST(ModelSpec, AbsentRopeThetaIsRefusedNamingTheField) {
  auto s = parse_model_spec(original_config(""), "", "config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("config.json.decoder_config.rope_theta"));
  auto scaled = parse_model_spec(hf_config(R"("rope_parameters": {"rope_theta": 1.0, "rope_type": "yarn"},)"), "", "c");
  ASSERT_FALSE(scaled.is_ok());
  EXPECT_THAT(scaled.status().message(), HasSubstr("rope_type"));
}

TEST(ModelSpec, TieFlagComesFromTheDecoderConfigElseTheRoot) {
  auto untied = parse_model_spec(original_config(), "", "config.json");
  ASSERT_TRUE(untied.is_ok());
  EXPECT_FALSE(untied->decoder.tie_word_embeddings);
  auto root = parse_model_spec(original_config(R"("rope_theta": 1.0,)", R"("1-2-1")", R"("tie_word_embeddings": true,)"), "",
                               "config.json");
  ASSERT_TRUE(root.is_ok());
  EXPECT_TRUE(root->decoder.tie_word_embeddings);
  auto dec = parse_model_spec(original_config(R"("rope_theta": 1.0, "tie_word_embeddings": false,)", R"("1-2-1")",
                                              R"("tie_word_embeddings": true,)"),
                              "", "config.json");
  ASSERT_TRUE(dec.is_ok());
  EXPECT_FALSE(dec->decoder.tie_word_embeddings);
  auto hf = parse_model_spec(hf_config(), "", "config.json");
  ASSERT_TRUE(hf.is_ok());
  EXPECT_TRUE(hf->decoder.tie_word_embeddings);
}

TEST(ModelSpec, VaeStdIsConvertedToFixStdOnTheAcousticPathOnly) {
  auto hf = parse_model_spec(hf_config(), "", "config.json");
  ASSERT_TRUE(hf.is_ok());
  EXPECT_FLOAT_EQ(hf->acoustic.fix_std, 0.5f);  // 0.625 * 0.8
  EXPECT_EQ(hf->acoustic.std_dist_type, "gaussian");
  EXPECT_EQ(hf->semantic.std_dist_type, "none");
  auto orig = parse_model_spec(original_config(), "", "config.json");
  ASSERT_TRUE(orig.is_ok());
  EXPECT_FLOAT_EQ(orig->acoustic.fix_std, 0.5f);
  EXPECT_EQ(orig->semantic.std_dist_type, "none");
}

TEST(ModelSpec, TransformersRootFieldsAreRead) {
  auto hf = parse_model_spec(hf_config(), "", "config.json");
  ASSERT_TRUE(hf.is_ok());
  EXPECT_EQ(hf->audio_token_id, 7);
  EXPECT_EQ(hf->audio_bos_token_id, 151646);
  EXPECT_EQ(hf->chunk_size, 1000);
  EXPECT_EQ(hf->acoustic.vae_dim, 8);
  EXPECT_EQ(hf->semantic.vae_dim, 16);
}

TEST(ModelSpec, ChunkSizeNotAMultipleOfTheHopIsRefused) {
  std::string cfg = hf_config();
  cfg.replace(cfg.find("1000"), 4, "1001");
  auto s = parse_model_spec(cfg, "", "config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.status().message(), HasSubstr("acoustic_tokenizer_chunk_size"));
}

TEST(ModelSpec, MissingRequiredFieldsAreNamed) {
  struct Case {
    std::string from, to, field;
  };
  const std::vector<Case> cases = {
      {R"("hidden_size": 32,)", "", "text_config.hidden_size"},
      {R"("vocab_size": 100,)", "", "text_config.vocab_size"},
      {R"("num_filters": 4,)", "", "acoustic_tokenizer_encoder_config.num_filters"},
      {R"("hidden_size": 8,)", "", "acoustic_tokenizer_encoder_config.hidden_size"},
      {R"("downsampling_ratios": [2, 5],)", "", "acoustic_tokenizer_encoder_config.downsampling_ratios"},
  };
  for (const auto& c : cases) {
    std::string cfg = hf_config();
    cfg.replace(cfg.find(c.from), c.from.size(), c.to);
    auto s = parse_model_spec(cfg, "", "m/config.json");
    ASSERT_FALSE(s.is_ok()) << c.field;
    EXPECT_THAT(s.status().message(), HasSubstr("m/config.json." + c.field)) << s.status().message();
  }
  std::string cfg = original_config();
  const std::string from = R"("encoder_n_filters": 4,)";
  cfg.replace(cfg.find(from), from.size(), "");
  auto s = parse_model_spec(cfg, "", "config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.status().message(), HasSubstr("acoustic_tokenizer_config.encoder_n_filters"));
}

TEST(ModelSpec, WrongTypesAndUnsupportedSettingsAreNamed) {
  std::string cfg = hf_config();
  cfg.replace(cfg.find(R"("hidden_size": 32)"), 17, R"("hidden_size": "32")");
  auto s = parse_model_spec(cfg, "", "config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.status().message(), HasSubstr("text_config.hidden_size is not an integer"));

  std::string orig = original_config();
  orig.replace(orig.find(R"("vae_dim": 8,)"), 13, R"("vae_dim": 8, "causal": false,)");
  auto o = parse_model_spec(orig, "", "config.json");
  ASSERT_FALSE(o.is_ok());
  EXPECT_EQ(o.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(o.status().message(), HasSubstr("acoustic_tokenizer_config.causal"));
}

TEST(ModelSpec, NeitherLayoutAndBadJsonAreRefused) {
  auto none = parse_model_spec(R"({"model_type": "llama"})", "", "x/config.json");
  ASSERT_FALSE(none.is_ok());
  EXPECT_THAT(none.status().message(), HasSubstr("x/config.json"));
  auto bad = parse_model_spec("{", "", "x/config.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("not valid JSON"));
}

TEST(ModelSpec, PreprocessorConfigSetsAudioNormalisation) {
  auto s = parse_model_spec(original_config(),
                            R"({"normalize_audio": false, "target_dB_FS": -20, "eps": 1e-5, "speech_tok_compress_ratio": 10,
                                "target_sample_rate": 16000})",
                            "m/config.json");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_FALSE(s->normalize_audio);
  EXPECT_FLOAT_EQ(s->target_dbfs, -20.f);
  EXPECT_FLOAT_EQ(s->norm_eps, 1e-5f);
  EXPECT_EQ(s->sample_rate, 16000);
  auto defaults = parse_model_spec(original_config(), "", "m/config.json");
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_TRUE(defaults->normalize_audio);
  EXPECT_FLOAT_EQ(defaults->target_dbfs, -25.f);
  EXPECT_EQ(defaults->sample_rate, 24000);
  auto mismatch = parse_model_spec(original_config(), R"({"speech_tok_compress_ratio": 3200})", "m/config.json");
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_THAT(mismatch.status().message(), HasSubstr("m/preprocessor_config.json.speech_tok_compress_ratio"));
}

TEST(ModelSpec, LoadFromADirectoryWithoutConfigIsNotFound) {
  auto s = load_model_spec(test::make_temp_dir("spec-empty"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("config.json"));
}

}  // namespace
}  // namespace vv
