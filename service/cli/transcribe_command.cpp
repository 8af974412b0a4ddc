// `vibevoice transcribe`: audio files → speaker-attributed, timestamped transcripts on this machine.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/model/tensor_capture.h"
#include "engine/runner/device_runner.h"
#include "engine/text/prompt_builder.h"
#include "engine/text/tokenizer.h"
#include "engine/transcript/response_format.h"
#include "scheduler/engine_loop.h"
#include "scheduler/placement.h"
#include "service/cli/commands.h"
#include "service/cli/progress_bar.h"

namespace fs = std::filesystem;

namespace vv::cli {

namespace {

struct TranscribeArgs {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> audio;
  std::string format = "text";
  std::string prompt;
  std::string hotwords;
  std::string output;
  std::string dump;
  int max_new_tokens = 8192;
  bool ignore_eos = false;
  float temperature = 0.f;
  float top_p = 1.f;
  int top_k = 0;
  uint64_t seed = 0;
  std::string acoustic_sampling = "mean";
  double segment_seconds = 0;
  int threads = 0;
  std::string device = "cpu";
  bool gpu_bf16 = false;
  bool deterministic = false;
  std::string gpu_memory;
  int gpu_layers = -1;
  std::string split_mode = "auto";
  int64_t kv_positions = 0;
  double max_seconds = 0;
  bool progress = false;
  bool no_progress = false;
};

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open the audio file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_output(const std::string& path, const std::string& body) {
  if (path.empty() || path == "-") {
    std::fwrite(body.data(), 1, body.size(), stdout);
    return Status::ok();
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) return invalid_argument(path + ": cannot open the output file for writing");
  out << body;
  return out ? Status::ok() : internal_error(path + ": write failed");
}

std::string ids_json(const std::vector<TokenId>& prompt, const std::vector<TokenId>& generated) {
  std::string s = "{\"prompt_ids\":[";
  for (size_t i = 0; i < prompt.size(); ++i) s += (i ? "," : "") + std::to_string(prompt[i]);
  s += "],\"generated_ids\":[";
  for (size_t i = 0; i < generated.size(); ++i) s += (i ? "," : "") + std::to_string(generated[i]);
  return s + "]}\n";
}

// Writes the captured intermediates of one request as DIR/<stem>.safetensors (float32, names as in
// the golden set).
Status write_dump(const std::string& dir, const std::string& stem, const TensorCapture& capture,
                  const std::vector<float>& input_values) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument(dir + ": cannot create the dump directory: " + ec.message());
  std::vector<HostTensor> tensors;
  HostTensor iv;
  iv.name = "input_values";
  iv.data = input_values.data();
  iv.dtype = DType::kF32;
  iv.shape = {static_cast<int64_t>(input_values.size())};
  tensors.push_back(iv);
  for (const auto& [name, t] : capture.tensors()) {
    HostTensor h;
    h.name = name;
    h.data = t.data.data();
    h.dtype = DType::kF32;
    h.shape = (name.rfind("logits", 0) == 0 && t.rows == 1) ? std::vector<int64_t>{t.cols}
                                                            : std::vector<int64_t>{t.rows, t.cols};
    tensors.push_back(h);
  }
  return write_safetensors((fs::path(dir) / (stem + ".safetensors")).string(), tensors);
}

int fail(const Status& s) {
  std::fprintf(stderr, "vibevoice transcribe: %s\n", s.message().c_str());
  return 1;
}

int run_transcribe(const TranscribeArgs& a) {
  const bool ids_format = a.format == "ids";
  std::optional<ResponseFormat> format;
  if (!ids_format) {
    format = parse_response_format(a.format);
    if (!format) return fail(invalid_argument("--format: unknown format '" + a.format + "'"));
  }
  if (a.audio.size() > 1 && !a.output.empty() && a.output != "-" && !fs::is_directory(a.output)) {
    return fail(invalid_argument("-o " + a.output + ": with several audio files, -o must name a directory"));
  }
  LatentSampling acoustic_mode;
  if (a.acoustic_sampling == "mean") {
    acoustic_mode = LatentSampling::kMean;
  } else if (a.acoustic_sampling == "gaussian") {
    acoustic_mode = LatentSampling::kGaussian;
  } else if (a.acoustic_sampling == "fix") {
    acoustic_mode = LatentSampling::kFix;
  } else {
    return fail(invalid_argument("--acoustic-sampling: expected mean, gaussian or fix, got '" +
                                 a.acoustic_sampling + "'"));
  }

  auto ckpt = Checkpoint::open(a.model);
  if (!ckpt.is_ok()) return fail(ckpt.status());
  const ModelSpec& spec = (*ckpt)->spec();
  const std::string tok_path =
      a.tokenizer.empty() ? (fs::path(a.model) / "tokenizer.json").string() : a.tokenizer;
  auto tokenizer = Tokenizer::load_file(tok_path);
  if (!tokenizer.is_ok()) {
    return fail(
        Status(tokenizer.status().code(),
               tokenizer.status().message() + (a.tokenizer.empty() ? " (pass --tokenizer FILE)" : "")));
  }

  audio::PrepareOptions popt;
  popt.sample_rate = spec.sample_rate;
  popt.normalize = spec.normalize_audio;
  popt.target_dbfs = spec.target_dbfs;
  popt.eps = spec.norm_eps;
  popt.hop = spec.acoustic.hop();
  popt.max_seconds = a.max_seconds;

  const std::string context = compose_context(a.prompt, {}, a.hotwords);
  std::vector<Request> requests;
  for (const std::string& path : a.audio) {
    auto bytes = read_file(path);
    if (!bytes.is_ok()) return fail(bytes.status());
    auto prepared = audio::prepare_audio(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), popt);
    if (!prepared.is_ok())
      return fail(Status(prepared.status().code(), path + ": " + prepared.status().message()));
    Request r;
    r.kind = Request::Kind::kTranscription;
    r.request_id = path;
    r.audio.push_back(std::move(prepared).value());
    r.context = context;
    r.sampling.temperature = a.temperature;
    r.sampling.top_p = a.top_p;
    r.sampling.top_k = a.top_k;
    r.sampling.seed = a.seed;
    r.sampling.max_new_tokens = a.max_new_tokens;
    r.sampling.ignore_eos = a.ignore_eos;
    r.encode.acoustic.mode = acoustic_mode;
    r.encode.acoustic.seed = a.seed;
    r.encode.segment = a.segment_seconds > 0
                           ? static_cast<int64_t>(a.segment_seconds * spec.sample_rate) / popt.hop * popt.hop
                           : 0;
    requests.push_back(std::move(r));
  }

