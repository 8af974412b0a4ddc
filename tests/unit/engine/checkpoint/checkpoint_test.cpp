// Weight binding by role: every naming scheme binds the same bytes; missing, misshaped, unknown
// and unused tensors; the tied-embedding rule.
#include "engine/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/checkpoint/tensor_names.h"
#include "tests/unit/engine/checkpoint/crafted_files.h"

namespace vv {
namespace {

using ::testing::HasSubstr;

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// transformers in-memory -> on-disk (LLaVA-style) names, MODEL.md §3.2.
std::string hf_on_disk(const std::string& n) {
  if (starts_with(n, "model.language_model.")) return "language_model.model." + n.substr(21);
  if (n == "lm_head.weight") return "language_model.lm_head.weight";
  if (starts_with(n, "model.")) return n.substr(6);
  return n;
}

// original -> vLLM plugin names, MODEL.md §3.3.
std::string vllm_name(const std::string& n) {
  if (starts_with(n, "model.language_model.")) return "language_model.model." + n.substr(21);
  if (starts_with(n, "lm_head.")) return "language_model." + n;
  if (starts_with(n, "model.")) return "audio_encoder." + n.substr(6);
  return n;
}

std::map<std::string, std::string> names_json() {
  auto m = read_name_map(test::golden_dir() + "/names.json");
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? m.value() : std::map<std::string, std::string>{};
}

std::string to_original(const std::string& n) {
  static const auto map = names_json();
  auto it = map.find(n);
  return it == map.end() ? n : it->second;
}

std::unique_ptr<Checkpoint> open_ok(const std::string& dir) {
  auto c = Checkpoint::open(dir);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

// Every role-bound tensor of `b` has the same dtype, shape and bytes as in `a`.
void expect_same_weights(const Checkpoint& a, const Checkpoint& b) {
  const auto& ta = a.bound_tensors();
  const auto& tb = b.bound_tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(canonical_tensor_name(ta[i]->name), canonical_tensor_name(tb[i]->name));
    EXPECT_EQ(ta[i]->dtype, tb[i]->dtype) << ta[i]->name;
    EXPECT_EQ(ta[i]->shape, tb[i]->shape) << ta[i]->name;
    ASSERT_EQ(ta[i]->bytes(), tb[i]->bytes());
    EXPECT_NE(ta[i]->data, tb[i]->data);
    EXPECT_EQ(std::memcmp(ta[i]->data, tb[i]->data, ta[i]->bytes()), 0) << ta[i]->name << " vs " << tb[i]->name;
  }
  EXPECT_EQ(a.lm_head_tied(), b.lm_head_tied());
}

TEST(Checkpoint, GoldenHfInMemoryNamesBindEveryTensorOfTheSpec) {
  auto c = open_ok(test::golden_hf_dir());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->spec().layout, CheckpointLayout::kTransformers);
  EXPECT_TRUE(c->skipped().empty());
  auto archive = SafetensorsArchive::open_dir(test::golden_hf_dir());
  ASSERT_TRUE(archive.is_ok());
  EXPECT_EQ(c->bound_tensors().size(), (*archive)->size());  // every stored tensor has a role
  const ModelWeights& w = c->weights();
  EXPECT_EQ(w.acoustic.stages.size(), c->spec().acoustic.ratios.size() + 1);
  EXPECT_EQ(w.acoustic.down_w.size(), c->spec().acoustic.ratios.size());
  EXPECT_EQ(w.decoder.layers.size(), static_cast<size_t>(c->spec().decoder.num_layers));
  EXPECT_EQ(w.acoustic.stem_w.name, "model.acoustic_tokenizer_encoder.stem.conv.conv.weight");
  EXPECT_EQ(w.semantic_connector.fc1_w.name, "model.multi_modal_projector.semantic_linear_1.weight");
  EXPECT_EQ(w.decoder.layers[0].q_b.shape,
            (std::vector<int64_t>{int64_t{c->spec().decoder.num_heads} * c->spec().decoder.head_dim}));
  int64_t params = 0;
  for (const auto& name : (*archive)->names()) params += (*archive)->find(name)->numel();
  EXPECT_EQ(c->parameter_count(), params);
}

TEST(Checkpoint, OriginalLayoutBindsByteIdenticalTensors) {
  const std::string dir = test::original_layout_dir();
  test::ScopedDir cleanup_dir(dir);
  ASSERT_FALSE(dir.empty());
  auto orig = open_ok(dir);
  auto hf = open_ok(test::golden_hf_dir());
  ASSERT_NE(orig, nullptr);
  ASSERT_NE(hf, nullptr);
  EXPECT_EQ(orig->spec().layout, CheckpointLayout::kOriginal);
  EXPECT_EQ(orig->weights().acoustic.stem_w.name, "model.acoustic_tokenizer.encoder.downsample_layers.0.0.conv.conv.weight");
  expect_same_weights(*hf, *orig);
}

TEST(Checkpoint, OriginalLayoutSplitIntoShardsBindsByteIdenticalTensors) {
  const std::string one = test::original_layout_dir();
  test::ScopedDir cleanup_one(one);
  ASSERT_FALSE(one.empty());
  auto src = SafetensorsArchive::open_dir(one);
  ASSERT_TRUE(src.is_ok());
  const std::string dir = test::make_temp_dir("ckpt-shards");
  test::ScopedDir cleanup_dir(dir);
  std::filesystem::copy_file(one + "/config.json", dir + "/config.json");
  std::vector<HostTensor> shard[3];
  std::string index = R"({"metadata": {}, "weight_map": {)";
  size_t i = 0;
  for (const auto& name : (*src)->names()) {
    const size_t k = i % 3;
    shard[k].push_back(*(*src)->find(name));
    index += std::string(i ? "," : "") + "\"" + name + "\": \"model-0000" + std::to_string(k + 1) + "-of-00003.safetensors\"";
    ++i;
  }
  index += "}}";
  for (size_t k = 0; k < 3; ++k)
    ASSERT_TRUE(write_safetensors(dir + "/model-0000" + std::to_string(k + 1) + "-of-00003.safetensors", shard[k]).is_ok());
  test::write_file(dir + "/model.safetensors.index.json", index);
  auto sharded = open_ok(dir);
  auto hf = open_ok(test::golden_hf_dir());
  ASSERT_NE(sharded, nullptr);
  ASSERT_NE(hf, nullptr);
  expect_same_weights(*hf, *sharded);
}

TEST(Checkpoint, HostTensorViewIsTwoDimensionalOrAVector) {
  auto c = open_ok(test::golden_hf_dir());
  ASSERT_NE(c, nullptr);
  const HostTensor& conv = c->weights().acoustic.down_w[0];  // [C1, C0, 2r]
  ASSERT_EQ(conv.shape.size(), 3u);
  const Tensor v = conv.view();
  EXPECT_EQ(v.ndim, 2);
  EXPECT_EQ(v.rows(), conv.shape[0]);
  EXPECT_EQ(v.cols(), conv.shape[1] * conv.shape[2]);
  EXPECT_EQ(v.data, conv.data);
  EXPECT_EQ(v.dtype, conv.dtype);
  const Tensor b = c->weights().acoustic.down_b[0].view();
  EXPECT_EQ(b.ndim, 1);
  EXPECT_EQ(b.numel(), conv.shape[0]);
}

TEST(Checkpoint, NamesJsonAgreesWithTheBuiltInNormalisation) {
  const auto map = names_json();
  ASSERT_FALSE(map.empty());
  for (const auto& [hf, orig] : map) EXPECT_EQ(canonical_tensor_name(hf), orig) << hf;
}

TEST(Checkpoint, TransformersOnDiskNamesBindByteIdenticalTensors) {
  const std::string dir = test::renamed_model_dir("ckpt-hfdisk", test::golden_hf_dir() + "/config.json", hf_on_disk, false);
  test::ScopedDir cleanup_dir(dir);
  ASSERT_FALSE(dir.empty());
  auto archive = SafetensorsArchive::open_dir(dir);
  ASSERT_TRUE(archive.is_ok());
  ASSERT_TRUE((*archive)->find("language_model.model.embed_tokens.weight").has_value());
  auto disk = open_ok(dir);
  auto hf = open_ok(test::golden_hf_dir());
  ASSERT_NE(disk, nullptr);
  ASSERT_NE(hf, nullptr);
  expect_same_weights(*hf, *disk);
}

TEST(Checkpoint, VllmNamesBindByteIdenticalTensors) {
  const std::string dir = test::renamed_model_dir("ckpt-vllm", test::golden_dir() + "/model-orig/config.json",
                                                  [](const std::string& n) { return vllm_name(to_original(n)); });
  test::ScopedDir cleanup_dir(dir);
  ASSERT_FALSE(dir.empty());
  auto archive = SafetensorsArchive::open_dir(dir);
  ASSERT_TRUE(archive.is_ok());
  ASSERT_TRUE((*archive)->find("audio_encoder.acoustic_tokenizer.encoder.head.conv.conv.weight").has_value());
  auto vllm = open_ok(dir);
  auto hf = open_ok(test::golden_hf_dir());
  ASSERT_NE(vllm, nullptr);
  ASSERT_NE(hf, nullptr);
  expect_same_weights(*hf, *vllm);
}

// A copy of the golden HF model whose tensors are edited by `edit` before writing.
std::string edited_model_dir(const std::string& prefix, const std::function<void(std::vector<HostTensor>&)>& edit,
                             const std::string& config = "") {
  const std::string dir = test::make_temp_dir(prefix);
  if (config.empty())
    std::filesystem::copy_file(test::golden_hf_dir() + "/config.json", dir + "/config.json");
  else
    test::write_file(dir + "/config.json", config);
  static auto src = SafetensorsArchive::open_dir(test::golden_hf_dir());
  if (!src.is_ok()) return "";
  std::vector<HostTensor> tensors;
  for (const auto& n : (*src)->names()) tensors.push_back(*(*src)->find(n));
  edit(tensors);
  if (!write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}).is_ok()) return "";
  return dir;
}

