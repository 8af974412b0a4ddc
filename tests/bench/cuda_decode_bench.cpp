// The CUDA backend at a model's shape with seeded random weights (no download): the skinny GEMM's
// bandwidth per weight shape against the device's copy bandwidth, prefill tok/s, batch-1 decode
// tok/s, the two encoders over N seconds of audio, and the standard job (120 s of audio, 1000
// tokens generated). Prints a table and, last, one JSON line. Batch-1 decode: decode_tok_s over the whole
// timed run, and decode_step_tok_s from its median step (steadier against host stalls: A/Bs read it).
//   cuda_decode_bench [--preset 7b|tiny] [--device cuda:0|cpu] [--prompt 1024] [--chunk 1024] [--tokens 256]
//   [--bf16]
//   [--job-tokens 1000] [--no-gemv] [--table-only]
//                     [--gemv-m 1,2,4,16,64] [--enc-audio 60] [--enc-reps 1] [--job-audio 120]
//   cuda_decode_bench --attn-bench [--preset 7b] [--attn-rows 1,8,64,128] [--attn-ctx 300,600,1031]
//                     [--attn-layers 4]
//   cuda_decode_bench --batch-bench [--batch-rows 64,128] [--batch-ctx 400] [--batch-steps 64] [--bf16]
//                     [--no-gemv] [--batch-no-prefill]
//   cuda_decode_bench --ab "NAME=VALUE ..." [--ab-rounds 16] [--ab-steps 32] [--ab-rows 1] [--prompt 1024]
//   [--ab-rewind] [--bf16] [--no-gemv]
//   [--kernel-trace N] [--kernel-trace-all] [--kernel-trace-early] [--kernel-trace-gap-us 8]
//   (batch 1 and --batch-bench)
// --kernel-trace N: after the timed decode (batch 1, and each --batch-bench row count), N more steps with
// every kernel recorded as it ran (CUPTI, kernels/device/kernel_trace.h): a step kernel by kernel, what
// each one adds to its wall time, PDL overlaps included. The timed figures are taken without it, unless
// --kernel-trace-early starts it before the warm-up (for a tracer that misses graphs captured before it).
// After the timed steps (batch 1, and each --batch-bench row count) the last step's graph runs again back to
// back with one sync at the end: the step's device time without the host's turnaround between steps, printed
// beside the steps that wait for their ids ("host turnaround").
// VV_CUDA_ATTN_STAMPS=1: the timed batch-1 decode's attention blocks, stage by stage (lines "astamp",
// vv::attn_stamps_report; the newest 32,768 blocks, launches cut at 50 us).
// --table-only stops after the GEMM table. --attn-bench times the decode attention alone (see attn_bench) and
// nothing else. --batch-bench times batched decode steps alone (after the copy and the GEMM table): N
// sequences of --batch-ctx positions each, then --batch-steps steps of one row per sequence (the
// scheduler's full decode steps without it: issue 13's curve points), against the bound of reading the
// weights and every row's K/V once at the measured copy bandwidth.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/device_runner.h"
#include "kernels/device/backend_factory.h"
#include "kernels/device/kernel_trace.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  std::string preset = "7b";
  std::string device = "cuda:0";  // --device (cpu: the tiny preset's logic on a machine without a GPU)
  int64_t prompt = 1024;
  int64_t chunk = 1024;  // --chunk: prompt rows per prefill step (the runner's prefill_chunk and max_rows)
  int tokens = 256;
  bool bf16 = false;
  int job_tokens = 1000;
  double job_audio_s = 120;
  double enc_audio_s = 60;
  int enc_reps = 1;
  bool gemv_table = true;
  bool table_only = false;  // --table-only: the copy bandwidth and the GEMM table, then exit
  std::vector<int64_t> gemv_rows{1, 2, 4, 16, 64};
  bool attn_bench = false;
  std::vector<int64_t> attn_rows{1, 8, 64, 128};
  std::vector<int64_t> attn_ctx{300, 600, 1031};
  int attn_layers = 4;
  bool batch_bench = false;
  std::vector<int64_t> batch_rows{64, 128};
  int64_t batch_ctx = 400;
  int batch_steps = 64;
  int kernel_trace = 0;             // --kernel-trace N: a second, traced run of N decode steps (0: none)
  bool kernel_trace_all = false;    // --kernel-trace-all: every kernel position of a step, not only the sums
  double kernel_trace_gap_us = 8;   // --kernel-trace-gap-us: GPU idle time that separates two steps
  bool kernel_trace_early = false;  // --kernel-trace-early: the trace starts before the warm-up (graphs
                                    // captured while it records), and the timed steps are traced too
  bool batch_prefill = true;  // --batch-no-prefill: the cache's context left as allocated (for Nsight runs:
                              // a decode step reads the same bytes whatever they hold)
  std::string ab_env;         // --ab "NAME=VALUE ...": decode, A/B in one process (ab_bench)
  int ab_rounds = 16;         // --ab-rounds: alternations of A and B
  int ab_steps = 32;          // --ab-steps: decode steps a configuration runs in a round
  int64_t ab_rows = 1;        // --ab-rows: sequences decoding together (a step's rows), each of --prompt rows
  bool ab_rewind = false;     // --ab-rewind: every turn decodes the same positions again (ab_bench)
};

// --kernel-trace: trace_begin starts recording every kernel (a tracer that cannot start says why and the
// bench goes on without it); trace_end stops it and prints the per-step report.
bool trace_begin(const Args& a, const std::string& title) {
  if (a.kernel_trace <= 0) return false;
  std::string why;
  if (vv::kernel_trace_start(&why)) return true;
  std::printf("ktrace %s: no kernel trace: %s\n", title.c_str(), why.c_str());
  return false;
}
void trace_end(const Args& a, const std::string& title, bool started) {
  if (!started) return;
  uint64_t dropped = 0;
  const std::vector<vv::KernelSpan> spans = vv::kernel_trace_stop(&dropped);
  const auto gap = static_cast<uint64_t>(a.kernel_trace_gap_us * 1e3);
  size_t in_graphs = 0;
  for (const vv::KernelSpan& k : spans) in_graphs += k.graph_node != 0;
  std::printf("%s", vv::trace_report(vv::trace_steps(spans, gap), title, a.kernel_trace_all).c_str());
  std::printf("ktrace %s: %zu kernels recorded (%zu launched from graphs), %llu dropped%s\n", title.c_str(),
              spans.size(), in_graphs, static_cast<unsigned long long>(dropped),
              a.kernel_trace_early ? "; the timed figures above were taken with the trace on" : "");
}
// N more steps (`steps` runs them) traced, after the timed ones; with --kernel-trace-early the trace began
// before the warm-up (`early`: trace_begin's answer then) and covers the timed steps too.
template <typename Fn>
bool traced(const Args& a, const std::string& title, bool early, Fn steps) {
  if (a.kernel_trace <= 0) return true;
  const bool started = a.kernel_trace_early ? early : trace_begin(a, title);
  const auto t = Clock::now();
  const bool ok = steps();
  // The traced steps' wall time against the untraced figure above: the tracer's own cost (CUPTI
  // instruments each kernel's start and end on Hopper).
  std::printf("ktrace %s: %d traced steps, %.3f ms a step on the host's clock\n", title.c_str(),
              a.kernel_trace, seconds_since(t) / a.kernel_trace * 1e3);
  trace_end(a, title, started);
  return ok;
}