  RunnerOptions ropt;
  int64_t need = 0;
  for (const auto& r : requests) need += r.audio[0].frames + 256 + a.max_new_tokens;
  ropt.kv_positions = a.kv_positions > 0 ? a.kv_positions : need;
  ropt.kv_dtype_follows_compute = true;  // bf16 k/v with --gpu-bf16 on a GPU
  if (requests.size() > 0 && requests[0].encode.segment > 0)
    ropt.encoder_segment = requests[0].encode.segment;
  BackendOptions bopt;
  bopt.cpu_threads = a.threads;
  bopt.gpu_bf16_gemm = a.gpu_bf16;
  bopt.deterministic = a.deterministic;
  PlacementOptions place;
  place.memory = a.gpu_memory;
  place.gpu_layers = a.gpu_layers;
  auto split = parse_split_mode(a.split_mode);
  if (!split.is_ok()) return fail(invalid_argument("--split-mode: " + split.status().message()));
  place.split = *split;
  auto runners = make_runners(**ckpt, ropt, a.device, bopt, place);
  if (!runners.is_ok()) return fail(runners.status());
  Runner& runner = *runners->front();

  std::unique_ptr<TensorCapture> capture;
  if (!a.dump.empty()) {
    if (requests.size() != 1) return fail(invalid_argument("--dump: give exactly one audio file"));
    if (runners->size() != 1) return fail(invalid_argument("--dump: give one device (or --split-mode layer)"));
    capture = std::make_unique<TensorCapture>(runner.backend());
    runner.set_capture(capture->fn());
  }