TEST(Checkpoint, MisshapedTensorFailsNamingItAndBothShapes) {
  const std::string victim = "model.language_model.layers.0.self_attn.k_proj.weight";
  std::vector<int64_t> old_shape;
  const std::string dir = edited_model_dir("ckpt-shape", [&](std::vector<HostTensor>& ts) {
    for (auto& t : ts)
      if (t.name == victim) {
        old_shape = t.shape;
        t.shape = {t.shape[1], t.shape[0]};  // same bytes, transposed shape
      }
  });
  test::ScopedDir cleanup_dir(dir);
  ASSERT_FALSE(dir.empty());
  ASSERT_EQ(old_shape.size(), 2u);
  ASSERT_NE(old_shape[0], old_shape[1]);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'" + victim + "'"));
  EXPECT_THAT(c.status().message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(c.status().message(),
              HasSubstr("requires [" + std::to_string(old_shape[0]) + ", " + std::to_string(old_shape[1]) + "]"));
}

TEST(Checkpoint, EncoderConvWithWrongKernelFailsNamingIt) {
  const std::string victim = "model.semantic_tokenizer_encoder.head.conv.weight";
  const std::string dir = edited_model_dir("ckpt-kernel", [&](std::vector<HostTensor>& ts) {
    for (auto& t : ts)
      if (t.name == victim) t.shape = {t.shape[0], t.shape[1] * t.shape[2], 1};
  });
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'" + victim + "'"));
}

TEST(Checkpoint, MissingTensorFailsNamingIt) {
  const std::string dir = edited_model_dir("ckpt-missing", [](std::vector<HostTensor>& ts) {
    std::erase_if(ts, [](const HostTensor& t) { return t.name == "model.acoustic_tokenizer_encoder.stem.stage.0.ffn_gamma"; });
  });
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("model.acoustic_tokenizer.encoder.stages.0.0.ffn_gamma"));
}