std::vector<int64_t> parse_list(const std::string& v) {  // "1,2,4"
  std::vector<int64_t> out;
  for (size_t p = 0; p < v.size();) {
    const size_t e = std::min(v.find(',', p), v.size());
    out.push_back(std::stoll(v.substr(p, e - p)));
    p = e + 1;
  }
  return out;
}

// Time of `fn` per call on the backend: warm-up, then the median of `reps` synchronized runs.
template <typename Fn>
double time_op(vv::Backend& be, int reps, Fn fn) {
  fn();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    for (int j = 0; j < 10; ++j) fn();
    be.synchronize();
    t.push_back(seconds_since(t0) / 10);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// --attn-bench: paged_attention of decode steps alone, at the model's attention shape (7B: 28 query
// heads, 4 KV heads, head_dim 128) over a bf16 cache of 16-position blocks (the engine's), every
// row attending `ctx` positions of its own sequence through a shuffled block table padded as the
// decoder pads it. `--attn-layers` caches are used in turn, so a call does not find the previous
// call's K/V in L2 (a step reads 28 layers' caches). Prints the time per call (graph-replayed
// bursts, see below), the bytes of K and V the rows read, and their ratio to the H200's 4.23 TB/s. The
// tensor-core kernel runs at every row count (VV_CUDA_DECODE_ATTN=mma) unless the environment says otherwise;
// VV_CUDA_MMA_DECODE* pick its variant (decode_attention.h), and VV_CUDA_PROFILE=1 adds the backend's per-op
// event times (each op synchronised).
int attn_bench(const Args& a, const vv::ModelSpec& spec) {
  setenv("VV_CUDA_DECODE_ATTN", "mma", 0);
  vv::BackendOptions bo;
  bo.gpu_bf16_gemm = true;  // bf16 mode: the mode the tensor-core kernel serves
  auto made = vv::make_backend("cuda:0", bo);
  if (!made.is_ok()) {
    std::fprintf(stderr, "backend: %s\n", made.status().to_string().c_str());
    return 1;
  }
  vv::Backend& be = **made;
  const vv::DecoderSpec& d = spec.decoder;
  const int heads = d.num_heads, kvh = d.num_kv_heads, D = d.head_dim, bs = 16;
  const int64_t max_rows = *std::max_element(a.attn_rows.begin(), a.attn_rows.end());
  const int64_t max_ctx = *std::max_element(a.attn_ctx.begin(), a.attn_ctx.end());
  const int64_t row_blocks = (max_ctx + bs - 1) / bs;
  const int64_t pool = max_rows * row_blocks, slots = pool * bs, kvw = int64_t{kvh} * D,
                qw = int64_t{heads} * D;
  const size_t cache_bytes = static_cast<size_t>(slots * kvw) * 2;
  std::printf("%s: decode attention %d/%dx%d, bf16 cache, block size %d, %d caches of %.0f MB (K and V)\n",
              be.name().c_str(), heads, kvh, D, bs, a.attn_layers, 2.0 * cache_bytes / 1e6);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> noise(size_t{8} << 20);  // 16 MB of random bf16, tiled over the caches
  for (auto& v : noise) v = vv::f32_to_bf16(u(rng));
  std::vector<vv::Buffer> caches;
  for (int i = 0; i < 2 * a.attn_layers; ++i) {
    caches.push_back(be.allocate(cache_bytes));
    auto* base = static_cast<char*>(caches.back().data());
    const size_t step = noise.size() * 2 - 2048;  // each cache starts at another offset of the noise
    for (size_t off = 0; off < cache_bytes; off += step)
      be.upload(base + off, noise.data() + (i * 4099) % 1024, std::min(step, cache_bytes - off));
  }
  std::vector<float> qh(static_cast<size_t>(max_rows * qw));
  for (auto& v : qh) v = u(rng);
  vv::Buffer qb = be.allocate(qh.size() * 4), ob = be.allocate(qh.size() * 4);
  be.upload(qb.data(), qh.data(), qh.size() * 4);
  const int64_t max_width = row_blocks * 2;  // above any padded width
  vv::Buffer tb = be.allocate(static_cast<size_t>(max_rows * max_width) * 4);
  vv::Buffer sb = be.allocate(static_cast<size_t>(max_rows) * 4),
             pb = be.allocate(static_cast<size_t>(max_rows) * 4);
  std::vector<int32_t> perm(static_cast<size_t>(pool));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const vv::AttentionShape shape{heads, kvh, D, 1.0f / std::sqrt(static_cast<float>(D))};
  std::string json;
  for (int64_t n : a.attn_rows) {
    for (int64_t ctx : a.attn_ctx) {
      // The decoder's table width for a decode step: rounded up to 4 blocks, then to a quarter of
      // the power of two below it (qwen2_decoder.cpp).
      int64_t width = (ctx + bs - 1) / bs, g = 4;
      while (g * 8 <= width) g *= 2;
      width = (width + g - 1) / g * g;
      std::vector<int32_t> tables(static_cast<size_t>(n * width), 0), seq(static_cast<size_t>(n)),
          pos(static_cast<size_t>(n), static_cast<int32_t>(ctx - 1));
      for (int64_t r = 0; r < n; ++r) {
        seq[r] = static_cast<int32_t>(r);
        for (int64_t b = 0; b < (ctx + bs - 1) / bs; ++b) tables[r * width + b] = perm[r * row_blocks + b];
      }
      be.upload(tb.data(), tables.data(), tables.size() * 4);
      be.upload(sb.data(), seq.data(), seq.size() * 4);
      be.upload(pb.data(), pos.data(), pos.size() * 4);
      vv::AttentionRows rows;
      rows.row_seq = vv::Tensor::vector(sb.data(), vv::DType::kI32, n);
      rows.row_pos = vv::Tensor::vector(pb.data(), vv::DType::kI32, n);
      rows.block_tables = vv::Tensor::matrix(tb.data(), vv::DType::kI32, n, width);
      rows.block_size = bs;
      const vv::Tensor q = vv::Tensor::matrix(qb.data(), vv::DType::kF32, n, qw);
      vv::Tensor o = vv::Tensor::matrix(ob.data(), vv::DType::kF32, n, qw);
      // Bursts of kBurst calls, one synchronize each: the backend captures a repeated burst into a
      // CUDA graph on its second sight and replays it after (as it replays the decode step), so the
      // time is the GPU's, not the host's launch path. The median burst of 7, per call.
      constexpr int kBurst = 64;
      auto burst = [&] {
        for (int i = 0; i < kBurst; ++i) {
          const int layer = i % a.attn_layers;
          const vv::KvLayer cache{
              vv::Tensor::matrix(caches[2 * layer].data(), vv::DType::kBF16, slots, kvw),
              vv::Tensor::matrix(caches[2 * layer + 1].data(), vv::DType::kBF16, slots, kvw)};
          be.paged_attention(q, rows, cache, shape, o);
        }
        be.synchronize();
      };
      burst();
      burst();
      std::vector<double> runs;
      for (int i = 0; i < 7; ++i) {
        const auto t0 = Clock::now();
        burst();
        runs.push_back(seconds_since(t0) / kBurst);
      }
      std::sort(runs.begin(), runs.end());
      const double t = runs[runs.size() / 2];
      const double bytes = 2.0 * static_cast<double>(n * ctx * kvw) * 2;
      const double gbs = bytes / t / 1e9;
      std::printf("attn rows %4lld ctx %5lld: %8.2f us/layer  %7.1f MB K+V  %6.0f GB/s  %.2f of 4.23 TB/s\n",
                  static_cast<long long>(n), static_cast<long long>(ctx), t * 1e6, bytes / 1e6, gbs,
                  gbs / 4230);
      json += std::string(json.empty() ? "" : ",") + "{\"rows\":" + std::to_string(n) +
              ",\"ctx\":" + std::to_string(ctx) + ",\"us\":" + std::to_string(t * 1e6) +
              ",\"gbps\":" + std::to_string(gbs) + "}";
    }
  }
  const std::string rep = vv::backend_profile_report(be);
  if (!rep.empty()) std::printf("per-op time:\n%s", rep.c_str());
  auto env = [](const char* k) {
    const char* v = std::getenv(k);
    return std::string(v ? v : "");
  };
  std::printf(
      "{\"device\":\"%s\",\"decode_attn\":\"%s\",\"mma_decode\":\"%s\",\"stages\":\"%s\",\"warps\":\"%s\","
      "\"chunk\":\"%s\",\"attn\":[%s]}\n",
      be.name().c_str(), env("VV_CUDA_DECODE_ATTN").c_str(), env("VV_CUDA_MMA_DECODE").c_str(),
      env("VV_CUDA_MMA_DECODE_STAGES").c_str(), env("VV_CUDA_MMA_DECODE_WARPS").c_str(),
      env("VV_CUDA_MMA_DECODE_CHUNK").c_str(), json.c_str());
  return 0;
}

// The prompt `ids` through runner r in steps of `chunk` rows over the reserved `blocks` (speech rows, where
// given, scattered in at the audio tokens). False, with the reason on stderr, when a step fails.
bool prefill_rows(vv::Runner& r, const std::vector<vv::BlockId>& blocks, const std::vector<int32_t>& ids,
                  int64_t chunk, const vv::Tensor* speech, int32_t audio_token, const char* what) {
  const auto n = static_cast<int64_t>(ids.size());
  for (int64_t p = 0, used = 0; p < n; p += chunk) {
    vv::StepPlan plan;
    vv::SequenceRows rows;
    const int64_t c = std::min<int64_t>(chunk, n - p);
    rows.ids.assign(ids.begin() + p, ids.begin() + p + c);
    rows.start_pos = p;
    rows.blocks = blocks;
    rows.speech = speech;
    rows.speech_begin = used;
    used += std::count(rows.ids.begin(), rows.ids.end(), audio_token);
    rows.want_output = p + c == n;
    plan.seqs.push_back(rows);
    auto out = r.execute(plan);
    if (!out.is_ok()) {
      std::fprintf(stderr, "%s: %s\n", what, out.status().to_string().c_str());
      return false;
    }
  }
  return true;
}

// --ab's NAME=VALUE pairs, split on spaces; empty (and why on stderr) when one is not NAME=VALUE or none is
// given.
std::vector<std::pair<std::string, std::string>> ab_vars(const std::string& env) {
  std::vector<std::pair<std::string, std::string>> vars;
  for (size_t p = 0; p < env.size();) {
    const size_t e = std::min(env.find(' ', p), env.size());
    const std::string item = env.substr(p, e - p);
    p = e + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "--ab: '%s' is not NAME=VALUE\n", item.c_str());
      return {};
    }
    vars.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  if (vars.empty()) std::fprintf(stderr, "--ab: no NAME=VALUE given\n");
  return vars;
}