  const bool show_progress = !a.no_progress && (a.progress || isatty(STDERR_FILENO));
  ProgressBar bar(show_progress, requests.size());
  // Every file is one request of the engine loop: their decode rows share each step.
  std::mutex mu;
  std::condition_variable cv;
  std::map<RequestId, size_t> index;  // request id → file index
  std::vector<std::optional<RequestEvent>> ends(requests.size());
  EngineLoopOptions lopt;
  lopt.max_running = static_cast<int>(std::max<size_t>(1, requests.size()));
  lopt.max_waiting = static_cast<int>(requests.size());
  // A replica's progress carries its own request ids: progress is shown with one runner only.
  if (runners->size() == 1) {
    lopt.progress = [&](const TranscriptionProgress& p) {
      std::lock_guard<std::mutex> lk(mu);
      auto it = index.find(static_cast<RequestId>(p.request));
      if (it == index.end()) return;
      TranscriptionProgress q = p;
      q.request = it->second;
      bar.update(q);
    };
  }
  std::vector<std::unique_ptr<EngineLoop>> loops;
  for (auto& r : *runners) {
    auto loop = EngineLoop::create(*r, **tokenizer, lopt);
    if (!loop.is_ok()) return fail(loop.status());
    loops.push_back(std::move(loop).value());
  }
  std::vector<EngineLoop*> loop_ptrs;
  for (auto& l : loops) loop_ptrs.push_back(l.get());
  // Replicas: one loop per device behind one client that places each file on the least loaded.
  std::unique_ptr<EngineLoop> single;
  std::unique_ptr<ReplicatedEngine> replicated;
  EngineClient* client = nullptr;
  if (loops.size() == 1) {
    single = std::move(loops.front());
    client = single.get();
  } else {
    auto rep = ReplicatedEngine::create(std::move(loops));
    if (!rep.is_ok()) return fail(rep.status());
    replicated = std::move(rep).value();
    client = replicated.get();
  }
  for (int i = 0; i < 10000 && !client->load().ready; ++i) usleep(1000);
  std::vector<std::string> prompt_error(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    std::unique_lock<std::mutex> lk(mu);
    auto id = client->submit(requests[i], [&, i](RequestEvent&& e) {
      if (!e.terminal()) return;
      std::lock_guard<std::mutex> g(mu);
      ends[i] = std::move(e);
      cv.notify_all();
    });
    if (!id.is_ok()) return fail(Status(id.status().code(), a.audio[i] + ": " + id.status().message()));
    index[*id] = i;
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] {
      return std::all_of(ends.begin(), ends.end(), [](const auto& e) { return e.has_value(); });
    });
  }
  for (EngineLoop* l : loop_ptrs) l->shutdown();
  bar.finish();
  for (size_t i = 0; i < ends.size(); ++i) {
    if (ends[i]->type == RequestEvent::Type::kError) {
      return fail(Status(ends[i]->error.code(), a.audio[i] + ": " + ends[i]->error.message()));
    }
  }

  if (capture) {
    Status s =
        write_dump(a.dump, fs::path(a.audio[0]).stem().string(), *capture, requests[0].audio[0].input_values);
    if (!s.is_ok()) return fail(s);
  }

  for (size_t i = 0; i < ends.size(); ++i) {
    const RequestEvent& r = *ends[i];
    std::string body =
        ids_format ? ids_json(r.prompt_ids, r.generated_ids) : write_response(r.transcript, *format);
    if (!body.empty() && body.back() != '\n') body += '\n';
    std::string target = a.output;
    if (requests.size() > 1) {
      if (!a.output.empty() && a.output != "-") {
        const std::string ext = ids_format ? "json" : std::string(response_format_name(*format));
        target = (fs::path(a.output) / (fs::path(a.audio[i]).stem().string() + "." + ext)).string();
      } else if (!ids_format && (*format == ResponseFormat::kText || *format == ResponseFormat::kSrt ||
                                 *format == ResponseFormat::kVtt)) {
        body = "==> " + a.audio[i] + " <==\n" + body;
      }
    }
    Status s = write_output(target, body);
    if (!s.is_ok()) return fail(s);
  }
  return 0;
}

}  // namespace