TEST(Checkpoint, UnknownTensorIsRefused) {
  std::vector<uint16_t> junk(4, 0);
  const std::string dir = edited_model_dir("ckpt-unknown", [&](std::vector<HostTensor>& ts) {
    HostTensor t;
    t.name = "model.diffusion_head.proj.weight";
    t.shape = {2, 2};
    t.data = junk.data();
    ts.push_back(t);
  });
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown tensor 'model.diffusion_head.proj.weight'"));
}

TEST(Checkpoint, ExtraDecoderLayerBeyondTheConfigIsRefused) {
  const std::string dir = edited_model_dir("ckpt-extra-layer", [](std::vector<HostTensor>& ts) {
    for (size_t i = 0, n = ts.size(); i < n; ++i)
      if (ts[i].name == "model.language_model.layers.0.input_layernorm.weight") {
        HostTensor t = ts[i];
        t.name = "model.language_model.layers.999.input_layernorm.weight";
        ts.push_back(t);
      }
  });
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("layers.999"));
}

TEST(Checkpoint, AcousticDecoderTensorsAreSkippedNotBound) {
  // The decoder's tensors go into a second shard with a dtype and shapes no weight could have:
  // the load succeeds only if they are never interpreted.
  const std::string dir = test::original_layout_dir();
  test::ScopedDir cleanup_dir(dir);
  ASSERT_FALSE(dir.empty());
  std::vector<uint8_t> junk(64, 0xff);
  std::vector<HostTensor> dec;
  for (const char* n : {"model.acoustic_tokenizer.decoder.upsample_layers.0.0.conv.conv.weight",
                        "model.acoustic_tokenizer.decoder.head.conv.conv.bias"}) {
    HostTensor t;
    t.name = n;
    t.dtype = DType::kI8;
    t.shape = {64};
    t.data = junk.data();
    dec.push_back(t);
  }
  ASSERT_TRUE(write_safetensors(dir + "/model-decoder.safetensors", dec).is_ok());
  std::string index = test::read_file(dir + "/model.safetensors.index.json");
  const std::string anchor = "\"weight_map\": {";
  index.insert(index.find(anchor) + anchor.size(),
               "\n    \"model.acoustic_tokenizer.decoder.upsample_layers.0.0.conv.conv.weight\": \"model-decoder.safetensors\","
               "\n    \"model.acoustic_tokenizer.decoder.head.conv.conv.bias\": \"model-decoder.safetensors\",");
  test::write_file(dir + "/model.safetensors.index.json", index);
  auto c = open_ok(dir);
  ASSERT_NE(c, nullptr);
  std::set<std::string> skipped(c->skipped().begin(), c->skipped().end());
  EXPECT_EQ(skipped, (std::set<std::string>{"model.acoustic_tokenizer.decoder.head.conv.conv.bias",
                                            "model.acoustic_tokenizer.decoder.upsample_layers.0.0.conv.conv.weight"}));
  for (const HostTensor* t : c->bound_tensors()) EXPECT_FALSE(starts_with(t->name, "model.acoustic_tokenizer.decoder."));
}

