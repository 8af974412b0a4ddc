// Placement at a model's shape with seeded random weights, several placements in ONE process over
// ONE checkpoint (so a device call pays the random weights once): for each --run (a memory cap in
// GiB, "cap:20", or resident layers, "layers:14", or "resident"), the memory plan, the peak device
// memory (allocation counter, and cudaMemGetInfo's used memory sampled after each phase) against
// the cap, prefill and batch-1 decode tok/s, the host-to-device bandwidth reached by layer
// streaming against a pinned copy measured in the same process, and whether the greedy ids equal
// the first run's. The same code path runs on the CPU (--device cpu, --preset tiny).
//   placement_bench [--preset 7b|tiny] [--device cuda] [--bf16] [--prompt 256] [--tokens 16]
//                   [--run cap:20 --run layers:14 ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/memory_plan.h"
#include "engine/runner/runner.h"
#include "kernels/device/backend_factory.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  std::string preset = "7b";
  std::string device = "cuda";
  bool bf16 = false;
  int prompt = 256;
  int tokens = 16;
  std::vector<std::string> runs;
};

// The driver's used memory (total − free), the most seen at the sample points.
struct DeviceUse {
  vv::Backend* be = nullptr;
  size_t max_used = 0;
  void sample() {
    size_t f = 0, t = 0;
    if (be && be->device_memory(&f, &t)) max_used = std::max(max_used, t - f);
  }
};

