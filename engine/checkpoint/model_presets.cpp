// tiny_spec() and qwen7b_asr_spec(): the two shapes `vibevoice bench --random` knows by name.
#include "engine/checkpoint/checkpoint.h"

namespace vv {
namespace {

EncoderSpec encoder(int nf, std::vector<int> depths, int vae_dim, bool acoustic) {
  EncoderSpec e;
  e.channels = 1;
  e.num_filters = nf;
  e.ratios = {2, 2, 4, 5, 5, 8};
  e.depths = std::move(depths);
  e.vae_dim = vae_dim;
  e.kernel_size = 7;
  e.ffn_expansion = 4;
  e.rms_norm_eps = 1e-5f;
  e.std_dist_type = acoustic ? "gaussian" : "none";
  e.fix_std = acoustic ? 0.5f : 0.f;
  return e;
}

}  // namespace

ModelSpec tiny_spec() {
  ModelSpec s;
  s.layout = CheckpointLayout::kTransformers;
  s.acoustic = encoder(2, {2, 1, 2, 1, 1, 1, 1}, 64, true);
  s.semantic = encoder(2, {1, 2, 1, 1, 1, 1, 2}, 128, false);
  DecoderSpec& d = s.decoder;
  d.vocab_size = 152064;
  d.hidden_size = 48;
  d.intermediate_size = 128;
  d.num_layers = 3;
  d.num_heads = 14;
  d.num_kv_heads = 2;
  d.head_dim = 16;
  d.rms_norm_eps = 1e-6f;
  d.rope_theta = 1e6;
  d.tie_word_embeddings = true;
  d.max_position_embeddings = 32768;
  return s;
}

ModelSpec qwen7b_asr_spec() {
  ModelSpec s;
  s.layout = CheckpointLayout::kOriginal;
  s.acoustic = encoder(32, {3, 3, 3, 3, 3, 3, 8}, 64, true);
  s.semantic = encoder(32, {3, 3, 3, 3, 3, 3, 8}, 128, false);
  DecoderSpec& d = s.decoder;
  d.vocab_size = 152064;
  d.hidden_size = 3584;
  d.intermediate_size = 18944;
  d.num_layers = 28;
  d.num_heads = 28;
  d.num_kv_heads = 4;
  d.head_dim = 128;
  d.rms_norm_eps = 1e-6f;
  d.rope_theta = 1e6;
  d.tie_word_embeddings = false;
  d.max_position_embeddings = 131072;
  return s;
}

}  // namespace vv