std::string config_with_tie(bool tied) {
  std::string cfg = test::read_file(test::golden_hf_dir() + "/config.json");
  const std::string from = tied ? "\"tie_word_embeddings\": false" : "\"tie_word_embeddings\": true";
  const std::string to = tied ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false";
  for (size_t p; (p = cfg.find(from)) != std::string::npos;) cfg.replace(p, from.size(), to);
  return cfg;
}

TEST(Checkpoint, TiedModelWithoutLmHeadUsesTheEmbedding) {
  const std::string dir = edited_model_dir(
      "ckpt-tied", [](std::vector<HostTensor>& ts) { std::erase_if(ts, [](const HostTensor& t) { return t.name == "lm_head.weight"; }); },
      config_with_tie(true));
  test::ScopedDir cleanup_dir(dir);
  auto c = open_ok(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->lm_head_tied());
  EXPECT_EQ(c->weights().decoder.lm_head.data, c->weights().decoder.embed.data);
  EXPECT_EQ(c->weights().decoder.lm_head.shape, c->weights().decoder.embed.shape);
  EXPECT_EQ(c->weights().decoder.lm_head.view().rows(), c->spec().decoder.vocab_size);
}

TEST(Checkpoint, UntiedModelWithoutLmHeadFailsNamingIt) {
  const std::string dir = edited_model_dir(
      "ckpt-untied", [](std::vector<HostTensor>& ts) { std::erase_if(ts, [](const HostTensor& t) { return t.name == "lm_head.weight"; }); },
      config_with_tie(false));
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'lm_head.weight'"));
  EXPECT_THAT(c.status().message(), HasSubstr("not tied"));
}

TEST(Checkpoint, UntiedModelBindsItsOwnLmHead) {
  const std::string dir = edited_model_dir(
      "ckpt-untied-ok",
      [](std::vector<HostTensor>& ts) {
        std::erase_if(ts, [](const HostTensor& t) { return t.name == "lm_head.weight"; });
        for (size_t i = 0, n = ts.size(); i < n; ++i)
          if (ts[i].name == "model.language_model.embed_tokens.weight") {
            HostTensor t = ts[i];
            t.name = "lm_head.weight";
            ts.push_back(t);
          }
      },
      config_with_tie(false));
  test::ScopedDir cleanup_dir(dir);
  auto c = open_ok(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->lm_head_tied());
  EXPECT_EQ(c->weights().decoder.lm_head.name, "lm_head.weight");
  EXPECT_NE(c->weights().decoder.lm_head.data, c->weights().decoder.embed.data);
}

