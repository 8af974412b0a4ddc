// `vibevoice inspect --model DIR`: loads a checkpoint (config + safetensors, any layout or naming
// scheme) and prints a JSON summary of what was found and bound. Exit code 1 with the loader's
// error (naming the file, tensor or field) when the directory is not a usable model.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "service/cli/commands.h"

namespace vv::cli {
namespace {

struct InspectOptions {
  std::string model_dir;
  std::string random;  // "tiny" | "7b": seeded random weights instead of a directory
  uint64_t seed = 0;
  std::string dtype = "bf16";
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Floats print with the digits a float holds (1e-06, not 9.99999997e-07).
std::string json_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return buf;
}

std::string json_int_list(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string encoder_json(const EncoderSpec& e, const std::string& indent) {
  const std::string in = indent + "  ";
  return "{\n" + in + "\"channels\": " + std::to_string(e.channels) + ",\n" + in +
         "\"num_filters\": " + std::to_string(e.num_filters) + ",\n" + in + "\"ratios\": " + json_int_list(e.ratios) +
         ",\n" + in + "\"depths\": " + json_int_list(e.depths) + ",\n" + in + "\"hop\": " + std::to_string(e.hop()) +
         ",\n" + in + "\"channels_last_stage\": " + std::to_string(e.stage_channels(static_cast<int>(e.ratios.size()))) +
         ",\n" + in + "\"vae_dim\": " + std::to_string(e.vae_dim) + ",\n" + in +
         "\"kernel_size\": " + std::to_string(e.kernel_size) + ",\n" + in +
         "\"ffn_expansion\": " + std::to_string(e.ffn_expansion) + ",\n" + in +
         "\"rms_norm_eps\": " + json_float(e.rms_norm_eps) + ",\n" + in +
         "\"std_dist_type\": " + json_string(e.std_dist_type) + ",\n" + in + "\"fix_std\": " + json_float(e.fix_std) +
         "\n" + indent + "}";
}

std::string summary_json(const Checkpoint& c, double load_seconds) {
  const ModelSpec& s = c.spec();
  const DecoderSpec& d = s.decoder;
  std::string out = "{\n";
  out += "  \"model\": " + json_string(c.source()) + ",\n";
  out += "  \"layout\": " + json_string(layout_name(s.layout)) + ",\n";
  out += "  \"dtypes\": {";
  bool first = true;
  for (const auto& [name, count] : c.dtype_counts()) {
    out += std::string(first ? "" : ", ") + json_string(name) + ": " + std::to_string(count);
    first = false;
  }
  out += "},\n";
  out += "  \"parameters\": " + std::to_string(c.parameter_count()) + ",\n";
  out += "  \"load_seconds\": " + json_number(load_seconds) + ",\n";
  out += "  \"decoder\": {\n";
  out += "    \"vocab_size\": " + std::to_string(d.vocab_size) + ",\n";
  out += "    \"hidden_size\": " + std::to_string(d.hidden_size) + ",\n";
  out += "    \"intermediate_size\": " + std::to_string(d.intermediate_size) + ",\n";
  out += "    \"num_layers\": " + std::to_string(d.num_layers) + ",\n";
  out += "    \"num_heads\": " + std::to_string(d.num_heads) + ",\n";
  out += "    \"num_kv_heads\": " + std::to_string(d.num_kv_heads) + ",\n";
  out += "    \"head_dim\": " + std::to_string(d.head_dim) + ",\n";
  out += "    \"rms_norm_eps\": " + json_float(d.rms_norm_eps) + ",\n";
  out += "    \"rope_theta\": " + json_number(d.rope_theta) + ",\n";
  out += "    \"max_position_embeddings\": " + std::to_string(d.max_position_embeddings) + ",\n";
  out += std::string("    \"tie_word_embeddings\": ") + (d.tie_word_embeddings ? "true" : "false") + ",\n";
  out += std::string("    \"lm_head\": ") + (c.lm_head_tied() ? "\"embedding (tied)\"" : "\"lm_head.weight\"") + "\n";
  out += "  },\n";
  out += "  \"encoders\": {\n";
  out += "    \"acoustic\": " + encoder_json(s.acoustic, "    ") + ",\n";
  out += "    \"semantic\": " + encoder_json(s.semantic, "    ") + "\n";
  out += "  },\n";
  out += "  \"audio\": {\"sample_rate\": " + std::to_string(s.sample_rate) +
         ", \"chunk_size\": " + std::to_string(s.chunk_size) +
         ", \"normalize_audio\": " + (s.normalize_audio ? "true" : "false") +
         ", \"target_dbfs\": " + json_float(s.target_dbfs) + ", \"audio_token_id\": " + std::to_string(s.audio_token_id) +
         ", \"audio_bos_token_id\": " + std::to_string(s.audio_bos_token_id) +
         ", \"audio_eos_token_id\": " + std::to_string(s.audio_eos_token_id) + "},\n";
  out += "  \"tensors\": {\n";
  out += "    \"bound\": " + std::to_string(c.bound_tensors().size()) + ",\n";
  out += "    \"skipped\": " + std::to_string(c.skipped().size()) + ",\n";
  out += "    \"skipped_names\": [";
  for (size_t i = 0; i < c.skipped().size(); ++i) out += std::string(i ? ", " : "") + json_string(c.skipped()[i]);
  out += "]\n  }\n}\n";
  return out;
}

Result<std::unique_ptr<Checkpoint>> load(const InspectOptions& opt) {
  if (opt.random.empty() == opt.model_dir.empty())
    return invalid_argument("give exactly one of --model DIR and --random tiny|7b");
  if (!opt.model_dir.empty()) return Checkpoint::open(opt.model_dir);
  DType dtype = DType::kBF16;
  if (opt.dtype == "bf16") {
    dtype = DType::kBF16;
  } else if (opt.dtype == "f16") {
    dtype = DType::kF16;
  } else if (opt.dtype == "f32") {
    dtype = DType::kF32;
  } else {
    return invalid_argument("--dtype " + opt.dtype + ": use bf16, f16 or f32");
  }
  if (opt.random == "tiny") return Checkpoint::random(tiny_spec(), opt.seed, dtype);
  if (opt.random == "7b") return Checkpoint::random(qwen7b_asr_spec(), opt.seed, dtype);
  return invalid_argument("--random " + opt.random + ": use tiny or 7b");
}

int run_inspect(const InspectOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  auto ckpt = load(opt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ckpt.is_ok()) {
    std::cerr << "vibevoice inspect: " << ckpt.status().to_string() << "\n";
    return 1;
  }
  const std::string out = summary_json(**ckpt, seconds);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, CommandContext& ctx) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Load a model directory and print a JSON summary: layout (original or transformers), dtypes,\n"
      "parameter count, decoder and encoder dimensions, tensors bound and skipped.\n"
      "  vibevoice inspect --model models/VibeVoice-ASR\n"
      "  vibevoice inspect --random 7b --seed 7     (random weights in memory; prints load_seconds)\n"
      "Exit code 1, with the file, tensor or field at fault, when the directory is not a usable model.");
  cmd->add_option("--model", opt->model_dir, "Model directory: config.json + *.safetensors (or an index and shards)");
  cmd->add_option("--random", opt->random, "Instead of --model: seeded random weights at the tiny or 7b shapes");
  cmd->add_option("--seed", opt->seed, "Seed of --random (default 0)");
  cmd->add_option("--dtype", opt->dtype, "Dtype of --random weights: bf16 (default), f16, f32");
  cmd->callback([opt, &ctx] { ctx.exit_code = run_inspect(*opt); });
}

}  // namespace vv::cli
