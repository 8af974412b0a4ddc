// `vibevoice bench`: how fast the engine runs on this machine, against this machine's own bounds.
// Measures the roofline probes first (memory bandwidth: the higher of a STREAM triad and a read-only
// stream, decode only reading; compute: an FMA loop),
// then the three stages of a transcription on a checkpoint or on seeded random weights at a named
// shape: both encoders over N seconds of audio, prefill of a P-token prompt, and batch-B decode.
// Every GEMM the model issues is counted by a decorator Backend (FLOPs and weight bytes), so each
// figure's ratio to its bound comes from the work the model actually did, not from a formula.
// With --gpu-memory / --gpu-layers it also reports the memory plan, the peak device memory (the
// backend's allocation counter and the driver's used memory, sampled after each phase) against the
// cap, and the host-to-device bandwidth that layer streaming reached against a pinned copy measured
// in the same run; the decoded ids' hash lets runs with different placements be compared.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/memory_plan.h"
#include "engine/runner/runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device/backend_factory.h"
#include "kernels/forwarding_backend.h"
#include "service/cli/commands.h"

namespace vv::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of every thread of this process (the backend's pool included), seconds.
double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Forwards every op to the wrapped backend and counts what the GEMMs and attention do: FLOPs (2·M·N·K
// per GEMM, 4·len·head_dim per attended position and head) and bytes of weights streamed.
class CountingBackend final : public ForwardingBackend {
 public:
  struct Counts {
    double gemm_flops = 0, attn_flops = 0, weight_bytes = 0, kv_bytes = 0;
  };
  explicit CountingBackend(std::unique_ptr<Backend> inner,
                           std::shared_ptr<Counts> shared = std::make_shared<Counts>())
      : ForwardingBackend(std::move(inner)), shared_(std::move(shared)), counts(*shared_) {}

 private:
  std::shared_ptr<Counts> shared_;  // shared with the lanes made from this backend

 public:
  Counts& counts;

  // A lane of the wrapped backend (the semantic encoder's stream), counted into the same figures.
  std::unique_ptr<Backend> make_lane() override {
    std::unique_ptr<Backend> lane = inner().make_lane();
    if (!lane) return nullptr;
    auto c = std::make_unique<CountingBackend>(std::move(lane), shared_);
    c->host_visible_ = host_visible_;
    return c;
  }

  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    counts.gemm_flops += 2.0 * static_cast<double>(a.rows()) * static_cast<double>(w.rows()) * static_cast<double>(w.cols());
    counts.weight_bytes += static_cast<double>(w.rows()) * static_cast<double>(w.cols()) * dtype_size(w.dtype);
    inner().gemm(a, w, bias, out, ep);
  }
  // The encoders' branches go to the wrapped backend whole (it may run them as fused kernels, as the
  // transcription path does); the FFN's two products are counted here: 2·T·C·E FLOPs each, its
  // weights once.
  void conv_ffn(Tensor& x, const Tensor& nw, float eps, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2, const Tensor& g, Tensor& u, Tensor& v, Tensor& h) override {
    count_ffn(x, w1, w2);
    inner().conv_ffn(x, nw, eps, w1, b1, w2, b2, g, u, v, h);
  }
  bool conv_block(Tensor& x, float eps, const Tensor& hist, const ConvBlockWeights& wt, Tensor& u, Tensor& v,
                  Tensor& h) override {
    if (!inner().conv_block(x, eps, hist, wt, u, v, h)) return false;
    count_ffn(x, wt.w1, wt.w2);
    return true;
  }
  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out) override {
    // Attended positions per row = its position + 1 (causal); positions live in host memory on the CPU.
    if (rows.row_pos.data != nullptr && host_visible_) {
      const int32_t* pos = rows.row_pos.ptr<int32_t>();
      double attended = 0;
      for (int64_t r = 0; r < rows.row_pos.numel(); ++r) attended += pos[r] + 1.0;
      counts.attn_flops += 4.0 * attended * shape.heads * shape.head_dim;
      counts.kv_bytes += 2.0 * attended * shape.kv_heads * shape.head_dim * dtype_size(cache.k.dtype);
    }
    inner().paged_attention(q, rows, cache, shape, out);
  }
  void set_host_visible(bool v) { host_visible_ = v; }

 private:
  void count_ffn(const Tensor& x, const Tensor& w1, const Tensor& w2) {
    const double T = static_cast<double>(x.rows()), C = static_cast<double>(x.cols());
    const double E = static_cast<double>(w1.rows());
    counts.gemm_flops += 4.0 * T * C * E;
    counts.weight_bytes += C * E * (dtype_size(w1.dtype) + dtype_size(w2.dtype));
  }
  bool host_visible_ = true;
};