TEST(Checkpoint, TiedModelWithAnExplicitLmHeadPrefersIt) {
  const std::string dir = edited_model_dir(
      "ckpt-tied-explicit",
      [](std::vector<HostTensor>& ts) {
        std::erase_if(ts, [](const HostTensor& t) { return t.name == "lm_head.weight"; });
        for (size_t i = 0, n = ts.size(); i < n; ++i)
          if (ts[i].name == "model.language_model.embed_tokens.weight") {
            HostTensor t = ts[i];
            t.name = "lm_head.weight";
            ts.push_back(t);
          }
      },
      config_with_tie(true));
  test::ScopedDir cleanup_dir(dir);
  auto c = open_ok(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->lm_head_tied());
  EXPECT_EQ(c->weights().decoder.lm_head.name, "lm_head.weight");
}

TEST(Checkpoint, NonFloatWeightIsRefused) {
  const std::string dir = edited_model_dir("ckpt-int", [](std::vector<HostTensor>& ts) {
    for (auto& t : ts)
      if (t.name == "model.language_model.norm.weight") {
        t.dtype = DType::kI8;
        t.shape = {t.shape[0] * 2};
      }
  });
  test::ScopedDir cleanup_dir(dir);
  auto c = Checkpoint::open(dir);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(c.status().message(), HasSubstr("'model.language_model.norm.weight'"));
}

TEST(Checkpoint, BadDirectoriesFailWithTheirPath) {
  auto none = Checkpoint::open("/nonexistent/model");
  ASSERT_FALSE(none.is_ok());
  EXPECT_THAT(none.status().message(), HasSubstr("/nonexistent/model"));
  const std::string cfg_only = test::make_temp_dir("ckpt-cfg-only");
  test::ScopedDir cleanup(cfg_only);
  std::filesystem::copy_file(test::golden_hf_dir() + "/config.json", cfg_only + "/config.json");
  auto no_weights = Checkpoint::open(cfg_only);
  ASSERT_FALSE(no_weights.is_ok());
  EXPECT_THAT(no_weights.status().message(), HasSubstr("no *.safetensors"));
}

TEST(TensorNames, EverySchemeNormalisesToTheOriginalName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"acoustic_tokenizer_encoder.stem.conv.conv.weight", "model.acoustic_tokenizer.encoder.downsample_layers.0.0.conv.conv.weight"},
      {"semantic_tokenizer_encoder.conv_layers.5.conv.conv.bias", "model.semantic_tokenizer.encoder.downsample_layers.6.0.conv.conv.bias"},
      {"model.semantic_tokenizer_encoder.conv_layers.5.stage.7.mixer.conv.weight",
       "model.semantic_tokenizer.encoder.stages.6.7.mixer.conv.conv.conv.weight"},
      {"model.acoustic_tokenizer_encoder.stem.stage.2.ffn.linear1.bias", "model.acoustic_tokenizer.encoder.stages.0.2.ffn.linear1.bias"},
      {"model.acoustic_tokenizer_encoder.head.conv.bias", "model.acoustic_tokenizer.encoder.head.conv.conv.bias"},
      {"multi_modal_projector.acoustic_norm.weight", "model.acoustic_connector.norm.weight"},
      {"model.multi_modal_projector.semantic_linear_2.bias", "model.semantic_connector.fc2.bias"},
      {"language_model.model.layers.3.mlp.up_proj.weight", "model.language_model.layers.3.mlp.up_proj.weight"},
      {"language_model.lm_head.weight", "lm_head.weight"},
      {"model.language_model.model.norm.weight", "model.language_model.norm.weight"},
      {"audio_encoder.acoustic_connector.fc1.weight", "model.acoustic_connector.fc1.weight"},
      {"audio_encoder.semantic_tokenizer.encoder.stages.1.0.gamma", "model.semantic_tokenizer.encoder.stages.1.0.gamma"},
      {"model.acoustic_tokenizer.encoder.stages.0.0.norm.weight", "model.acoustic_tokenizer.encoder.stages.0.0.norm.weight"},
      {"lm_head.weight", "lm_head.weight"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(canonical_tensor_name(in), out) << in;
  EXPECT_TRUE(is_unused_by_asr(canonical_tensor_name("audio_encoder.acoustic_tokenizer.decoder.head.conv.conv.weight")));
  EXPECT_TRUE(is_unused_by_asr("model.language_model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(is_unused_by_asr("model.acoustic_tokenizer.encoder.head.conv.conv.weight"));
}

}  // namespace
}  // namespace vv