// --ab "NAME=VALUE [NAME=VALUE ...]": decode of two runners over the same checkpoint in one process, A as
// the environment is and B created with those variables set (so only switches read when a backend is
// created differ: SWITCHES.md says which), each with its own weights and cache and the same prompts and
// token ids: --ab-rows sequences (1: batch-1 decode; 64: a batched step of issue 13's curve) of --prompt
// rows each, a step one row of each. After a warm-up of 8 steps each they take turns, --ab-steps steps a
// turn, --ab-rounds rounds, the order reversed every other round (A B, B A, ...), so that the device's
// drift within the run (clocks, temperature) falls on both; separate processes spread ±2 % (session 29),
// this ±0.3 % (session 30). Every step is timed to its tokens on the host. Prints each configuration's
// median step (tok/s: rows over it), the ratio B/A of the medians, the per-round ratios and how many
// rounds B won, and one JSON line (ab_rows, ab_a_step_tok_s, ab_b_step_tok_s, ab_ratio, ab_b_won).
// Without --ab-rewind the rows grow by ab_rounds × ab_steps positions over the run, so a change whose effect
// depends on the length (the batched attention's units, session 31) is measured over a mix; with it every
// turn starts again at the first position after the warm-up (the steps overwrite the same cache rows), so
// every round compares the two at the same --ab-steps positions.
int ab_bench(const Args& a, vv::Runner& ra, const vv::Checkpoint& ckpt, const vv::RunnerOptions& ro,
             const vv::BackendOptions& bo) {
  const std::vector<std::pair<std::string, std::string>> vars = ab_vars(a.ab_env);
  if (vars.empty()) return 2;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const auto& [k, v] : vars) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(k.c_str(), v.c_str(), 1);
  }
  auto t0 = Clock::now();
  auto made = vv::make_runner(ckpt, ro, a.device, bo);
  for (const auto& [k, old] : saved) {
    if (old)
      setenv(k.c_str(), old->c_str(), 1);
    else
      unsetenv(k.c_str());
  }
  if (!made.is_ok()) {
    std::fprintf(stderr, "runner B: %s\n", made.status().to_string().c_str());
    return 1;
  }
  vv::Runner& rb = **made;
  rb.backend().synchronize();
  std::printf("ab: B = %s; its weights uploaded in %.1f s\n", a.ab_env.c_str(), seconds_since(t0));

  const auto nseq = static_cast<size_t>(a.ab_rows);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, 150000);
  // Each sequence's prompt, and the steps' ids (a row of nseq ids a step).
  std::vector<std::vector<int32_t>> prompts(nseq, std::vector<int32_t>(static_cast<size_t>(a.prompt)));
  std::vector<int32_t> steps(static_cast<size_t>(8 + a.ab_rounds * a.ab_steps) * nseq);
  for (auto& pr : prompts)
    for (auto& v : pr) v = tok(rng);
  for (auto& v : steps) v = tok(rng);
  struct Side {
    vv::Runner* r;
    const char* name;
    std::vector<std::vector<vv::BlockId>> blocks;  // a sequence's
    int64_t pos = 0;                               // the next decode position (every sequence's)
    size_t next = 0;                               // the next step's first id in `steps`
    std::vector<double> step_s;                    // the timed steps
  };
  Side side[2] = {{&ra, "A", std::vector<std::vector<vv::BlockId>>(nseq), 0, 0, {}},
                  {&rb, "B", std::vector<std::vector<vv::BlockId>>(nseq), 0, 0, {}}};
  // n steps of side s (timed into its step_s when `timed`); false on an error.
  auto decode = [&](Side& sd, int n, bool timed, std::vector<double>* round) {
    for (int i = 0; i < n; ++i) {
      vv::StepPlan plan;
      for (size_t q = 0; q < nseq; ++q) {
        vv::SequenceRows rows;
        rows.ids = {steps[sd.next++]};
        rows.start_pos = sd.pos;
        rows.blocks = sd.blocks[q];
        plan.seqs.push_back(rows);
      }
      ++sd.pos;
      const auto ts = Clock::now();
      auto out = sd.r->execute(plan);
      if (!out.is_ok()) {
        std::fprintf(stderr, "decode %s: %s\n", sd.name, out.status().to_string().c_str());
        return false;
      }
      const double dt = seconds_since(ts);
      if (timed) {
        sd.step_s.push_back(dt);
        round->push_back(dt);
      }
    }
    return true;
  };
  for (Side& sd : side) {
    const int64_t need = a.prompt + static_cast<int64_t>(steps.size() / nseq) + 8;
    for (size_t q = 0; q < nseq; ++q) {
      if (!sd.r->kv().reserve(sd.blocks[q], need).is_ok()) {
        std::fprintf(stderr, "ab: KV pool too small for %zu sequences of %lld positions\n", nseq,
                     static_cast<long long>(need));
        return 1;
      }
      if (!prefill_rows(*sd.r, sd.blocks[q], prompts[q], ro.prefill_chunk, nullptr, -1,
                        sd.r == &ra ? "prefill A" : "prefill B"))
        return 1;
    }
    sd.pos = a.prompt;
    if (!decode(sd, 8, false, nullptr)) return 1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::vector<double> ratios;  // a round's median step of A over B's (> 1: B faster)
  int b_won = 0;
  for (int i = 0; i < a.ab_rounds; ++i) {
    std::vector<double> rs[2];
    for (int k = 0; k < 2; ++k) {
      const int s = i % 2 == 0 ? k : 1 - k;
      if (a.ab_rewind) side[s].pos = a.prompt + 8;
      if (!decode(side[s], a.ab_steps, true, &rs[s])) return 1;
    }
    ratios.push_back(median(rs[0]) / median(rs[1]));
    b_won += ratios.back() > 1.0;
  }
  for (Side& sd : side)
    for (auto& b : sd.blocks) sd.r->kv().release(b);
  const double ma = median(side[0].step_s), mb = median(side[1].step_s), rows = static_cast<double>(nseq);
  std::printf("ab: %d rounds of %d steps each, %zu row(s) a step, %lld-row prompts, positions %lld..%lld%s\n",
              a.ab_rounds, a.ab_steps, nseq, static_cast<long long>(a.prompt),
              static_cast<long long>(a.prompt + 8), static_cast<long long>(side[0].pos - 1),
              a.ab_rewind ? " (every turn again: --ab-rewind)" : "");
  std::printf("ab: A median step %.4f ms (%.2f tok/s), B (%s) %.4f ms (%.2f tok/s): B/A %.4f\n", ma * 1e3,
              rows / ma, a.ab_env.c_str(), mb * 1e3, rows / mb, ma / mb);
  std::printf("ab: rounds B won: %d of %d; per round (A/B of the medians):", b_won, a.ab_rounds);
  for (double v : ratios) std::printf(" %.4f", v);
  std::printf("\n");
  std::printf(
      "{\"ab_env\":\"%s\",\"prompt\":%lld,\"ab_rows\":%zu,\"ab_rounds\":%d,\"ab_steps\":%d,\"ab_rewind\":%s,"
      "\"ab_a_step_tok_s\":%.2f,\"ab_b_step_tok_s\":%.2f,\"ab_ratio\":%.4f,\"ab_b_won\":%d}\n",
      a.ab_env.c_str(), static_cast<long long>(a.prompt), nseq, a.ab_rounds, a.ab_steps,
      a.ab_rewind ? "true" : "false", rows / ma, rows / mb, ma / mb, b_won);
  return 0;
}