double pinned_h2d_gbps(vv::Backend& be) {
  const size_t bytes = size_t{512} << 20;
  vv::Buffer host = be.allocate_host(bytes), dev = be.allocate(bytes);
  if (!host.data() || !dev.data()) return 0;
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    be.synchronize();
    const auto t0 = Clock::now();
    be.wait_copy(be.copy_async(dev.data(), host.data(), bytes));
    be.synchronize();
    const double s = seconds_since(t0);
    if (i > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

struct RunFigures {
  std::vector<vv::TokenId> ids;
  double prefill_tok_s = 0, decode_tok_s = 0, stream_gbps = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace vv;
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--preset")
      a.preset = next();
    else if (k == "--device")
      a.device = next();
    else if (k == "--bf16")
      a.bf16 = true;
    else if (k == "--prompt")
      a.prompt = std::stoi(next());
    else if (k == "--tokens")
      a.tokens = std::stoi(next());
    else if (k == "--run")
      a.runs.push_back(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.runs.empty()) a.runs = {"resident"};
  BackendOptions bo;
  bo.gpu_bf16_gemm = a.bf16;
  const auto t_ckpt = Clock::now();
  auto ck = Checkpoint::random(a.preset == "7b" ? qwen7b_asr_spec() : tiny_spec(), 1, DType::kBF16);
  if (!ck.is_ok()) {
    std::fprintf(stderr, "%s\n", ck.status().to_string().c_str());
    return 1;
  }
  const Checkpoint& ckpt = **ck;
  const DecoderSpec& d = ckpt.spec().decoder;
  std::printf("random %s weights (bf16) in %.1f s; decoder %d layers\n", a.preset.c_str(),
              seconds_since(t_ckpt), d.num_layers);
  double pinned = 0;
  {
    auto be = make_backend(a.device, bo);
    if (!be.is_ok()) {
      std::fprintf(stderr, "%s\n", be.status().to_string().c_str());
      return 1;
    }
    pinned = pinned_h2d_gbps(**be);
    std::printf("pinned host-to-device copy (512 MiB, best of 4): %.1f GB/s on %s\n", pinned,
                (*be)->name().c_str());
  }
  std::vector<TokenId> reference;
  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> tok(0, 151642);
  std::vector<TokenId> prompt(static_cast<size_t>(a.prompt));
  for (TokenId& t : prompt) t = tok(rng);
  for (const std::string& run : a.runs) {
    RunnerOptions o;
    o.max_rows = a.prompt;
    o.prefill_chunk = a.prompt;
    o.max_seqs = 1;
    o.kv_positions = a.prompt + a.tokens + 64;
    o.min_kv_positions = o.kv_positions;
    size_t cap = 0;
    if (run.rfind("cap:", 0) == 0) {
      cap = static_cast<size_t>(std::stod(run.substr(4)) * 1024 * 1024 * 1024);
      o.memory_cap = cap;
    } else if (run.rfind("layers:", 0) == 0) {
      o.gpu_layers = std::stoi(run.substr(7));
    } else if (run != "resident") {
      std::fprintf(stderr, "--run %s: expected cap:GiB, layers:N or resident\n", run.c_str());
      return 2;
    }
    auto be = make_backend(a.device, bo);
    if (!be.is_ok()) return 1;
    Backend* raw = be->get();
    raw->reset_peak();
    DeviceUse use{raw};
    use.sample();
    const size_t before = use.max_used;
    const auto t_load = Clock::now();
    auto rr = Runner::create(std::move(be).value(), ckpt, o);
    if (!rr.is_ok()) {
      std::printf("[%s] refused: %s\n", run.c_str(), rr.status().message().c_str());
      continue;
    }
    Runner& r = **rr;
    use.sample();
    const double load_s = seconds_since(t_load);
    RunFigures res;
    // Warm-up prefill (plans, workspaces, graphs), then the timed prefill and decode steps.
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<BlockId> blocks;
      StepPlan plan;
      SequenceRows rows;
      rows.ids = prompt;
      if (!r.kv().reserve(blocks, a.prompt + a.tokens + 1).is_ok()) return 1;
      rows.blocks = blocks;
      plan.seqs.push_back(rows);
      auto t0 = Clock::now();
      auto out = r.execute(plan);
      if (!out.is_ok()) {
        std::printf("[%s] %s\n", run.c_str(), out.status().to_string().c_str());
        return 1;
      }
      const double prefill_s = seconds_since(t0);
      std::vector<TokenId> ids{out->next[0]};
      t0 = Clock::now();
      for (int step = 0; step < a.tokens; ++step) {
        StepPlan p;
        SequenceRows one;
        one.ids = {ids.back()};
        one.start_pos = a.prompt + step;
        one.blocks = blocks;
        p.seqs.push_back(one);
        auto o2 = r.execute(p);
        if (!o2.is_ok()) return 1;
        ids.push_back(o2->next[0]);
      }
      const double decode_s = seconds_since(t0);
      r.kv().release(blocks);
      use.sample();
      if (pass == 1) {
        res.ids = ids;
        res.prefill_tok_s = a.prompt / prefill_s;
        res.decode_tok_s = a.tokens / decode_s;
        if (r.layer_stream()) {
          const double per_step = static_cast<double>(r.layer_stream()->host_bytes());
          res.stream_gbps = per_step * a.tokens / decode_s / 1e9;
        }
      }
    }
    if (reference.empty()) reference = res.ids;
    const MemoryPlan& mp = r.memory_plan();
    std::printf("[%s] loaded in %.1f s; plan: %s\n", run.c_str(), load_s, mp.summary.c_str());
    std::printf("[%s] %d/%d layers resident; peak allocated %s; device used before %s, peak %s%s%s\n",
                run.c_str(), mp.resident_layers, d.num_layers,
                gib(r.backend().peak_allocated_bytes()).c_str(), gib(before).c_str(),
                gib(use.max_used).c_str(), cap ? (" (cap " + gib(cap) + ")").c_str() : "",
                cap && use.max_used > cap ? " OVER THE CAP" : "");
    std::printf(
        "[%s] prefill %.1f tok/s (%d rows), decode %.2f tok/s (batch 1, %d steps); ids %s the first run's\n",
        run.c_str(), res.prefill_tok_s, a.prompt, res.decode_tok_s, a.tokens,
        res.ids == reference ? "IDENTICAL to" : "DIFFER from");
    if (r.layer_stream()) {
      std::printf(
          "[%s] streaming %d layers, %.2f GB per step: %.1f GB/s host-to-device in decode = %.2f of the "
          "pinned copy (%.1f GB/s)\n",
          run.c_str(), r.layer_stream()->count(), static_cast<double>(r.layer_stream()->host_bytes()) / 1e9,
          res.stream_gbps, pinned > 0 ? res.stream_gbps / pinned : 0.0, pinned);
    }
    std::fflush(stdout);
  }
  return 0;
}
