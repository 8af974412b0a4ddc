#include "engine/checkpoint/tensor_names.h"

#include <optional>

namespace vv {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Replaces prefix `from` of s by `to`; false when s does not start with it.
bool replace_prefix(std::string& s, std::string_view from, std::string_view to) {
  if (!starts_with(s, from)) return false;
  s = std::string(to) + s.substr(from.size());
  return true;
}

// Reads "<digits>." from the front of rest.
std::optional<int> take_index(std::string_view& rest) {
  size_t i = 0;
  int v = 0;
  while (i < rest.size() && i < 9 && rest[i] >= '0' && rest[i] <= '9') v = v * 10 + (rest[i++] - '0');
  if (i == 0 || i >= rest.size() || rest[i] != '.') return std::nullopt;
  rest.remove_prefix(i + 1);
  return v;
}

// Inside a ConvNeXt block: transformers' mixer.conv.X is the original mixer.conv.conv.conv.X.
std::string block_suffix(std::string_view b) {
  if (starts_with(b, "mixer.conv.") && !starts_with(b, "mixer.conv.conv.")) return "mixer.conv.conv.conv." + std::string(b.substr(11));
  return std::string(b);
}

// transformers encoder suffix (after "model.X_tokenizer_encoder.") -> original suffix (after
// "model.X_tokenizer.encoder."); unchanged when it follows no known rule.
std::string hf_encoder_suffix(std::string_view rest) {
  const std::string_view orig = rest;
  if (starts_with(rest, "stem.conv.conv.")) return "downsample_layers.0.0.conv.conv." + std::string(rest.substr(15));
  if (starts_with(rest, "stem.stage.")) {
    rest.remove_prefix(11);
    if (auto j = take_index(rest)) return "stages.0." + std::to_string(*j) + "." + block_suffix(rest);
    return std::string(orig);
  }
  if (starts_with(rest, "conv_layers.")) {
    rest.remove_prefix(12);
    auto i = take_index(rest);
    if (!i) return std::string(orig);
    if (starts_with(rest, "conv.conv."))
      return "downsample_layers." + std::to_string(*i + 1) + ".0.conv.conv." + std::string(rest.substr(10));
    if (starts_with(rest, "stage.")) {
      rest.remove_prefix(6);
      if (auto j = take_index(rest))
        return "stages." + std::to_string(*i + 1) + "." + std::to_string(*j) + "." + block_suffix(rest);
    }
    return std::string(orig);
  }
  if (starts_with(rest, "head.conv.") && !starts_with(rest, "head.conv.conv."))
    return "head.conv.conv." + std::string(rest.substr(10));
  return std::string(orig);
}

}  // namespace

std::string canonical_tensor_name(std::string_view stored) {
  std::string s(stored);
  // Prefixes: transformers on disk (LLaVA style) and the vLLM plugin's in-process names.
  replace_prefix(s, "language_model.lm_head.", "lm_head.") ||
      replace_prefix(s, "language_model.model.", "model.language_model.") ||
      replace_prefix(s, "language_model.", "model.language_model.") ||
      replace_prefix(s, "audio_encoder.", "model.") ||
      replace_prefix(s, "acoustic_tokenizer_encoder.", "model.acoustic_tokenizer_encoder.") ||
      replace_prefix(s, "semantic_tokenizer_encoder.", "model.semantic_tokenizer_encoder.") ||
      replace_prefix(s, "multi_modal_projector.", "model.multi_modal_projector.");
  replace_prefix(s, "model.language_model.model.", "model.language_model.");

  for (const char* kind : {"acoustic", "semantic"}) {
    const std::string hf = std::string("model.") + kind + "_tokenizer_encoder.";
    if (starts_with(s, hf))
      return std::string("model.") + kind + "_tokenizer.encoder." + hf_encoder_suffix(std::string_view(s).substr(hf.size()));
    const std::string proj = std::string("model.multi_modal_projector.") + kind + "_";
    if (starts_with(s, proj)) {
      std::string_view rest = std::string_view(s).substr(proj.size());
      const std::string conn = std::string("model.") + kind + "_connector.";
      if (starts_with(rest, "linear_1.")) return conn + "fc1." + std::string(rest.substr(9));
      if (starts_with(rest, "linear_2.")) return conn + "fc2." + std::string(rest.substr(9));
      if (starts_with(rest, "norm.")) return conn + "norm." + std::string(rest.substr(5));
      return s;
    }
  }
  return s;
}

bool is_unused_by_asr(std::string_view canonical) {
  constexpr std::string_view kInvFreq = "rotary_emb.inv_freq";
  return starts_with(canonical, "model.acoustic_tokenizer.decoder.") ||
         (canonical.size() >= kInvFreq.size() && canonical.substr(canonical.size() - kInvFreq.size()) == kInvFreq);
}

}  // namespace vv