// The last step's graph replayed `reps` times back to back (one host sync at the end): the step's
// device time with no host turnaround between steps (staging the rows, the launch, the ids' download and
// the host's wake-up), against which a step that waits for its ids is compared. Replays rerun the same
// rows at the same positions (the same K/V slots rewritten). -1 when the step was not replayable.
double back_to_back_ms(vv::Backend& be, int reps) {
  const uint64_t h = be.last_flush_handle();
  if (h == 0 || reps < 1) return -1;
  be.synchronize();
  const auto t = Clock::now();
  for (int i = 0; i < reps; ++i)
    if (!be.replay_flush(h)) return -1;
  be.synchronize();
  return seconds_since(t) / reps * 1e3;
}

// --batch-bench: for each N, N sequences of ctx random-token positions (prefilled one sequence a step),
// 8 warm-up steps (the step's graph captured), then `steps` timed steps of one row per sequence.
int batch_bench(const Args& a, vv::Runner& r, const vv::Checkpoint& ckpt, double hbm) {
  const vv::ModelSpec& spec = ckpt.spec();
  const vv::DecoderSpec& d = spec.decoder;
  double weight_bytes = 0;
  for (const vv::HostTensor* t : ckpt.bound_tensors()) {
    if (t->name.find("tokenizer") != std::string::npos || t->name.find("connector") != std::string::npos ||
        t->name.find("multi_modal") != std::string::npos || t->name.find("embed_tokens") != std::string::npos)
      continue;
    weight_bytes += static_cast<double>(t->bytes());
  }
  // K and V of one position over all layers, at the cache's dtype (bf16 with --bf16, else f32).
  const double kv_pos_bytes = 2.0 * d.num_layers * d.num_kv_heads * d.head_dim * (a.bf16 ? 2.0 : 4.0);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, 150000);
  std::string json;
  for (const int64_t n : a.batch_rows) {
    std::vector<std::vector<vv::BlockId>> blocks(static_cast<size_t>(n));
    std::vector<int32_t> next(static_cast<size_t>(n), 0);
    const int64_t ctx = a.batch_ctx;
    bool ok = true;
    for (int64_t s = 0; s < n && ok; ++s) {
      ok = r.kv().reserve(blocks[s], ctx + a.batch_steps + a.kernel_trace + 16).is_ok();
      for (int64_t p = 0; p < ctx && ok && a.batch_prefill; p += 1024) {
        vv::StepPlan plan;
        vv::SequenceRows rows;
        const int64_t c = std::min<int64_t>(1024, ctx - p);
        for (int64_t i = 0; i < c; ++i) rows.ids.push_back(tok(rng));
        rows.start_pos = p;
        rows.blocks = blocks[s];
        rows.want_output = p + c == ctx;
        plan.seqs.push_back(rows);
        auto out = r.execute(plan);
        ok = out.is_ok();
        if (ok && rows.want_output) next[s] = out->next[0];
        if (!ok) std::fprintf(stderr, "prefill: %s\n", out.status().to_string().c_str());
      }
    }
    if (!ok) {
      std::fprintf(stderr, "batch %lld: KV pool or prefill failed\n", static_cast<long long>(n));
      return 1;
    }
    auto step = [&](int64_t pos) {
      vv::StepPlan plan;
      for (int64_t s = 0; s < n; ++s) {
        vv::SequenceRows rows;
        rows.ids = {next[s]};
        rows.start_pos = pos;
        rows.blocks = blocks[s];
        plan.seqs.push_back(rows);
      }
      auto out = r.execute(plan);
      if (!out.is_ok()) {
        std::fprintf(stderr, "decode step: %s\n", out.status().to_string().c_str());
        return false;
      }
      for (int64_t s = 0; s < n; ++s) next[s] = out->next[s];
      return true;
    };
    int64_t pos = ctx;
    const std::string trace_title = "batched decode " + std::to_string(n) + " rows";
    const bool early = a.kernel_trace_early && trace_begin(a, trace_title);
    for (int i = 0; i < 8 && ok; ++i) ok = step(pos++);
    const std::string warm = vv::backend_profile_report(r.backend());  // resets the per-op profile
    (void)warm;
    const auto t = Clock::now();
    for (int i = 0; i < a.batch_steps && ok; ++i) ok = step(pos++);
    const double sec = seconds_since(t);
    if (!ok) return 1;
    const double b2b = back_to_back_ms(r.backend(), a.batch_steps);
    if (b2b > 0)
      std::printf(
          "batched decode %lld rows: the last step's graph back to back %.3f ms a step against %.3f ms "
          "waited on (host turnaround %.3f ms, %.1f %% of the step)\n",
          static_cast<long long>(n), b2b, sec / a.batch_steps * 1e3, sec / a.batch_steps * 1e3 - b2b,
          100 * (1 - b2b / (sec / a.batch_steps * 1e3)));
    ok = traced(a, trace_title, early, [&] {
      bool fine = true;
      for (int i = 0; i < a.kernel_trace && fine; ++i) fine = step(pos++);
      return fine;
    });
    if (!ok) return 1;
    const std::string rep = vv::backend_profile_report(r.backend());
    if (!rep.empty()) std::printf("per-op time, %lld rows:\n%s", static_cast<long long>(n), rep.c_str());
    const double ms = sec / a.batch_steps * 1e3, tps = n * a.batch_steps / sec;
    // Mean context over the timed steps: ctx + 8 warm-up + half the steps (+ the step's own row).
    const double mean_ctx = ctx + 8 + a.batch_steps / 2.0 + 1;
    const double bound_ms = (weight_bytes + n * mean_ctx * kv_pos_bytes) / (hbm * 1e9) * 1e3;
    std::printf(
        "batched decode %lld rows, context %lld: %.3f ms a step, %.0f tok/s; weights %.2f GB + K/V %.2f GB a "
        "step "
        "-> bound %.3f ms (%.0f tok/s) at the measured copy bandwidth (%.0f%%)\n",
        static_cast<long long>(n), static_cast<long long>(ctx), ms, tps, weight_bytes / 1e9,
        n * mean_ctx * kv_pos_bytes / 1e9, bound_ms, n / bound_ms * 1e3, 100 * bound_ms / ms);
    json += std::string(json.empty() ? "" : ",") + "{\"rows\":" + std::to_string(n) +
            ",\"ms_step\":" + std::to_string(ms) + ",\"tok_s\":" + std::to_string(tps) +
            ",\"bound_tok_s\":" + std::to_string(n / bound_ms * 1e3) + "}";
    for (auto& b : blocks) r.kv().release(b);
  }
  std::printf(
      "{\"device\":\"%s\",\"bench\":\"batched_decode\",\"ctx\":%lld,\"copy_gbps\":%.1f,\"points\":[%s]}\n",
      r.backend().name().c_str(), static_cast<long long>(a.batch_ctx), hbm, json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--preset")
      a.preset = next();
    else if (k == "--device")
      a.device = next();
    else if (k == "--prompt")
      a.prompt = std::stoll(next());
    else if (k == "--chunk")
      a.chunk = std::max<int64_t>(1, std::stoll(next()));
    else if (k == "--tokens")
      a.tokens = std::stoi(next());
    else if (k == "--bf16")
      a.bf16 = true;
    else if (k == "--job-tokens")
      a.job_tokens = std::stoi(next());
    else if (k == "--job-audio")
      a.job_audio_s = std::stod(next());
    else if (k == "--enc-audio")
      a.enc_audio_s = std::stod(next());
    else if (k == "--enc-reps")
      a.enc_reps = std::stoi(next());
    else if (k == "--no-gemv")
      a.gemv_table = false;
    else if (k == "--table-only")
      a.table_only = true;
    else if (k == "--gemv-m")
      a.gemv_rows = parse_list(next());  // row counts of the GEMM table
    else if (k == "--attn-bench")
      a.attn_bench = true;
    else if (k == "--attn-rows")
      a.attn_rows = parse_list(next());
    else if (k == "--attn-ctx")
      a.attn_ctx = parse_list(next());
    else if (k == "--attn-layers")
      a.attn_layers = std::max(1, std::stoi(next()));
    else if (k == "--batch-bench")
      a.batch_bench = true;
    else if (k == "--batch-rows")
      a.batch_rows = parse_list(next());
    else if (k == "--batch-ctx")
      a.batch_ctx = std::max<int64_t>(1, std::stoll(next()));
    else if (k == "--batch-steps")
      a.batch_steps = std::max(1, std::stoi(next()));
    else if (k == "--batch-no-prefill")
      a.batch_prefill = false;
    else if (k == "--kernel-trace")
      a.kernel_trace = std::max(0, std::stoi(next()));
    else if (k == "--kernel-trace-all")
      a.kernel_trace_all = true;
    else if (k == "--kernel-trace-early")
      a.kernel_trace_early = true;
    else if (k == "--kernel-trace-gap-us")
      a.kernel_trace_gap_us = std::max(0.0, std::stod(next()));
    else if (k == "--ab")
      a.ab_env = next();
    else if (k == "--ab-rounds")
      a.ab_rounds = std::max(1, std::stoi(next()));
    else if (k == "--ab-steps")
      a.ab_steps = std::max(1, std::stoi(next()));
    else if (k == "--ab-rows")
      a.ab_rows = std::max<int64_t>(1, std::stoll(next()));
    else if (k == "--ab-rewind")
      a.ab_rewind = true;
  }
  if (!a.ab_env.empty() && ab_vars(a.ab_env).empty()) return 2;
  const vv::ModelSpec spec = a.preset == "tiny" ? vv::tiny_spec() : vv::qwen7b_asr_spec();
  if (a.attn_bench) return attn_bench(a, spec);
  auto t0 = Clock::now();
  auto ckpt = vv::Checkpoint::random(spec, 20260126, vv::DType::kBF16);
  if (!ckpt.is_ok()) {
    std::fprintf(stderr, "random checkpoint: %s\n", ckpt.status().to_string().c_str());
    return 1;
  }
  std::printf("random %s checkpoint: %.1f s\n", a.preset.c_str(), seconds_since(t0));
  const int64_t job_frames = static_cast<int64_t>(a.job_audio_s * 24000) / spec.acoustic.hop();
  vv::RunnerOptions ro;
  ro.kv_positions =
      std::max<int64_t>(a.prompt + a.tokens + a.kernel_trace, job_frames + 64 + a.job_tokens) + 64;
  if (!a.ab_env.empty())
    ro.kv_positions = std::max<int64_t>(ro.kv_positions,
                                        a.ab_rows * (a.prompt + 16 + int64_t{a.ab_rounds} * a.ab_steps + 64));
  ro.max_rows = static_cast<int>(std::max<int64_t>(1024, a.chunk));
  ro.prefill_chunk = static_cast<int>(a.chunk);
  ro.max_seqs = static_cast<int>(std::max<int64_t>(4, a.ab_env.empty() ? 1 : a.ab_rows));
  ro.kv_dtype_follows_compute = true;  // as the service: bf16 k/v with --bf16
  if (a.batch_bench) {
    const int64_t most = std::max<int64_t>(1, *std::max_element(a.batch_rows.begin(), a.batch_rows.end()));
    ro.max_seqs = static_cast<int>(most);
    ro.max_rows = static_cast<int>(std::max<int64_t>(1024, most));
    ro.kv_positions = most * (a.batch_ctx + a.batch_steps + a.kernel_trace + 32) + 64;
  }
  vv::BackendOptions bo;
  bo.gpu_bf16_gemm = a.bf16;
  t0 = Clock::now();
  auto runner = vv::make_runner(**ckpt, ro, a.device, bo);
  if (!runner.is_ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  vv::Runner& r = **runner;
  vv::Backend& be = r.backend();
  be.synchronize();
  std::printf("%s: weights uploaded in %.1f s\n", be.name().c_str(), seconds_since(t0));

  // --- bandwidth: device copy, and the skinny GEMM on each weight shape of a decoder layer ------
  const vv::DecoderSpec& d = spec.decoder;
  const int64_t H = d.hidden_size, I = d.intermediate_size, qd = int64_t{d.num_heads} * d.head_dim,
                kvd = int64_t{d.num_kv_heads} * d.head_dim;
  const size_t copy_bytes = size_t{1} << 30;
  vv::Buffer c0 = be.allocate(copy_bytes), c1 = be.allocate(copy_bytes);
  vv::Tensor cs = vv::Tensor::matrix(c0.data(), vv::DType::kU8, 1024, copy_bytes / 1024);
  vv::Tensor cd = vv::Tensor::matrix(c1.data(), vv::DType::kU8, 1024, copy_bytes / 1024);
  const double copy_s = time_op(be, 5, [&] { be.copy(cs, cd); });
  const double hbm = 2.0 * copy_bytes / copy_s / 1e9;
  std::printf("device copy: %.0f GB/s (read + write)\n", hbm);
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"q", qd, H},          {"k/v", kvd, H}, {"o", H, qd},
                          {"gate_up", 2 * I, H}, {"down", H, I},  {"lm_head", d.vocab_size, H}};
  std::string gemv_json;
  for (const Shape& s : shapes) {
    if (!a.gemv_table) break;
    std::vector<uint16_t> w(static_cast<size_t>(s.n * s.k));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (auto& v : w) v = vv::f32_to_bf16(u(rng));
    // Room for the table's largest row count (buffers of 64 rows made --gemv-m ...,128 read and write
    // past them: "cublasLtMatmul failed with status 13", then figures from failed launches).
    const int64_t rows =
        a.gemv_rows.empty() ? 1
                            : std::max<int64_t>(1, *std::max_element(a.gemv_rows.begin(), a.gemv_rows.end()));
    vv::Buffer wb = be.allocate(w.size() * 2), xb = be.allocate(static_cast<size_t>(rows * s.k * 4)),
               ob = be.allocate(static_cast<size_t>(rows * s.n * 4));
    be.upload(wb.data(), w.data(), w.size() * 2);
    std::vector<float> xs(static_cast<size_t>(rows * s.k));  // not zeros: time real data
    for (auto& v : xs) v = u(rng);
    be.upload(xb.data(), xs.data(), xs.size() * 4);
    vv::Tensor wt = vv::Tensor::matrix(wb.data(), vv::DType::kBF16, s.n, s.k);
    for (int64_t m : a.gemv_rows) {
      vv::Tensor x = vv::Tensor::matrix(xb.data(), vv::DType::kF32, m, s.k);
      vv::Tensor o = vv::Tensor::matrix(ob.data(), vv::DType::kF32, m, s.n);
      const double t = time_op(be, 7, [&] { be.gemm(x, wt, nullptr, o, vv::Epilogue::kNone); });
      if (!be.device_error().empty()) {
        std::fprintf(stderr, "gemm %s M=%lld: device error: %s\n", s.name, static_cast<long long>(m),
                     be.device_error().c_str());
        return 1;
      }
      const double gbs = (s.n * s.k * 2.0 + m * s.k * 4.0 + m * s.n * 4.0) / t / 1e9;
      std::printf("gemm %-8s M=%-3lld N=%-6lld K=%-6lld %8.1f us %7.0f GB/s (%.0f%% of copy) %6.1f TFLOP/s\n",
                  s.name, static_cast<long long>(m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                  t * 1e6, gbs, 100 * gbs / hbm, 2.0 * m * s.n * s.k / t / 1e12);
      if (m >= 256 && (std::string(s.name) == "o" || std::string(s.name) == "down")) {
        // The prefill's residual form (beta = 1 into the f32 rows), next to the plain product above.
        const double tr = time_op(be, 7, [&] { be.gemm(x, wt, nullptr, o, vv::Epilogue::kAddResidual); });
        std::printf("gemm %-8s M=%-3lld N=%-6lld K=%-6lld %8.1f us  (+= residual)\n", s.name,
                    static_cast<long long>(m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                    tr * 1e6);
      }
      if (m == 1) {
        gemv_json += std::string(gemv_json.empty() ? "" : ",") + "\"" + s.name + "\":" + std::to_string(gbs);
      }
    }
  }
  c0.reset();
  c1.reset();
  if (a.table_only) return 0;
  if (a.batch_bench) return batch_bench(a, r, **ckpt, hbm);
  if (!a.ab_env.empty()) return ab_bench(a, r, **ckpt, ro, bo);

  // --- prefill and batch-1 decode on text rows -----------------------------------------------
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, 150000);
  std::vector<vv::BlockId> blocks;
  auto run_prefill = [&](int64_t n, const vv::Tensor* speech, std::vector<int32_t> ids,
                         int64_t decode) -> double {
    blocks.clear();
    if (!r.kv().reserve(blocks, n + decode).is_ok()) {
      std::fprintf(stderr, "KV pool too small for %lld positions\n", static_cast<long long>(n + decode));
      return -1;
    }
    const auto t = Clock::now();
    ids.resize(static_cast<size_t>(n));
    if (!prefill_rows(r, blocks, ids, ro.prefill_chunk, speech, spec.audio_token_id, "prefill")) return -1;
    return seconds_since(t);
  };
  // step_s: each step's wall time too (a step ends when its token is on the host).
  auto run_decode = [&](int64_t start, int n, std::vector<double>* step_s = nullptr) -> double {
    int32_t next = tok(rng);
    const auto t = Clock::now();
    auto ts = t;
    for (int i = 0; i < n; ++i) {
      vv::StepPlan plan;
      vv::SequenceRows rows;
      rows.ids = {next};
      rows.start_pos = start + i;
      rows.blocks = blocks;
      plan.seqs.push_back(rows);
      auto out = r.execute(plan);
      if (!out.is_ok()) {
        std::fprintf(stderr, "decode: %s\n", out.status().to_string().c_str());
        return -1;
      }
      next = out->next[0];
      if (step_s) {
        const auto te = Clock::now();
        step_s->push_back(std::chrono::duration<double>(te - ts).count());
        ts = te;
      }
    }
    return seconds_since(t);
  };
  std::vector<int32_t> ids(static_cast<size_t>(a.prompt));
  for (auto& v : ids) v = tok(rng);
  auto profile = [&](const char* phase) {
    const std::string rep = vv::backend_profile_report(be);
    if (!rep.empty()) std::printf("per-op time, %s:\n%s", phase, rep.c_str());
  };
  // Prefill as bench_reference.py times it: one warm-up of the same length (cuBLASLt plans, workspaces
  // grown), then the median of three runs.
  run_prefill(a.prompt, nullptr, ids, 0);
  r.kv().release(blocks);
  profile("warm-up");
  std::vector<double> pre_runs;
  for (int i = 0; i < 3; ++i) {
    pre_runs.push_back(run_prefill(a.prompt, nullptr, ids, a.tokens + 8 + a.kernel_trace));
    if (i < 2) r.kv().release(blocks);  // the last run's cache is the decode's context
  }
  std::sort(pre_runs.begin(), pre_runs.end());
  const double pre_s = pre_runs[1];
  profile("prefill (3 runs)");
  const bool early = a.kernel_trace_early && trace_begin(a, "decode batch 1");
  run_decode(a.prompt, 8);
  profile("decode warm-up");
  (void)vv::attn_stamps_take();  // the warm-up's and the prefill's blocks go
  std::vector<double> dec_steps;
  const double dec_s = run_decode(a.prompt + 8, a.tokens, &dec_steps);
  profile("decode");
  const double b2b_ms = back_to_back_ms(be, a.tokens);
  if (const char* st = std::getenv("VV_CUDA_ATTN_STAMPS"); st && std::string(st) == "1")
    std::printf("%s", vv::attn_stamps_report(vv::attn_stamps_take(), 50000).c_str());
  if (!traced(a, "decode batch 1", early,
              [&] { return run_decode(a.prompt + 8 + a.tokens, a.kernel_trace) >= 0; }))
    return 1;
  r.kv().release(blocks);
  const double bytes_per_token = [&] {
    double b = 0;
    for (const vv::HostTensor* t : (*ckpt)->bound_tensors()) {
      if (t->name.find("tokenizer") != std::string::npos || t->name.find("connector") != std::string::npos ||
          t->name.find("multi_modal") != std::string::npos ||
          t->name.find("embed_tokens") != std::string::npos)
        continue;
      b += static_cast<double>(t->bytes());
    }
    return b;
  }();
  const double dec_tps = a.tokens / dec_s, pre_tps = a.prompt / pre_s;
  // The median step: a stall of the host (or one slow step) moves the mean of 256 steps, not the median,
  // so A/Bs of a few percent read it (decode_step_tok_s).
  std::sort(dec_steps.begin(), dec_steps.end());
  const auto step_q = [&](double q) {
    return dec_steps.empty()
               ? 0.0
               : dec_steps[std::min(dec_steps.size() - 1, static_cast<size_t>(q * dec_steps.size()))];
  };
  const double step_tps = dec_steps.empty() ? 0.0 : 1.0 / step_q(0.5);
  const double bound_tps = hbm * 1e9 / bytes_per_token;
  std::printf("prefill %lld rows: %.1f ms, %.0f tok/s\n", static_cast<long long>(a.prompt), pre_s * 1e3,
              pre_tps);
  std::printf(
      "decode batch 1: %.3f ms/token, %.1f tok/s; weights read per token %.2f GB -> bound %.1f tok/s at the "
      "measured copy bandwidth (%.0f%%)\n",
      dec_s / a.tokens * 1e3, dec_tps, bytes_per_token / 1e9, bound_tps, 100 * dec_tps / bound_tps);
  std::printf("decode batch 1 steps: median %.4f ms (%.1f tok/s), p10 %.4f, p90 %.4f, max %.4f ms\n",
              step_q(0.5) * 1e3, step_tps, step_q(0.1) * 1e3, step_q(0.9) * 1e3, step_q(1.0) * 1e3);
  if (b2b_ms > 0)
    std::printf(
        "decode batch 1: the last step's graph back to back %.4f ms a step against the median %.4f ms "
        "(host turnaround %.4f ms, %.1f %% of the step)\n",
        b2b_ms, step_q(0.5) * 1e3, step_q(0.5) * 1e3 - b2b_ms, 100 * (1 - b2b_ms / (step_q(0.5) * 1e3)));

  // --- encoders and the standard job ---------------------------------------------------------
  std::normal_distribution<float> g(0.f, 0.1f);
  std::vector<float> audio(static_cast<size_t>(std::max(a.enc_audio_s, a.job_audio_s) * 24000));
  for (auto& v : audio) v = g(rng);
  const int64_t enc_n =
      static_cast<int64_t>(a.enc_audio_s * 24000) / spec.acoustic.hop() * spec.acoustic.hop();
  // Two warm-up encodes, each result dropped before the next: the first sees the encoders' op sequence
  // (run eagerly), the second captures it into a graph (the GPU idles while the host captures and
  // instantiates: ≈ 2 ms on an H200), and the timed runs replay it, as a server's encodes do once a job
  // gets the addresses of a job before it (the allocation cache hands them back). Until session 35 the
  // timed run was the capture: the first timed encode was 1.6-1.9 ms slower than the later ones.
  // One encode from an idle stream to its rows on the device (encode returns with work still queued:
  // synchronize before and after): its whole time and its host time in encode() itself (issuing the ops,
  // allocations included), each appended; false (after a message) if the encode failed.
  const auto timed_encode = [&](std::vector<double>& total, std::vector<double>& issue) {
    be.synchronize();
    t0 = Clock::now();
    auto enc = r.encode(audio.data(), enc_n);
    issue.push_back(seconds_since(t0));
    be.synchronize();
    total.push_back(seconds_since(t0));
    if (!enc.is_ok()) std::fprintf(stderr, "encode: %s\n", enc.status().to_string().c_str());
    return enc.is_ok();
  };
  std::vector<double> enc_warm, enc_warm_issue;
  for (int i = 0; i < 2; ++i)
    if (!timed_encode(enc_warm, enc_warm_issue)) return 1;
  profile("encoder warm-up");
  std::printf("encoder warm-up runs (ms; the op sequence's first sight, then its capture): %.2f %.2f\n",
              enc_warm[0] * 1e3, enc_warm[1] * 1e3);
  // --enc-reps N: the median of N timed runs; the per-op profile covers all N.
  std::vector<double> enc_runs, enc_issue;
  for (int i = 0; i < std::max(a.enc_reps, 1); ++i)
    if (!timed_encode(enc_runs, enc_issue)) return 1;
  profile("encoders");
  if (enc_runs.size() > 1) {
    std::printf("encoder runs (ms):");
    for (double v : enc_runs) std::printf(" %.2f", v * 1e3);
    std::printf("\n");
  }
  std::printf("encoder runs' host time in encode() (ms):");
  for (double v : enc_issue) std::printf(" %.2f", v * 1e3);
  std::printf("\n");
  std::sort(enc_runs.begin(), enc_runs.end());
  const double enc_s = enc_runs[enc_runs.size() / 2];
  std::printf("encoders over %.0f s of audio: %.1f ms (%.2f ms per audio second)\n", a.enc_audio_s,
              enc_s * 1e3, enc_s * 1e3 / a.enc_audio_s);

  const int64_t job_n = job_frames * spec.acoustic.hop();
  t0 = Clock::now();
  auto speech = r.encode(audio.data(), job_n);
  if (!speech.is_ok()) return 1;
  std::vector<int32_t> job_ids;
  for (int i = 0; i < 40; ++i) job_ids.push_back(tok(rng));
  job_ids.push_back(spec.audio_bos_token_id);
  for (int64_t f = 0; f < speech->frames(); ++f) job_ids.push_back(spec.audio_token_id);
  job_ids.push_back(spec.audio_eos_token_id);
  for (int i = 0; i < 20; ++i) job_ids.push_back(tok(rng));
  const double job_pre =
      run_prefill(static_cast<int64_t>(job_ids.size()), &speech->rows.t, job_ids, a.job_tokens);
  const double job_dec = run_decode(static_cast<int64_t>(job_ids.size()), a.job_tokens);
  r.kv().release(blocks);
  const double job_s = seconds_since(t0);
  std::printf(
      "standard job (%.0f s audio, %zu prompt rows, %d tokens): %.2f s, RTF %.4f (prefill %.1f ms, decode "
      "%.1f ms)\n",
      a.job_audio_s, job_ids.size(), a.job_tokens, job_s, job_s / a.job_audio_s, job_pre * 1e3,
      job_dec * 1e3);
  std::printf(
      "{\"device\":\"%s\",\"preset\":\"%s\",\"copy_gbps\":%.1f,\"gemv_m1_gbps\":{%s},\"prefill_rows\":%lld,"
      "\"prefill_chunk\":%lld,"
      "\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.2f,\"decode_step_tok_s\":%.2f,\"decode_bound_tok_s\":%.1f,"
      "\"encoder_ms_%.0fs\":%.2f,"
      "\"job_rtf\":%.5f}\n",
      be.name().c_str(), a.preset.c_str(), hbm, gemv_json.c_str(), static_cast<long long>(a.prompt),
      static_cast<long long>(a.chunk), pre_tps, dec_tps, step_tps, bound_tps, a.enc_audio_s, enc_s * 1e3,
      job_s / a.job_audio_s);
  return 0;
}
