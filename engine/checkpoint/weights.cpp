#include "engine/checkpoint/weights.h"

namespace vv {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor HostTensor::view() const {
  void* p = const_cast<void*>(data);
  if (shape.size() <= 1) return Tensor::vector(p, dtype, numel());
  return Tensor::matrix(p, dtype, shape[0], shape[0] == 0 ? 0 : numel() / shape[0]);
}

namespace {

using Shape = std::vector<int64_t>;

void encoder_slots(const EncoderSpec& e, const std::string& p, EncoderWeights& w, std::vector<WeightSlot>& out) {
  const int64_t k = e.kernel_size;
  const size_t n = e.ratios.size();
  auto add = [&](std::string name, Shape shape, HostTensor& t) { out.push_back({p + name, std::move(shape), &t, false}); };
  w.down_w.assign(n, {});
  w.down_b.assign(n, {});
  w.stages.assign(n + 1, {});
  const int64_t nf = e.num_filters;
  add("downsample_layers.0.0.conv.conv.weight", {nf, e.channels, k}, w.stem_w);
  add("downsample_layers.0.0.conv.conv.bias", {nf}, w.stem_b);
  for (size_t i = 1; i <= n; ++i) {
    const int64_t cin = e.stage_channels(static_cast<int>(i - 1)), cout = e.stage_channels(static_cast<int>(i));
    const std::string d = "downsample_layers." + std::to_string(i) + ".0.conv.conv.";
    add(d + "weight", {cout, cin, 2 * int64_t{e.ratios[i - 1]}}, w.down_w[i - 1]);
    add(d + "bias", {cout}, w.down_b[i - 1]);
  }
  for (size_t s = 0; s <= n; ++s) {
    const int64_t c = e.stage_channels(static_cast<int>(s)), f = c * e.ffn_expansion;
    w.stages[s].assign(static_cast<size_t>(e.depths[s]), {});
    for (int j = 0; j < e.depths[s]; ++j) {
      auto& b = w.stages[s][static_cast<size_t>(j)];
      const std::string q = "stages." + std::to_string(s) + "." + std::to_string(j) + ".";
      add(q + "norm.weight", {c}, b.norm);
      add(q + "mixer.conv.conv.conv.weight", {c, 1, k}, b.mixer_w);
      add(q + "mixer.conv.conv.conv.bias", {c}, b.mixer_b);
      add(q + "gamma", {c}, b.gamma);
      add(q + "ffn_norm.weight", {c}, b.ffn_norm);
      add(q + "ffn.linear1.weight", {f, c}, b.fc1_w);
      add(q + "ffn.linear1.bias", {f}, b.fc1_b);
      add(q + "ffn.linear2.weight", {c, f}, b.fc2_w);
      add(q + "ffn.linear2.bias", {c}, b.fc2_b);
      add(q + "ffn_gamma", {c}, b.ffn_gamma);
    }
  }
  add("head.conv.conv.weight", {e.vae_dim, e.stage_channels(static_cast<int>(n)), k}, w.head_w);
  add("head.conv.conv.bias", {e.vae_dim}, w.head_b);
}

void connector_slots(int64_t vae, int64_t h, const std::string& p, ConnectorWeights& w, std::vector<WeightSlot>& out) {
  out.push_back({p + "fc1.weight", {h, vae}, &w.fc1_w, false});
  out.push_back({p + "fc1.bias", {h}, &w.fc1_b, false});
  out.push_back({p + "norm.weight", {h}, &w.norm, false});
  out.push_back({p + "fc2.weight", {h, h}, &w.fc2_w, false});
  out.push_back({p + "fc2.bias", {h}, &w.fc2_b, false});
}

void decoder_slots(const DecoderSpec& d, DecoderWeights& w, std::vector<WeightSlot>& out) {
  const std::string p = "model.language_model.";
  const int64_t h = d.hidden_size, q = int64_t{d.num_heads} * d.head_dim, kv = int64_t{d.num_kv_heads} * d.head_dim;
  const int64_t in = d.intermediate_size, v = d.vocab_size;
  out.push_back({p + "embed_tokens.weight", {v, h}, &w.embed, false});
  w.layers.assign(static_cast<size_t>(d.num_layers), {});
  for (int l = 0; l < d.num_layers; ++l) {
    auto& L = w.layers[static_cast<size_t>(l)];
    const std::string s = p + "layers." + std::to_string(l) + ".";
    out.push_back({s + "input_layernorm.weight", {h}, &L.input_norm, false});
    out.push_back({s + "self_attn.q_proj.weight", {q, h}, &L.q_w, false});
    out.push_back({s + "self_attn.q_proj.bias", {q}, &L.q_b, false});
    out.push_back({s + "self_attn.k_proj.weight", {kv, h}, &L.k_w, false});
    out.push_back({s + "self_attn.k_proj.bias", {kv}, &L.k_b, false});
    out.push_back({s + "self_attn.v_proj.weight", {kv, h}, &L.v_w, false});
    out.push_back({s + "self_attn.v_proj.bias", {kv}, &L.v_b, false});
    out.push_back({s + "self_attn.o_proj.weight", {h, q}, &L.o_w, false});
    out.push_back({s + "post_attention_layernorm.weight", {h}, &L.post_norm, false});
    out.push_back({s + "mlp.gate_proj.weight", {in, h}, &L.gate_w, false});
    out.push_back({s + "mlp.up_proj.weight", {in, h}, &L.up_w, false});
    out.push_back({s + "mlp.down_proj.weight", {h, in}, &L.down_w, false});
  }
  out.push_back({p + "norm.weight", {h}, &w.final_norm, false});
  out.push_back({"lm_head.weight", {v, h}, &w.lm_head, d.tie_word_embeddings});
}

}  // namespace

std::vector<WeightSlot> weight_slots(const ModelSpec& spec, ModelWeights& w) {
  std::vector<WeightSlot> out;
  encoder_slots(spec.acoustic, "model.acoustic_tokenizer.encoder.", w.acoustic, out);
  encoder_slots(spec.semantic, "model.semantic_tokenizer.encoder.", w.semantic, out);
  const int64_t h = spec.decoder.hidden_size;
  connector_slots(spec.acoustic.vae_dim, h, "model.acoustic_connector.", w.acoustic_connector, out);
  connector_slots(spec.semantic.vae_dim, h, "model.semantic_connector.", w.semantic_connector, out);
  decoder_slots(spec.decoder, w.decoder, out);
  return out;
}

}  // namespace vv
