#include "engine/checkpoint/model_spec.h"

#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

namespace vv {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// A JSON object with the path that names it in error messages ("config.json: text_config").
struct Obj {
  object o;
  std::string where;

  bool has(const char* key) const {
    element e;
    return o[key].get(e) == simdjson::SUCCESS && !e.is_null();
  }
  std::optional<element> get(const char* key) const {
    element e;
    if (o[key].get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
    return e;
  }
  std::string field(const char* key) const { return where + "." + key; }

  Result<int64_t> int_or(const char* key, std::optional<int64_t> dflt) const {
    auto e = get(key);
    if (!e) {
      if (dflt) return *dflt;
      return not_found(field(key) + " is missing");
    }
    int64_t v = 0;
    if (e->get_int64().get(v) != simdjson::SUCCESS) return invalid_argument(field(key) + " is not an integer");
    return v;
  }
  Result<int> positive_int(const char* key, std::optional<int64_t> dflt = std::nullopt) const {
    VV_ASSIGN_OR_RETURN(int64_t v, int_or(key, dflt));
    if (v <= 0 || v > std::numeric_limits<int>::max())
      return invalid_argument(field(key) + " = " + std::to_string(v) + " is not a positive 32-bit integer");
    return static_cast<int>(v);
  }
  Result<double> number_or(const char* key, std::optional<double> dflt) const {
    auto e = get(key);
    if (!e) {
      if (dflt) return *dflt;
      return not_found(field(key) + " is missing");
    }
    double v = 0;
    if (e->get_double().get(v) != simdjson::SUCCESS) return invalid_argument(field(key) + " is not a number");
    return v;
  }
  Result<bool> bool_or(const char* key, bool dflt) const {
    auto e = get(key);
    if (!e) return dflt;
    bool v = false;
    if (e->get_bool().get(v) != simdjson::SUCCESS) return invalid_argument(field(key) + " is not a boolean");
    return v;
  }
  Result<std::string> string_or(const char* key, std::optional<std::string> dflt) const {
    auto e = get(key);
    if (!e) {
      if (dflt) return *dflt;
      return not_found(field(key) + " is missing");
    }
    std::string_view v;
    if (e->get_string().get(v) != simdjson::SUCCESS) return invalid_argument(field(key) + " is not a string");
    return std::string(v);
  }
  Result<Obj> child(const char* key) const {
    auto e = get(key);
    if (!e) return not_found(field(key) + " is missing");
    Obj c;
    c.where = field(key);
    if (e->get_object().get(c.o) != simdjson::SUCCESS) return invalid_argument(c.where + " is not an object");
    return c;
  }
  // A list of positive (or, for depths, non-negative) ints; also "3-3-8" when allow_string.
  Result<std::vector<int>> int_list(const char* key, bool allow_string, int min_value) const {
    auto e = get(key);
    if (!e) return not_found(field(key) + " is missing");
    std::vector<int> out;
    std::string_view s;
    if (allow_string && e->get_string().get(s) == simdjson::SUCCESS) {
      std::stringstream ss{std::string(s)};
      std::string part;
      while (std::getline(ss, part, '-')) {
        int v = 0;
        size_t used = 0;
        try {
          v = std::stoi(part, &used);
        } catch (...) {
          used = 0;
        }
        if (used == 0 || used != part.size())
          return invalid_argument(field(key) + " = \"" + std::string(s) + "\" is not a dash-separated list of integers");
        out.push_back(v);
      }
    } else {
      simdjson::dom::array arr;
      if (e->get_array().get(arr) != simdjson::SUCCESS)
        return invalid_argument(field(key) + (allow_string ? " is neither a list nor a string" : " is not a list"));
      for (auto x : arr) {
        int64_t v = 0;
        if (x.get_int64().get(v) != simdjson::SUCCESS || v > std::numeric_limits<int>::max())
          return invalid_argument(field(key) + " holds a value that is not an integer");
        out.push_back(static_cast<int>(v));
      }
    }
    for (int v : out)
      if (v < min_value) return invalid_argument(field(key) + " holds " + std::to_string(v) + " (below " + std::to_string(min_value) + ")");
    return out;
  }
  // Fails when the key is present with a value other than `expected` (a setting we do not implement).
  Status require_string(const char* key, const char* expected) const {
    auto e = get(key);
    if (!e) return Status::ok();
    std::string_view v;
    if (e->get_string().get(v) != simdjson::SUCCESS || v != expected)
      return unsupported(field(key) + " must be \"" + expected + "\"");
    return Status::ok();
  }
  Status require_bool(const char* key, bool expected) const {
    auto e = get(key);
    if (!e) return Status::ok();
    bool v = !expected;
    if (e->get_bool().get(v) != simdjson::SUCCESS || v != expected)
      return unsupported(field(key) + " must be " + (expected ? "true" : "false"));
    return Status::ok();
  }
};

Status validate_encoder(const EncoderSpec& e, const std::string& where) {
  if (e.ratios.empty()) return invalid_argument(where + ": the downsampling ratios are empty");
  if (e.depths.size() != e.ratios.size() + 1)
    return invalid_argument(where + ": " + std::to_string(e.depths.size()) + " depths for " +
                            std::to_string(e.ratios.size()) + " ratios (need ratios + 1, stem stage first)");
  if (e.ratios.size() > 20 || (static_cast<int64_t>(e.num_filters) << e.ratios.size()) > (1 << 24))
    return invalid_argument(where + ": num_filters << stages overflows the channel count");
  int64_t hop = 1;
  for (int r : e.ratios) {
    hop *= r;
    if (hop > (1 << 30)) return invalid_argument(where + ": the product of the ratios overflows");
  }
  if (e.kernel_size <= 0 || e.ffn_expansion <= 0 || e.channels <= 0 || e.vae_dim <= 0)
    return invalid_argument(where + ": non-positive kernel_size, ffn_expansion, channels or vae_dim");
  return Status::ok();
}

// Original layout: acoustic_tokenizer_config / semantic_tokenizer_config.
Result<EncoderSpec> parse_original_encoder(const Obj& root, const char* key, const char* vae_key, int vae_default) {
  VV_ASSIGN_OR_RETURN(Obj c, root.child(key));
  EncoderSpec e;
  VV_RETURN_IF_ERROR(c.require_bool("causal", true));
  VV_RETURN_IF_ERROR(c.require_string("mixer_layer", "depthwise_conv"));
  VV_RETURN_IF_ERROR(c.require_string("conv_norm", "none"));
  VV_RETURN_IF_ERROR(c.require_string("layernorm", "RMSNorm"));
  VV_RETURN_IF_ERROR(c.require_string("pad_mode", "constant"));
  VV_RETURN_IF_ERROR(c.require_bool("disable_last_norm", true));
  VV_RETURN_IF_ERROR(c.require_bool("conv_bias", true));
  VV_RETURN_IF_ERROR(c.require_bool("layernorm_elementwise_affine", true));
  VV_ASSIGN_OR_RETURN(e.channels, c.positive_int("channels", 1));
  VV_ASSIGN_OR_RETURN(e.num_filters, c.positive_int("encoder_n_filters"));
  VV_ASSIGN_OR_RETURN(auto ratios, c.int_list("encoder_ratios", false, 1));
  e.ratios.assign(ratios.rbegin(), ratios.rend());  // listed deepest-first, applied reversed
  VV_ASSIGN_OR_RETURN(e.depths, c.int_list("encoder_depths", true, 0));
  if (c.has("vae_dim")) {
    VV_ASSIGN_OR_RETURN(e.vae_dim, c.positive_int("vae_dim"));
  } else {
    VV_ASSIGN_OR_RETURN(e.vae_dim, root.positive_int(vae_key, vae_default));
  }
  VV_ASSIGN_OR_RETURN(e.kernel_size, c.positive_int("kernel_size", 7));
  VV_ASSIGN_OR_RETURN(e.ffn_expansion, c.positive_int("ffn_expansion", 4));
  VV_ASSIGN_OR_RETURN(double eps, c.number_or("layernorm_eps", 1e-5));
  e.rms_norm_eps = static_cast<float>(eps);
  VV_ASSIGN_OR_RETURN(e.std_dist_type, c.string_or("std_dist_type", std::string("none")));
  VV_ASSIGN_OR_RETURN(double fix_std, c.number_or("fix_std", 0.0));
  e.fix_std = static_cast<float>(fix_std);
  VV_RETURN_IF_ERROR(validate_encoder(e, c.where));
  return e;
}

// Transformers layout: acoustic_tokenizer_encoder_config / semantic_tokenizer_encoder_config.
Result<EncoderSpec> parse_hf_encoder(const Obj& root, const char* key, bool acoustic) {
  VV_ASSIGN_OR_RETURN(Obj c, root.child(key));
  EncoderSpec e;
  VV_RETURN_IF_ERROR(c.require_string("hidden_act", "gelu"));
  VV_ASSIGN_OR_RETURN(e.channels, c.positive_int("channels", 1));
  VV_ASSIGN_OR_RETURN(e.num_filters, c.positive_int("num_filters"));
  VV_ASSIGN_OR_RETURN(e.ratios, c.int_list("downsampling_ratios", false, 1));
  VV_ASSIGN_OR_RETURN(e.depths, c.int_list("depths", true, 0));
  VV_ASSIGN_OR_RETURN(e.vae_dim, c.positive_int("hidden_size"));
  VV_ASSIGN_OR_RETURN(e.kernel_size, c.positive_int("kernel_size", 7));
  VV_ASSIGN_OR_RETURN(e.ffn_expansion, c.positive_int("ffn_expansion", 4));
  VV_ASSIGN_OR_RETURN(double eps, c.number_or("rms_norm_eps", 1e-5));
  e.rms_norm_eps = static_cast<float>(eps);
  // transformers samples noise only on the acoustic path, with sigma scale vae_std = fix_std/0.8.
  if (acoustic) {
    VV_ASSIGN_OR_RETURN(double vae_std, c.number_or("vae_std", 0.625));
    e.std_dist_type = "gaussian";
    e.fix_std = static_cast<float>(vae_std * 0.8);
  } else {
    e.std_dist_type = "none";
    e.fix_std = 0.f;
  }
  VV_RETURN_IF_ERROR(validate_encoder(e, c.where));
  return e;
}

Result<DecoderSpec> parse_decoder(const Obj& root, const Obj& c) {
  DecoderSpec d;
  VV_RETURN_IF_ERROR(c.require_string("model_type", "qwen2"));
  VV_RETURN_IF_ERROR(c.require_string("hidden_act", "silu"));
  VV_RETURN_IF_ERROR(c.require_bool("use_sliding_window", false));
  if (c.has("rope_scaling")) return unsupported(c.field("rope_scaling") + " must be null (only plain RoPE is implemented)");
  VV_ASSIGN_OR_RETURN(d.vocab_size, c.positive_int("vocab_size"));
  VV_ASSIGN_OR_RETURN(d.hidden_size, c.positive_int("hidden_size"));
  VV_ASSIGN_OR_RETURN(d.intermediate_size, c.positive_int("intermediate_size"));
  VV_ASSIGN_OR_RETURN(d.num_layers, c.positive_int("num_hidden_layers"));
  VV_ASSIGN_OR_RETURN(d.num_heads, c.positive_int("num_attention_heads"));
  VV_ASSIGN_OR_RETURN(d.num_kv_heads, c.positive_int("num_key_value_heads", d.num_heads));
  if (d.num_heads % d.num_kv_heads != 0)
    return invalid_argument(c.field("num_attention_heads") + " = " + std::to_string(d.num_heads) +
                            " is not a multiple of num_key_value_heads = " + std::to_string(d.num_kv_heads));
  if (c.has("head_dim")) {
    VV_ASSIGN_OR_RETURN(d.head_dim, c.positive_int("head_dim"));
  } else {
    if (d.hidden_size % d.num_heads != 0)
      return invalid_argument(c.field("hidden_size") + " is not a multiple of num_attention_heads and head_dim is absent");
    d.head_dim = d.hidden_size / d.num_heads;
  }
  if (d.head_dim % 2 != 0) return invalid_argument(c.field("head_dim") + " must be even for RoPE");
  VV_ASSIGN_OR_RETURN(double eps, c.number_or("rms_norm_eps", 1e-6));
  d.rms_norm_eps = static_cast<float>(eps);
  if (c.has("rope_theta")) {
    VV_ASSIGN_OR_RETURN(d.rope_theta, c.number_or("rope_theta", std::nullopt));
  } else if (c.has("rope_parameters")) {
    VV_ASSIGN_OR_RETURN(Obj rp, c.child("rope_parameters"));
    VV_RETURN_IF_ERROR(rp.require_string("rope_type", "default"));
    VV_ASSIGN_OR_RETURN(d.rope_theta, rp.number_or("rope_theta", std::nullopt));
  } else {
    return not_found(c.field("rope_theta") + " is missing (and there is no " + c.field("rope_parameters") + ".rope_theta)");
  }
  if (!(d.rope_theta > 0)) return invalid_argument(c.field("rope_theta") + " must be positive");
  if (c.has("tie_word_embeddings")) {
    VV_ASSIGN_OR_RETURN(d.tie_word_embeddings, c.bool_or("tie_word_embeddings", false));
  } else {
    VV_ASSIGN_OR_RETURN(d.tie_word_embeddings, root.bool_or("tie_word_embeddings", false));
  }
  VV_ASSIGN_OR_RETURN(d.max_position_embeddings, c.int_or("max_position_embeddings", 32768));
  if (d.max_position_embeddings <= 0) return invalid_argument(c.field("max_position_embeddings") + " must be positive");
  return d;
}

Status parse_preprocessor(std::string_view text, const std::string& source, ModelSpec& spec) {
  simdjson::dom::parser parser;
  simdjson::padded_string json(text);
  element root;
  if (auto err = parser.parse(json).get(root); err != simdjson::SUCCESS)
    return invalid_argument(source + ": not valid JSON: " + simdjson::error_message(err));
  Obj p;
  p.where = source;
  if (root.get_object().get(p.o) != simdjson::SUCCESS) return invalid_argument(source + ": not a JSON object");
  VV_ASSIGN_OR_RETURN(spec.normalize_audio, p.bool_or("normalize_audio", true));
  VV_ASSIGN_OR_RETURN(double db, p.number_or("target_dB_FS", -25.0));
  spec.target_dbfs = static_cast<float>(db);
  VV_ASSIGN_OR_RETURN(double eps, p.number_or("eps", 1e-6));
  spec.norm_eps = static_cast<float>(eps);
  const char* rate_key = p.has("target_sample_rate") ? "target_sample_rate" : "sampling_rate";
  VV_ASSIGN_OR_RETURN(spec.sample_rate, p.positive_int(rate_key, spec.sample_rate));
  VV_ASSIGN_OR_RETURN(int ratio, p.positive_int("speech_tok_compress_ratio", spec.acoustic.hop()));
  if (ratio != spec.acoustic.hop())
    return invalid_argument(p.field("speech_tok_compress_ratio") + " = " + std::to_string(ratio) +
                            " differs from the encoder hop " + std::to_string(spec.acoustic.hop()));
  return Status::ok();
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int EncoderSpec::hop() const {
  int h = 1;
  for (int r : ratios) h *= r;
  return h;
}

const char* layout_name(CheckpointLayout layout) {
  return layout == CheckpointLayout::kOriginal ? "original" : "transformers";
}

Result<ModelSpec> parse_model_spec(std::string_view config_json, std::string_view preprocessor_json,
                                   const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::padded_string json(config_json);
  element root_el;
  if (auto err = parser.parse(json).get(root_el); err != simdjson::SUCCESS)
    return invalid_argument(source + ": not valid JSON: " + simdjson::error_message(err));
  Obj root;
  root.where = source;
  if (root_el.get_object().get(root.o) != simdjson::SUCCESS) return invalid_argument(source + ": not a JSON object");

  ModelSpec spec;
  if (root.has("text_config") || root.has("acoustic_tokenizer_encoder_config")) {
    spec.layout = CheckpointLayout::kTransformers;
    VV_ASSIGN_OR_RETURN(spec.acoustic, parse_hf_encoder(root, "acoustic_tokenizer_encoder_config", true));
    VV_ASSIGN_OR_RETURN(spec.semantic, parse_hf_encoder(root, "semantic_tokenizer_encoder_config", false));
    VV_ASSIGN_OR_RETURN(Obj text, root.child("text_config"));
    VV_ASSIGN_OR_RETURN(spec.decoder, parse_decoder(root, text));
    VV_ASSIGN_OR_RETURN(spec.chunk_size, root.int_or("acoustic_tokenizer_chunk_size", int64_t{1440000}));
  } else if (root.has("decoder_config")) {
    spec.layout = CheckpointLayout::kOriginal;
    VV_ASSIGN_OR_RETURN(spec.acoustic, parse_original_encoder(root, "acoustic_tokenizer_config", "acoustic_vae_dim", 64));
    VV_ASSIGN_OR_RETURN(spec.semantic, parse_original_encoder(root, "semantic_tokenizer_config", "semantic_vae_dim", 128));
    VV_ASSIGN_OR_RETURN(Obj dec, root.child("decoder_config"));
    VV_ASSIGN_OR_RETURN(spec.decoder, parse_decoder(root, dec));
  } else {
    return not_found(source + ": neither text_config (transformers layout) nor decoder_config (original layout) is present");
  }
  VV_ASSIGN_OR_RETURN(spec.audio_token_id, root.positive_int("audio_token_id", spec.audio_token_id));
  VV_ASSIGN_OR_RETURN(spec.audio_bos_token_id, root.positive_int("audio_bos_token_id", spec.audio_bos_token_id));
  VV_ASSIGN_OR_RETURN(spec.audio_eos_token_id, root.positive_int("audio_eos_token_id", spec.audio_eos_token_id));
  VV_ASSIGN_OR_RETURN(spec.sample_rate, root.positive_int("target_sample_rate", spec.sample_rate));
  if (spec.acoustic.hop() != spec.semantic.hop())
    return invalid_argument(source + ": the acoustic hop " + std::to_string(spec.acoustic.hop()) +
                            " differs from the semantic hop " + std::to_string(spec.semantic.hop()));
  if (spec.chunk_size <= 0 || spec.chunk_size % spec.acoustic.hop() != 0)
    return invalid_argument(source + ".acoustic_tokenizer_chunk_size = " + std::to_string(spec.chunk_size) +
                            " is not a positive multiple of the hop " + std::to_string(spec.acoustic.hop()));
  if (!preprocessor_json.empty()) {
    const std::string pre_source = (std::filesystem::path(source).parent_path() / "preprocessor_config.json").string();
    VV_RETURN_IF_ERROR(parse_preprocessor(preprocessor_json, pre_source, spec));
  }
  return spec;
}

Result<ModelSpec> load_model_spec(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(config_path, ec)) return not_found(config_path + ": no such file");
  VV_ASSIGN_OR_RETURN(std::string config, read_file(config_path));
  std::string pre;
  const std::string pre_path = (fs::path(model_dir) / "preprocessor_config.json").string();
  if (fs::exists(pre_path, ec)) {
    VV_ASSIGN_OR_RETURN(pre, read_file(pre_path));
  }
  return parse_model_spec(config, pre, config_path);
}

}  // namespace vv
