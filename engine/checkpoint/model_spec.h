// ModelSpec: the shapes and constants of one VibeVoice-ASR checkpoint, read from config.json in
// either layout (Microsoft's original or transformers') and normalised to one form (MODEL.md §2).
// Plain value types, owned by whoever holds them; the functions are pure and safe on any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/status.h"

namespace vv {

struct EncoderSpec {          // one Conv-VAE encoder (acoustic or semantic), normalised
  int channels = 1;
  int num_filters = 32;       // channels after the stem
  std::vector<int> ratios;    // APPLIED order, e.g. {2,2,4,5,5,8} (original layout lists it reversed)
  std::vector<int> depths;    // stem stage first, size ratios.size()+1
  int vae_dim = 64;           // head output channels
  int kernel_size = 7;        // stem, mixers, head
  int ffn_expansion = 4;
  float rms_norm_eps = 1e-5f;
  std::string std_dist_type;  // "gaussian" | "fix" | "none"
  float fix_std = 0.f;        // original layout; transformers' vae_std = fix_std / 0.8
  int hop() const;            // product of ratios (3200)
  // Channels of stage s (0 = after the stem): num_filters << s.
  int stage_channels(int s) const { return num_filters << s; }
};

struct DecoderSpec {          // Qwen2
  int vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;   // head_dim: explicit key wins, else hidden/heads
  float rms_norm_eps = 1e-6f;
  double rope_theta = 0;      // top-level rope_theta or rope_parameters.rope_theta; refuse if absent
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
};

enum class CheckpointLayout { kOriginal, kTransformers };
const char* layout_name(CheckpointLayout layout);  // "original" | "transformers"

struct ModelSpec {
  CheckpointLayout layout = CheckpointLayout::kTransformers;
  EncoderSpec acoustic, semantic;
  DecoderSpec decoder;
  int audio_token_id = 151648, audio_bos_token_id = 151646, audio_eos_token_id = 151647;
  int64_t chunk_size = 1440000;  // encoder segment (samples)
  int sample_rate = 24000;
  bool normalize_audio = true; float target_dbfs = -25.f; float norm_eps = 1e-6f;  // preprocessor_config.json if present
};

// Reads model_dir/config.json (+ preprocessor_config.json when present). Errors name the file and
// the field that is missing or malformed.
Result<ModelSpec> load_model_spec(const std::string& model_dir);

// The same from JSON text already in memory. `preprocessor_json` may be empty (defaults apply);
// `source` names the config in error messages.
Result<ModelSpec> parse_model_spec(std::string_view config_json, std::string_view preprocessor_json,
                                   const std::string& source);

}  // namespace vv