void register_transcribe(CLI::App& app, CommandContext& ctx) {
  auto args = std::make_shared<TranscribeArgs>();
  CLI::App* sub = app.add_subcommand(
      "transcribe",
      "Transcribe audio files: who spoke when, and what. WAV is read directly; every other format\n"
      "through FFmpeg. Audio is resampled to 24 kHz, normalised and encoded; the decoder's JSON\n"
      "answer becomes segments {speaker, start, end, text}.");
  sub->add_option("--model", args->model, "Checkpoint directory (original or transformers layout)")
      ->required();
  sub->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: MODEL/tokenizer.json)");
  sub->add_option("audio", args->audio, "Audio files")->required();
  sub->add_option(
         "-f,--format", args->format,
         "text | json | verbose_json | srt | vtt | diarized_json | ids (prompt and generated token ids)")
      ->capture_default_str();
  sub->add_option("--prompt", args->prompt,
                  "Context for the model: names, terms, background (\"extra info\")");
  sub->add_option("--hotwords", args->hotwords, "Comma-separated terms, joined before --prompt");
  sub->add_option("-o,--output", args->output,
                  "Output file (a directory with several inputs); default stdout");
  sub->add_option("--max-new-tokens", args->max_new_tokens, "Cap on generated tokens per file")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--ignore-eos", args->ignore_eos,
                "Keep generating through stop tokens (benchmarks, debugging)");
  sub->add_option("--temperature", args->temperature, "0 = greedy (the reference decoding)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  sub->add_option("--top-p", args->top_p, "Nucleus mass with --temperature")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--top-k", args->top_k, "Top-k cut with --temperature (0 = off)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", args->seed, "Seed for token sampling and acoustic sampling")
      ->capture_default_str();
  sub->add_option("--acoustic-sampling", args->acoustic_sampling,
                  "Acoustic latent: mean (default, deterministic) | gaussian (the references' noise) | fix")
      ->capture_default_str();
  sub->add_option(
      "--segment-seconds", args->segment_seconds,
      "Encoder segment length (rounded down to 3200 samples; default 60 s). Bounds encoder memory");
  sub->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when one is usable, else the CPU); several "
                  "comma-separated (cuda:0,cuda:1) or all (every GPU) for --split-mode")
      ->capture_default_str();
  sub->add_flag("--gpu-bf16", args->gpu_bf16,
                "On a GPU: large GEMMs on bf16 tensor cores (activations rounded to bf16; default f32, exact)");
  sub->add_flag("--deterministic", args->deterministic,
                "On a GPU: batch-invariant arithmetic (a request's results do not depend on the others "
                "sharing its steps). Costs decode throughput: on an H200 at the 7B shape 19% at 1 "
                "request, 34% at 64, 51% at 128. The CPU always is batch-invariant");
  sub->add_option("--threads", args->threads,
                  "Worker threads (default: $VIBEVOICE_THREADS, else physical cores)");
  sub->add_option("--gpu-memory", args->gpu_memory,
                  "Device memory cap (18GiB, 8G, 20GB, 512MiB or 80%), one for every device or one per "
                  "device of --device in order: weights, KV pool, workspaces and the CUDA context are "
                  "planned under it; the KV pool shrinks to what remains");
  sub->add_option("--gpu-layers", args->gpu_layers,
                  "Decoder layers kept on each device; the others stream from pinned host memory every "
                  "step (-1: as many as --gpu-memory allows, all without it)")
      ->capture_default_str();
  sub->add_option("--split-mode", args->split_mode,
                  "With several devices (--device cuda:0,cuda:1 or all): replica (a full model per device, "
                  "files placed by load), layer (contiguous layer ranges per device, only hidden states "
                  "cross), or auto (replicas while each device holds the whole model)")
      ->capture_default_str();
  sub->add_option("--kv-positions", args->kv_positions,
                  "KV cache size in positions (default: what the inputs need)");
  sub->add_option("--max-seconds", args->max_seconds, "Refuse audio longer than this (0 = no limit)");
  sub->add_option(
      "--dump", args->dump,
      "Write the intermediates (input_values, latents, speech_embeds, hidden.*, logits.last) of one "
      "file to DIR/<name>.safetensors");
  sub->add_flag("--progress", args->progress, "Show progress on stderr even when it is not a terminal");
  sub->add_flag("--no-progress", args->no_progress, "Never show progress");
  sub->callback([args, &ctx] { ctx.exit_code = run_transcribe(*args); });
}

}  // namespace vv::cli