struct BenchArgs {
  std::string model;
  std::string random;  // "7b" | "tiny"
  std::string dtype = "bf16";
  uint64_t seed = 1;
  int threads = 0;
  std::string device = "cpu";
  bool gpu_bf16 = false;
  bool deterministic = false;
  double audio_seconds = 10;
  int prefill_tokens = 512;
  int decode_tokens = 32;
  int batch = 1;
  bool skip_encoder = false;
  bool skip_probes = false;
  std::string gpu_memory;  // cap per device ("" = none)
  int gpu_layers = -1;
  std::string json;
};

int fail(const Status& s) {
  std::fprintf(stderr, "vibevoice bench: %s\n", s.message().c_str());
  return 1;
}

struct Figures {
  double read_gbps = 0, bw_bound_gbps = 0;           // read-only stream; the memory bound = max(triad, read)
  double decode_cpu_gbps = 0, decode_cpu_share = 0;  // decode per CPU-second of the threads, and their share
  double triad_gbps = 0, fma_gflops = 0, pinned_h2d_gbps = 0;
  double encoder_ms_per_audio_s = 0, encoder_gflops = 0;
  double prefill_tok_s = 0, prefill_gflops = 0;
  double decode_tok_s = 0, decode_gbps = 0, decode_ms_per_step = 0;
  double decode_median_ms = 0, decode_median_tok_s = 0;  // the median step (steadier against host stalls)
};

// Host-to-device bandwidth from page-locked memory through the backend's async copy: best of a few
// 256 MiB copies (the link's bound for layer streaming).
double measure_pinned_h2d_gbps(Backend& be) {
  const size_t bytes = size_t{256} << 20;
  Buffer host = be.allocate_host(bytes);
  Buffer dev = be.allocate(bytes);
  if (!host.data() || !dev.data()) return 0;
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    be.synchronize();
    const auto t0 = Clock::now();
    be.wait_copy(be.copy_async(dev.data(), host.data(), bytes));
    be.synchronize();
    const double s = seconds_since(t0);
    if (i > 0 && s > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);  // the first warms up
  }
  return best;
}

// Device memory in use as the driver reports it (every allocation, the context included); the
// most seen at the sample points.
struct DeviceUse {
  Backend* be = nullptr;
  size_t max_used = 0, total = 0;
  void sample() {
    size_t f = 0, t = 0;
    if (be && be->device_memory(&f, &t)) {
      total = t;
      max_used = std::max(max_used, t - f);
    }
  }
};

// FNV-1a over ids, to compare the tokens of runs with different placements.
uint64_t fnv1a(const std::vector<TokenId>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId id : ids) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(id) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

double ratio_of(double v, double bound) {
  return bound > 0 ? v / bound : 0.0;
}

std::string ratio(double v, double bound) {
  if (bound <= 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%.2f of the bound)", v / bound);
  return buf;
}

int run_bench(const BenchArgs& a) {
  if (a.model.empty() == a.random.empty()) return fail(invalid_argument("give exactly one of --model DIR or --random 7b|tiny"));
  if (a.prefill_tokens < 1 || a.decode_tokens < 1 || a.batch < 1) {
    return fail(invalid_argument("--prefill-tokens, --decode-tokens and --batch must be at least 1"));
  }
  DType dtype = DType::kBF16;
  if (a.dtype == "f32") {
    dtype = DType::kF32;
  } else if (a.dtype == "f16") {
    dtype = DType::kF16;
  } else if (a.dtype != "bf16") {
    return fail(invalid_argument("--dtype: expected bf16, f16 or f32, got '" + a.dtype + "'"));
  }

  if (!a.random.empty() && a.random != "7b" && a.random != "tiny") {
    return fail(invalid_argument("--random: expected 7b or tiny, got '" + a.random + "'"));
  }
  auto dev = parse_device(a.device);
  if (!dev.is_ok()) return fail(dev.status());
  const bool gpu = dev->kind == DeviceSpec::Kind::kCuda;
  BackendOptions bo;
  bo.cpu_threads = a.threads;
  bo.gpu_bf16_gemm = a.gpu_bf16;
  bo.deterministic = a.deterministic;
  auto inner = make_backend(*dev, bo);
  if (!inner.is_ok()) return fail(inner.status());
  auto counting = std::make_unique<CountingBackend>(std::move(inner).value());
  CountingBackend* counter = counting.get();
  counter->set_host_visible(!gpu);  // row positions live in device memory on a GPU
  const std::string backend_name = counter->name();
  const int threads = resolve_cpu_threads(a.threads);  // what the CPU backend runs with

  Figures f;
  if (!a.skip_probes && gpu) {
    // The GPU's bound: its own memory through a large device copy (no FMA probe: no ratio).
    std::fprintf(stderr, "measuring %s: device copy bandwidth...\n", backend_name.c_str());
    f.triad_gbps = measure_copy_gbps(*counter);
  } else if (!a.skip_probes) {
    std::fprintf(stderr,
                 "measuring this machine (%d threads): memory bandwidth (triad, read stream), FMA peak...\n",
                 threads);
    f.triad_gbps = measure_triad_gbps(threads);
    f.read_gbps = measure_read_gbps(threads);
    f.fma_gflops = measure_fma_gflops(threads);
  }
  // The strict bound: whichever probe got more out of the memory.
  f.bw_bound_gbps = std::max(f.triad_gbps, f.read_gbps);

  const bool placement = !a.gpu_memory.empty() || a.gpu_layers >= 0;
  if (placement && gpu) {
    std::fprintf(stderr, "measuring %s: pinned host-to-device copy bandwidth...\n", backend_name.c_str());
    f.pinned_h2d_gbps = measure_pinned_h2d_gbps(*counter);
  }
  size_t cap = 0;
  if (!a.gpu_memory.empty()) {
    size_t fr = 0, total = 0;
    counter->device_memory(&fr, &total);
    auto c = parse_memory_size(a.gpu_memory, total);
    if (!c.is_ok()) return fail(invalid_argument("--gpu-memory: " + c.status().message()));
    cap = *c;
  }
  counter->reset_peak();
  DeviceUse use{counter};

  std::unique_ptr<Checkpoint> ckpt;
  const auto t_load = Clock::now();
  if (!a.random.empty()) {
    ModelSpec spec;
    spec = a.random == "7b" ? qwen7b_asr_spec() : tiny_spec();
    std::fprintf(stderr, "building random %s weights (%s, seed %llu)...\n", a.random.c_str(), a.dtype.c_str(),
                 static_cast<unsigned long long>(a.seed));
    auto r = Checkpoint::random(spec, a.seed, dtype);
    if (!r.is_ok()) return fail(r.status());
    ckpt = std::move(r).value();
  } else {
    auto r = Checkpoint::open(a.model);
    if (!r.is_ok()) return fail(r.status());
    ckpt = std::move(r).value();
  }
  const ModelSpec spec = ckpt->spec();
  const DecoderSpec& d = spec.decoder;
  const int hop = static_cast<int>(spec.acoustic.hop());
  int64_t samples = static_cast<int64_t>(a.audio_seconds * spec.sample_rate) / hop * hop;
  if (samples < hop) samples = hop;

  RunnerOptions ropt;
  ropt.max_rows = std::max(a.prefill_tokens, a.batch);
  ropt.prefill_chunk = a.prefill_tokens;
  ropt.max_seqs = std::max(1, a.batch);
  ropt.kv_positions = static_cast<int64_t>(a.batch) * (a.prefill_tokens + a.decode_tokens + 64);
  ropt.encoder_segment = std::min<int64_t>(samples, spec.chunk_size);
  ropt.consume_weights = true;  // one copy of the weights in memory, not two
  if (gpu && a.gpu_bf16) ropt.kv_dtype = DType::kBF16;  // as the service: bf16 k/v with bf16 compute
  ropt.memory_cap = cap;
  ropt.gpu_layers = a.gpu_layers;
  if (cap) ropt.min_kv_positions = ropt.kv_positions;  // the bench needs its whole pool
  auto runner_r = Runner::create(std::move(counting), *ckpt, ropt);
  if (!runner_r.is_ok()) return fail(runner_r.status());
  std::unique_ptr<Runner> runner = std::move(runner_r).value();
  ckpt.reset();
  const double load_s = seconds_since(t_load);
  std::fprintf(stderr, "loaded in %.1f s on %s\n", load_s, backend_name.c_str());
  use.sample();
  const MemoryPlan& mp = runner->memory_plan();
  const LayerStream* stream = runner->layer_stream();
  if (placement) std::fprintf(stderr, "memory plan: %s\n", mp.summary.c_str());

  // Encoders: seeded noise at speech level (the work does not depend on the values).
  if (!a.skip_encoder) {
    std::vector<float> audio(static_cast<size_t>(samples));
    std::mt19937 rng(static_cast<uint32_t>(a.seed));
    std::normal_distribution<float> noise(0.f, 0.05f);
    for (float& x : audio) x = noise(rng);
    std::fprintf(stderr, "encoder: %.1f s of audio...\n", samples / static_cast<double>(spec.sample_rate));
    // On a GPU the first encode builds cuBLASLt plans and workspaces and sees the op sequence, the second
    // captures it into a graph; the timed one replays it, as a server's encodes do in steady state.
    for (int i = 0; gpu && i < 2; ++i) {
      auto warm = runner->encode(audio.data(), samples);
      if (!warm.is_ok()) return fail(warm.status());
    }
    counter->counts = {};
    const auto t0 = Clock::now();
    auto rows = runner->encode(audio.data(), samples);
    if (!rows.is_ok()) return fail(rows.status());
    runner->backend().synchronize();
    const double s = seconds_since(t0);
    f.encoder_ms_per_audio_s = 1000.0 * s / (samples / static_cast<double>(spec.sample_rate));
    f.encoder_gflops = counter->counts.gemm_flops / s / 1e9;
    use.sample();
  }

  // Prefill: one step of `prefill_tokens` rows per sequence (random text ids), then decode steps.
  std::mt19937 rng(static_cast<uint32_t>(a.seed) + 1);
  std::uniform_int_distribution<TokenId> tok(0, std::min(d.vocab_size, 151643) - 1);
  std::vector<std::vector<BlockId>> tables(static_cast<size_t>(a.batch));
  std::vector<TokenId> last(static_cast<size_t>(a.batch));
  if (gpu) {  // an untimed prefill of the same size: plans and workspaces are built on first use
    StepPlan plan;
    SequenceRows rows;
    for (int i = 0; i < a.prefill_tokens; ++i) rows.ids.push_back(tok(rng));
    std::vector<BlockId> warm;
    if (Status s = runner->kv().reserve(warm, a.prefill_tokens + 1); !s.is_ok()) return fail(s);
    rows.blocks = warm;
    plan.seqs.push_back(std::move(rows));
    auto out = runner->execute(plan);
    runner->kv().release(warm);
    if (!out.is_ok()) return fail(out.status());
  }
  double prefill_s = 0;
  counter->counts = {};
  for (int b = 0; b < a.batch; ++b) {
    StepPlan plan;
    SequenceRows rows;
    for (int i = 0; i < a.prefill_tokens; ++i) rows.ids.push_back(tok(rng));
    rows.start_pos = 0;
    if (Status s = runner->kv().reserve(tables[b], a.prefill_tokens); !s.is_ok()) return fail(s);
    rows.blocks = tables[b];
    plan.seqs.push_back(std::move(rows));
    std::fprintf(stderr, "prefill: %d tokens%s...\n", a.prefill_tokens,
                 a.batch > 1 ? (" (sequence " + std::to_string(b + 1) + ")").c_str() : "");
    const auto t0 = Clock::now();
    auto out = runner->execute(plan);
    if (!out.is_ok()) return fail(out.status());
    prefill_s += seconds_since(t0);
    last[b] = out->next[0];
  }
  use.sample();
  std::vector<TokenId> all_ids(last.begin(), last.end());
  f.prefill_tok_s = a.batch * a.prefill_tokens / prefill_s;
  f.prefill_gflops = (counter->counts.gemm_flops + counter->counts.attn_flops) / prefill_s / 1e9;

  std::fprintf(stderr, "decode: %d steps at batch %d...\n", a.decode_tokens, a.batch);
  counter->counts = {};
  double decode_s = 0, decode_cpu_s = 0;
  std::vector<double> step_s;
  const uint64_t streamed_before = stream ? stream->bytes_streamed() : 0;
  for (int step = 0; step < a.decode_tokens; ++step) {
    StepPlan plan;
    for (int b = 0; b < a.batch; ++b) {
      SequenceRows rows;
      rows.ids = {last[b]};
      rows.start_pos = a.prefill_tokens + step;
      if (Status s = runner->kv().reserve(tables[b], rows.start_pos + 1); !s.is_ok()) return fail(s);
      rows.blocks = tables[b];
      plan.seqs.push_back(std::move(rows));
    }
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_seconds();
    auto out = runner->execute(plan);
    if (!out.is_ok()) return fail(out.status());
    step_s.push_back(seconds_since(t0));
    decode_s += step_s.back();
    decode_cpu_s += process_cpu_seconds() - cpu0;
    for (int b = 0; b < a.batch; ++b) last[b] = out->next[b];
    all_ids.insert(all_ids.end(), last.begin(), last.end());
  }
  use.sample();
  const double stream_gbps = stream ? static_cast<double>(stream->bytes_streamed() - streamed_before) / decode_s / 1e9 : 0;
  f.decode_ms_per_step = 1000.0 * decode_s / a.decode_tokens;
  f.decode_tok_s = a.batch * a.decode_tokens / decode_s;
  std::sort(step_s.begin(), step_s.end());
  f.decode_median_ms = 1000.0 * step_s[step_s.size() / 2];  // decode_tokens >= 1
  f.decode_median_tok_s = f.decode_median_ms > 0 ? a.batch * 1000.0 / f.decode_median_ms : 0.0;
  // Bytes a step must read: every weight once (per step, shared by the batch) plus each row's KV.
  f.decode_gbps = (counter->counts.weight_bytes + counter->counts.kv_bytes) / decode_s / 1e9;
  if (!gpu && decode_cpu_s > 0) {
    // Per CPU-second of the pool's threads, as the probes are timed: the same ratio on a shared machine.
    f.decode_cpu_share = decode_cpu_s / (decode_s * threads);
    f.decode_cpu_gbps =
        (counter->counts.weight_bytes + counter->counts.kv_bytes) / (decode_cpu_s / threads) / 1e9;
  }
  for (auto& t : tables) runner->kv().release(t);

  const std::string shape = a.random.empty() ? a.model : ("random " + a.random);
  std::printf("vibevoice bench: %s, %s weights, %s\n", shape.c_str(), a.random.empty() ? "checkpoint" : a.dtype.c_str(),
              backend_name.c_str());
  std::printf("  decoder: %d layers, hidden %d, %d/%d heads, ffn %d, vocab %d\n", d.num_layers, d.hidden_size,
              d.num_heads, d.num_kv_heads, d.intermediate_size, d.vocab_size);
  if (!a.skip_probes) {
    if (gpu) {
      std::printf("  machine: device copy %.1f GB/s\n", f.triad_gbps);
    } else {
      std::printf(
          "  machine: memory %.1f GB/s (triad %.1f, read stream %.1f: the higher is the bound), "
          "FMA peak %.1f GFLOP/s (%d threads)\n",
          f.bw_bound_gbps, f.triad_gbps, f.read_gbps, f.fma_gflops, threads);
    }
  }
  if (!a.skip_encoder) {
    std::printf("  encoder: %.1f ms per audio second (%.1f GFLOP/s in GEMMs%s)\n", f.encoder_ms_per_audio_s,
                f.encoder_gflops, ratio(f.encoder_gflops, f.fma_gflops).c_str());
  }
  std::printf("  prefill: %.1f tok/s at %d rows (%.1f GFLOP/s%s)\n", f.prefill_tok_s, a.prefill_tokens,
              f.prefill_gflops, ratio(f.prefill_gflops, f.fma_gflops).c_str());
  std::printf("  decode:  %.2f tok/s at batch %d, %.1f ms/step (%.1f GB/s of weights+KV%s)\n", f.decode_tok_s,
              a.batch, f.decode_ms_per_step, f.decode_gbps, ratio(f.decode_gbps, f.bw_bound_gbps).c_str());
  std::printf("           median step %.2f ms (%.2f tok/s)\n", f.decode_median_ms, f.decode_median_tok_s);
  if (f.decode_cpu_share > 0) {
    std::printf("           per CPU-second of its %d threads: %.1f GB/s%s; CPU share %.2f\n", threads,
                f.decode_cpu_gbps, ratio(f.decode_cpu_gbps, f.bw_bound_gbps).c_str(), f.decode_cpu_share);
  }
  const uint64_t ids_hash = fnv1a(all_ids);
  std::printf("  ids:     %zu tokens, fnv1a %016llx, first", all_ids.size(), static_cast<unsigned long long>(ids_hash));
  for (size_t i = 0; i < std::min<size_t>(all_ids.size(), 8); ++i) std::printf(" %d", all_ids[i]);
  std::printf("\n");
  const size_t peak_alloc = runner->backend().peak_allocated_bytes();
  if (placement) {
    std::printf("  memory:  %d/%d layers resident, KV pool %lld positions; peak allocated %s, peak device use %s%s%s\n",
                mp.resident_layers, d.num_layers, static_cast<long long>(runner->kv().num_blocks() * runner->kv().block_size()),
                gib(peak_alloc).c_str(), gib(use.max_used).c_str(), cap ? (" under the cap of " + gib(cap)).c_str() : "",
                cap && use.max_used > cap ? " (OVER THE CAP)" : "");
    if (stream) {
      std::printf("  stream:  %d layers from pinned host memory, %.2f GB per step, %.1f GB/s host-to-device in decode%s "
                  "(pinned copy bound %.1f GB/s)\n",
                  stream->count(), static_cast<double>(stream->host_bytes()) / 1e9, stream_gbps,
                  ratio(stream_gbps, f.pinned_h2d_gbps).c_str(), f.pinned_h2d_gbps);
    }
  }

  if (!a.json.empty()) {
    FILE* out = std::fopen(a.json.c_str(), "w");
    if (!out) return fail(invalid_argument("--json " + a.json + ": cannot write"));
    std::fprintf(
        out,
        "{\"shape\":\"%s\",\"dtype\":\"%s\",\"backend\":\"%s\",\"threads\":%d,\"triad_gbps\":%.3f,"
        "\"read_gbps\":%.3f,\"bw_bound_gbps\":%.3f,"
        "\"fma_gflops\":%.3f,\"encoder_ms_per_audio_s\":%.3f,\"encoder_gflops\":%.3f,"
        "\"prefill_tokens\":%d,\"prefill_tok_s\":%.3f,\"prefill_gflops\":%.3f,\"prefill_ratio\":%.4f,"
        "\"batch\":%d,\"decode_tok_s\":%.4f,\"decode_median_ms_per_step\":%.4f,\"decode_median_tok_s\":%.4f,"
        "\"decode_gbps\":%.3f,\"decode_ratio\":%.4f,"
        "\"decode_cpu_gbps\":%.3f,\"decode_cpu_ratio\":%.4f,\"decode_cpu_share\":%.3f,"
        "\"ids_fnv1a\":\"%016llx\",\"memory_cap\":%zu,\"resident_layers\":%d,\"peak_allocated\":%zu,"
        "\"peak_device_used\":%zu,\"stream_h2d_gbps\":%.3f,\"pinned_h2d_gbps\":%.3f}\n",
        shape.c_str(), a.dtype.c_str(), backend_name.c_str(), threads, f.triad_gbps, f.read_gbps,
        f.bw_bound_gbps, f.fma_gflops, f.encoder_ms_per_audio_s, f.encoder_gflops, a.prefill_tokens,
        f.prefill_tok_s, f.prefill_gflops, f.fma_gflops > 0 ? f.prefill_gflops / f.fma_gflops : 0.0, a.batch,
        f.decode_tok_s, f.decode_median_ms, f.decode_median_tok_s, f.decode_gbps,
        ratio_of(f.decode_gbps, f.bw_bound_gbps), f.decode_cpu_gbps,
        ratio_of(f.decode_cpu_gbps, f.bw_bound_gbps), f.decode_cpu_share,
        static_cast<unsigned long long>(ids_hash), cap, mp.resident_layers, peak_alloc, use.max_used,
        stream_gbps, f.pinned_h2d_gbps);
    std::fclose(out);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, CommandContext& ctx) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Measure encoder ms per audio second, prefill tok/s and decode tok/s, each against this machine's "
      "measured bound. Memory bandwidth: the higher of a STREAM triad (a = b + s*c, 12 bytes per "
      "element; best of 7 passes) and a read-only sum (decode only reads weights; 1, 8, and 8 software-"
      "prefetched streams per thread; best of 9 passes), over buffers far larger than the LLC, with the "
      "decode's thread count, timed in the threads' CPU time. Compute: an FMA loop. Decode is given per "
      "wall second and per CPU-second (with the CPU share it got) against the memory bound, and as its "
      "median step (steadier where the host stalls now and then); on a GPU the bound is a device copy");
  sub->add_option("--model", args->model, "Checkpoint directory");
  sub->add_option("--random", args->random, "Seeded random weights built in memory at a shape: 7b or tiny");
  sub->add_option("--dtype", args->dtype, "Weight dtype of --random: bf16, f16 or f32")->capture_default_str();
  sub->add_option("--seed", args->seed, "Seed of --random weights and inputs")->capture_default_str();
  sub->add_option("--threads", args->threads, "Worker threads (default: $VIBEVOICE_THREADS, else physical cores)");
  sub->add_option("--device", args->device, "cpu, cuda, cuda:N, or auto (a GPU when one is usable)")
      ->capture_default_str();
  sub->add_flag("--gpu-bf16", args->gpu_bf16, "On a GPU: large GEMMs on bf16 tensor cores (default f32)");
  sub->add_flag("--deterministic", args->deterministic,
                "On a GPU: batch-invariant arithmetic (a request's results do not depend on the others "
                "sharing its steps; one-row GEMMs lose the GEMV path's speed). The CPU always is");
  sub->add_option("--audio-seconds", args->audio_seconds, "Audio fed to the encoders")->capture_default_str();
  sub->add_option("--prefill-tokens", args->prefill_tokens, "Prompt rows in the prefill step")->capture_default_str();
  sub->add_option("--decode-tokens", args->decode_tokens, "Decode steps timed")->capture_default_str();
  sub->add_option("--batch", args->batch, "Sequences decoded together")->capture_default_str();
  sub->add_flag("--skip-encoder", args->skip_encoder, "Do not time the encoders");
  sub->add_flag("--skip-probes", args->skip_probes,
                "Do not measure the bounds (memory bandwidth probes, FMA peak): no ratios");
  sub->add_option("--gpu-memory", args->gpu_memory,
                  "Device memory cap (18GiB, 8G, 20GB, 512MiB or 80%): weights, KV pool, workspaces and the "
                  "CUDA context are planned under it; the KV pool shrinks to what remains");
  sub->add_option("--gpu-layers", args->gpu_layers,
                  "Decoder layers kept on the device; the others stream from pinned host memory every step "
                  "(-1: as many as --gpu-memory allows, all without it)")
      ->capture_default_str();
  sub->add_option("--json", args->json, "Also write the figures to this file as JSON");
  sub->callback([args, &ctx] { ctx.exit_code = run_bench(*args); });
}

}  // namespace vv::cli
