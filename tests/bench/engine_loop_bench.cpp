// The EngineLoop's summed decode throughput against concurrency: N requests of S seconds of audio
// each, every one forced to generate T tokens (the scripted decoder, so no request stops early),
// submitted at once to one loop on one device with seeded random weights (no download). For each
// N: decode tok/s over the pure-decode steps (every running request's row in one step), the
// end-to-end generated tok/s (wall time from submit to the last done), mean rows per decode step,
// mean time to first token, and the decode rate relative to the first (smallest) N, which is what
// time-slicing one request at a time would give.
// Prints a table and, last, one JSON line.
//   engine_loop_bench [--preset tiny|7b] [--device cpu|cuda] [--concurrency 1,2,4,8] [--tokens 256]
//                     [--audio 30] [--bf16] [--deterministic] [--threads N] [--ttft-probe LONG_SECONDS]
//                     [--invariance N] [--pad P] [--logprobs] [--free] [--sample T] [--output-threads N]
// --logprobs: every request asks for its tokens' logprobs (as a verbose_json transcription does); with
// forced ids each output row's logits cross to the host for them, with --free (greedy, no forced ids,
// EOS ignored) the device gives them beside the ids. --sample T: no forced ids; tokens sampled at
// temperature T (EOS ignored) from host logits. --output-threads N:
// EngineLoopOptions::output_threads (the threads that pick those rows' tokens; 0 = the default).
// --pad P: RunnerOptions::decode_pad (decode steps padded to 1, 2, 4, 8, then multiples of P
// sequences; 0 = off; the default, -1, pads to multiples of 8 on CUDA only).
// --invariance N: N greedy requests (different audio, --tokens new tokens each, no forced ids, no
// repetition handling) run all at once and then each alone on the same loop; prints how many give
// byte-identical ids both ways (issue 13's equivalence, at whatever shape and device is chosen).
// With a CUDA device every point also prints how the decode steps' flushes ran (graph replays,
// captures, eager first sights) and, with VV_CUDA_PROFILE=1 (each op timed and followed by a sync,
// no graphs), the per-op time of a mean pure-decode step. Every point prints the host time before the
// device runs a step: staging the rows, recording the ops (on a CPU backend the ops run as they are
// recorded, so that is the step), and the replayed flushes.
// "full" columns: only the steps in which all N requests decoded (no prefill rows; none still
// encoding or prefilling): the cost of an N-row step. Requests start decoding one after another
// (each step runs one encoder launch, which packs the next segment of several requests up to
// EngineLoopOptions::encode_pack_samples, 40 s of audio by default), so the mixed "decode tok/s"
// averages 1..N-row steps and the encoder work recorded before them; with few forced tokens there
// may be no full step at all (then the full columns read 0: raise --tokens).
// The curve's requests turn repetition handling off: their forced ids repeat one token, which the
// loop detector (256-token window) would cut back and resample with logits downloaded every step.
// --ttft-probe: instead of the curve, issue 13's time-to-first-token check: a short request (--audio
// seconds, 16 tokens) alone, then arriving while one long request (LONG_SECONDS of audio, --tokens
// tokens) is (a) being encoded/prefilled, just after it, and (b) decoding; prints each TTFT and its
// ratio to the solo one (the target: within 2x).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/device_runner.h"
#include "engine/text/tokenizer.h"
#include "kernels/device/backend_factory.h"
#include "scheduler/engine_loop.h"
#include "tests/bench/engine_bench_util.h"
#include "tests/support/test_paths.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Args {
  std::string preset = "tiny";
  std::string device = "cpu";
  std::vector<int> concurrency{1, 2, 4, 8, 16};
  int tokens = 256;
  double audio_s = 30;
  bool bf16 = false;
  bool deterministic = false;  // BackendOptions::deterministic (batch-invariant GEMMs and attention)
  int threads = 0;
  double ttft_probe_long_s = 0;
  int invariance = 0;
  int pad = -1;  // RunnerOptions::decode_pad
  bool logprobs = false;
  bool free = false;    // greedy without forced ids
  double sample_t = 0;  // > 0: sampled requests (no forced ids)
  int output_threads = 0;
};

struct Point {
  int n = 0;
  double decode_tps = 0, e2e_tps = 0, rows_per_step = 0, ttft = 0, wall = 0;
  double full_tps = 0, full_ms = 0;  // steps with all n requests decoding
  long long generated = 0, full_steps = 0;
};

// The backend's per-op report (backend_profile_report) summed over the pure-decode steps: op →
// (ms, calls), and the flush counts (replayed, captured, first sight, eager, clears).
struct DecodeProfile {
  std::map<std::string, std::pair<double, long long>> ops;
  long long flushes[5] = {0, 0, 0, 0, 0};
  long long steps = 0, rows = 0;
  double execute_s = 0, interval_s = 0;  // summed execute() time; wall time between decode steps
  long long intervals = 0;
  // Host time before the device runs the step: staging the rows, recording the ops (StepReport), and
  // the replayed flushes (the backend's "flush host ms" line: the fusion pass, the graph lookup, the launch).
  double stage_s = 0, record_s = 0, replay_ms = 0;
  // The host between two steps (StepReport::gap_seconds and its parts), over the steps that have one.
  double gap_s = 0, gap_output_s = 0, gap_observer_s = 0, schedule_s = 0, plan_s = 0;
  long long gaps = 0;

  void add(const std::string& report) {
    std::istringstream in(report);
    for (std::string line; std::getline(in, line);) {
      char name[128];
      double ms = 0;
      long long calls = 0, f[5];
      if (std::sscanf(line.c_str(),
                      " flushes: %lld replayed, %lld captured, %lld first sight (eager), %lld eager "
                      "(size/graphs off), %lld",
                      &f[0], &f[1], &f[2], &f[3], &f[4]) == 5) {
        for (int i = 0; i < 5; ++i) flushes[i] += f[i];
      } else if (double c = 0, fs = 0, e = 0, r = 0;
                 std::sscanf(line.c_str(),
                             " flush host ms: captured %lf, first sight %lf, eager %lf, replayed %lf", &c,
                             &fs, &e, &r) == 4) {
        replay_ms += r;
      } else if (std::sscanf(line.c_str(), " %127s %lf ms %*f%% %lld calls", name, &ms, &calls) == 3) {
        auto& e = ops[name];
        e.first += ms;
        e.second += calls;
      }
    }
  }
  void print(int n, const char* what) const {
    if (steps == 0) return;
    std::printf(
        "  N = %d, %s: decode steps: %lld, %.2f rows each; execute %.3f ms/step, step-to-step %.3f ms\n", n,
        what, steps, static_cast<double>(rows) / static_cast<double>(steps),
        1e3 * execute_s / static_cast<double>(steps),
        intervals ? 1e3 * interval_s / static_cast<double>(intervals) : 0.0);
    if (flushes[0] + flushes[1] + flushes[2] + flushes[3] > 0)
      std::printf(
          "    flushes: %lld replayed, %lld captured, %lld first sight, %lld eager, %lld graph-cache "
          "clears\n",
          flushes[0], flushes[1], flushes[2], flushes[3], flushes[4]);
    if (stage_s + record_s > 0)
      std::printf(
          "    host before the device runs a step (ms/step): staging the rows %.3f, recording the ops %.3f, "
          "replayed flushes %.3f\n",
          1e3 * stage_s / static_cast<double>(steps), 1e3 * record_s / static_cast<double>(steps),
          replay_ms / static_cast<double>(steps));
    if (gaps > 0) {
      const double g = static_cast<double>(gaps);
      const double rest = gap_s - gap_output_s - gap_observer_s - schedule_s - plan_s;
      std::printf(
          "    host between execute() calls (ms/step): %.3f = the last step's outputs %.3f + observer %.3f "
          "+ scheduling %.3f + the plan %.3f + the loop's other work %.3f\n",
          1e3 * gap_s / g, 1e3 * gap_output_s / g, 1e3 * gap_observer_s / g, 1e3 * schedule_s / g,
          1e3 * plan_s / g, 1e3 * rest / g);
    }
    if (ops.empty()) return;
    std::vector<std::pair<std::string, std::pair<double, long long>>> rows_(ops.begin(), ops.end());
    std::sort(rows_.begin(), rows_.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double total = 0;
    for (const auto& r : rows_) total += r.second.first;
    const double st = static_cast<double>(steps);
    std::printf("    per-op time of a mean decode step (VV_CUDA_PROFILE=1, a sync after each op): %.3f ms\n",
                total / st);
    for (const auto& r : rows_) {
      std::printf("      %-26s %9.3f ms %5.1f%% %8.1f calls %9.2f us/call\n", r.first.c_str(),
                  r.second.first / st, 100 * r.second.first / std::max(total, 1e-9),
                  static_cast<double>(r.second.second) / st,
                  1e3 * r.second.first / std::max(1LL, r.second.second));
    }
  }
};

// The loops warm the encoder up on a GPU, as the service does there.
bool on_gpu(const Args& args) {
  return args.device.rfind("cuda", 0) == 0;
}

Point run_point(vv::Runner& runner, const vv::Tokenizer& tok, int n, const Args& args) {
  vv::EngineLoopOptions opt;
  opt.warmup = on_gpu(args);
  opt.max_running = n;
  opt.max_waiting = n;
  opt.output_threads = args.output_threads;
  std::mutex mu;
  std::condition_variable cv;
  double decode_seconds = 0;
  long long decode_rows = 0, decode_steps = 0;
  DecodeProfile prof, full;  // every pure-decode step; those with all n requests decoding
  bool last_was_decode = false;
  Clock::time_point last_step;
  opt.on_step = [&](const vv::StepReport& r) {
    // On the engine thread, after the step: the report covers exactly this step's ops.
    const std::string rep = vv::backend_profile_report(runner.backend());
    const auto now = Clock::now();
    const bool decode = r.prefill_rows == 0;
    std::lock_guard<std::mutex> lk(mu);
    if (decode) {
      DecodeProfile* sets[2] = {&prof, r.decode_rows == n && r.rows == n ? &full : nullptr};
      for (DecodeProfile* d : sets) {
        if (!d) continue;
        d->add(rep);
        ++d->steps;
        d->rows += r.decode_rows;
        d->execute_s += r.seconds;
        d->stage_s += r.stage_seconds;
        d->record_s += r.record_seconds;
        if (last_was_decode && r.gap_seconds > 0) {
          d->gap_s += r.gap_seconds;
          d->gap_output_s += r.gap_output_seconds;
          d->gap_observer_s += r.gap_observer_seconds;
          d->schedule_s += r.schedule_seconds;
          d->plan_s += r.plan_seconds;
          ++d->gaps;
        }
        if (last_was_decode) {
          d->interval_s += seconds_between(last_step, now);
          ++d->intervals;
        }
      }
    }
    last_was_decode = decode;
    last_step = now;
    if (!decode) return;
    decode_seconds += r.seconds;
    decode_rows += r.decode_rows;
    ++decode_steps;
  };
  auto loop = vv::EngineLoop::create(runner, tok, opt);
  if (!loop.is_ok()) {
    std::fprintf(stderr, "engine loop: %s\n", loop.status().to_string().c_str());
    std::exit(1);
  }
  while (!(*loop)->load().ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int hop = runner.spec().acoustic.hop();
  std::vector<vv::Request> reqs;
  for (int i = 0; i < n; ++i) {
    vv::Request r;
    r.audio.push_back(vv::bench::noise(args.audio_s, static_cast<std::uint64_t>(i + 1), hop));
    r.sampling.max_new_tokens = args.tokens;
    if (args.sample_t > 0 || args.free) {
      r.sampling.temperature = static_cast<float>(std::max(args.sample_t, 0.0));
      r.sampling.ignore_eos = true;
      r.sampling.seed = static_cast<std::uint64_t>(i + 1);
    } else {
      r.forced_ids.assign(static_cast<std::size_t>(args.tokens), 1000 + i);
    }
    r.sampling.logprobs = args.logprobs;
    r.repetition_detection = false;  // see the top of the file
    reqs.push_back(std::move(r));
  }
  int left = n;
  double ttft_sum = 0;
  long long generated = 0;
  const auto t0 = Clock::now();
  for (auto& r : reqs) {
    r.arrival = Clock::now();
    auto id = (*loop)->submit(std::move(r), [&](vv::RequestEvent&& e) {
      if (!e.terminal()) return;
      std::lock_guard<std::mutex> lk(mu);
      if (e.type == vv::RequestEvent::Type::kError) {
        std::fprintf(stderr, "request failed: %s\n", e.error.to_string().c_str());
        std::exit(1);
      }
      ttft_sum += e.timings.time_to_first_token;
      generated += e.usage.output_tokens;
      --left;
      cv.notify_all();
    });
    if (!id.is_ok()) {
      std::fprintf(stderr, "submit: %s\n", id.status().to_string().c_str());
      std::exit(1);
    }
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return left == 0; });
  Point p;
  p.n = n;
  p.wall = seconds_between(t0, Clock::now());
  p.generated = generated;
  p.decode_tps = decode_seconds > 0 ? static_cast<double>(decode_rows) / decode_seconds : 0;
  p.e2e_tps = static_cast<double>(generated) / p.wall;
  p.rows_per_step =
      decode_steps > 0 ? static_cast<double>(decode_rows) / static_cast<double>(decode_steps) : 0;
  p.ttft = ttft_sum / n;
  p.full_steps = full.steps;
  p.full_ms = full.steps ? 1e3 * full.execute_s / static_cast<double>(full.steps) : 0;
  p.full_tps = full.execute_s > 0 ? static_cast<double>(full.rows) / full.execute_s : 0;
  lk.unlock();
  (*loop)->shutdown();
  prof.print(n, "all pure-decode steps");
  full.print(n, "full steps");
  return p;
}

// Submits `r` and returns a future-like handle: wait() gives its time to first token (s).
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  double ttft = 0;
  vv::RequestTimings timings;
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
  }
};

void submit(vv::EngineLoop& loop, vv::Request r, Pending& p) {
  r.arrival = Clock::now();
  auto id = loop.submit(std::move(r), [&p](vv::RequestEvent&& e) {
    if (!e.terminal()) return;
    if (e.type == vv::RequestEvent::Type::kError) {
      std::fprintf(stderr, "request failed: %s\n", e.error.to_string().c_str());
      std::exit(1);
    }
    std::lock_guard<std::mutex> lk(p.mu);
    p.ttft = e.timings.time_to_first_token;
    p.timings = e.timings;
    p.done = true;
    p.cv.notify_all();
  });
  if (!id.is_ok()) {
    std::fprintf(stderr, "submit: %s\n", id.status().to_string().c_str());
    std::exit(1);
  }
}

int run_ttft_probe(vv::Runner& runner, const vv::Tokenizer& tok, const Args& args) {
  std::atomic<long> decode_steps{0};
  // The engine thread's timeline (steps and encoder launches, stamped at their end), printed per
  // scenario up to the short request's first token: what the short one waited for.
  struct Mark {
    Clock::time_point at;
    bool encode;
    std::int64_t rows, prefill_rows, segments, samples, finishing;
    double seconds, start_seconds;
  };
  std::mutex marks_mu;
  std::vector<Mark> marks;
  vv::EngineLoopOptions opt;
  opt.warmup = on_gpu(args);
  opt.max_running = 4;
  opt.max_waiting = 4;
  opt.on_step = [&](const vv::StepReport& r) {
    if (r.prefill_rows == 0 && r.decode_rows > 0) ++decode_steps;
    std::lock_guard<std::mutex> lk(marks_mu);
    marks.push_back({Clock::now(), false, r.rows, r.prefill_rows, 0, 0, 0, r.seconds, 0});
  };
  opt.on_encode = [&](const vv::EncodeReport& r) {
    std::lock_guard<std::mutex> lk(marks_mu);
    marks.push_back(
        {Clock::now(), true, 0, 0, r.segments, r.samples, r.finishing, r.seconds, r.start_seconds});
  };
  auto loop = vv::EngineLoop::create(runner, tok, opt);
  if (!loop.is_ok()) {
    std::fprintf(stderr, "engine loop: %s\n", loop.status().to_string().c_str());
    return 1;
  }
  while (!(*loop)->load().ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int hop = runner.spec().acoustic.hop();
  const int short_tokens = 16;
  // Solo: the median of three (the first also warms up).
  std::vector<double> solo;
  for (int i = 0; i < 4; ++i) {
    Pending p;
    submit(**loop, vv::bench::forced_request(args.audio_s, short_tokens, 100 + i, hop), p);
    p.wait();
    if (i > 0) solo.push_back(p.ttft);
  }
  std::sort(solo.begin(), solo.end());
  const double solo_ttft = solo[solo.size() / 2];
  std::printf("ttft probe: short = %g s audio, %d tokens; long = %g s audio, %d tokens\n", args.audio_s,
              short_tokens, args.ttft_probe_long_s, args.tokens);
  std::printf("  short alone:                       TTFT %.4f s (median of 3)\n", solo_ttft);
  // New GEMM shapes cost cuBLASLt heuristic queries on the engine thread; the report (read while the
  // loop is idle) says how many each scenario made and their host time.
  (void)vv::backend_profile_report(runner.backend());
  auto wait_idle = [&] {
    while ((*loop)->load().running + (*loop)->load().waiting > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  auto plans_line = [&] {
    const std::string rep = vv::backend_profile_report(runner.backend());
    std::string out;
    for (const char* key : {"flushes:", "flush host ms:", "cublaslt plans:"}) {
      const auto at = rep.find(key);
      if (at != std::string::npos) out += (out.empty() ? "" : "; ") + rep.substr(at, rep.find('\n', at) - at);
    }
    return out.empty() ? std::string("no graph flushes, no new cuBLASLt plans") : out;
  };
  double worst = 0;
  for (const char* when : {"during the long one's encode/prefill", "during the long one's decode"}) {
    const bool wait_decode = std::string(when).find("decode") != std::string::npos;
    // Start from an idle engine (the last scenario's steps all reported), so that every pure decode
    // step counted from here on is the long request's.
    wait_idle();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const long base = decode_steps.load();
    Pending lp, sp;
    {
      std::lock_guard<std::mutex> lk(marks_mu);
      marks.clear();
    }
    vv::Request long_request = vv::bench::forced_request(args.ttft_probe_long_s, args.tokens, 7, hop);
    const auto t_long = Clock::now();  // after its audio is made: the timeline starts at the submit
    submit(**loop, std::move(long_request), lp);
    if (wait_decode) {
      while (decode_steps.load() < base + 2) std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto t_short = Clock::now();
    submit(**loop, vv::bench::forced_request(args.audio_s, short_tokens, 200, hop), sp);
    sp.wait();
    lp.wait();
    {
      // From the last event before the short one arrived to its first token (times in ms from the
      // long one's submission; a step or launch is stamped at its end).
      auto ms = [&](Clock::time_point t) {
        return std::chrono::duration<double, std::milli>(t - t_long).count();
      };
      const double first_token = ms(t_short) + sp.ttft * 1e3;
      std::lock_guard<std::mutex> lk(marks_mu);
      std::size_t from = 0;
      for (std::size_t i = 0; i < marks.size(); ++i) {
        if (marks[i].at < t_short) from = i;
      }
      std::printf(
          "    timeline (ms from the long one's submission; short arrives at %.2f, first token at %.2f):\n",
          ms(t_short), first_token);
      int shown = 0;
      for (std::size_t i = from; i < marks.size() && shown < 24; ++i) {
        const Mark& m = marks[i];
        ++shown;
        // Up to the step that gave the short one its first token (stamped just after it).
        if (!m.encode && ms(m.at) >= first_token) i = marks.size();
        if (m.encode) {
          std::printf(
              "      %8.2f  encode  %lld segment(s), %.2f s audio, %lld completed: %.2f ms (job start %.2f "
              "ms)\n",
              ms(m.at), static_cast<long long>(m.segments),
              static_cast<double>(m.samples) / runner.spec().sample_rate, static_cast<long long>(m.finishing),
              m.seconds * 1e3, m.start_seconds * 1e3);
        } else {
          std::printf("      %8.2f  step    %lld rows (%lld prefill): %.2f ms\n", ms(m.at),
                      static_cast<long long>(m.rows), static_cast<long long>(m.prefill_rows),
                      m.seconds * 1e3);
        }
      }
    }
    worst = std::max(worst, sp.ttft / solo_ttft);
    std::printf(
        "  short arriving %-36s TTFT %.4f s = %.2fx alone (queued %.4f, encode %.4f, prefill %.4f s; long: "
        "TTFT %.3f s)\n",
        when, sp.ttft, sp.ttft / solo_ttft, sp.timings.queue_seconds, sp.timings.encode_seconds,
        sp.timings.prefill_seconds, lp.ttft);
    wait_idle();
    std::printf("    (this scenario: %s)\n", plans_line().c_str());
  }
  std::printf("{\"bench\":\"ttft_probe\",\"device\":\"%s\",\"solo_ttft_s\":%.4f,\"worst_ratio\":%.3f}\n",
              args.device.c_str(), solo_ttft, worst);
  (*loop)->shutdown();
  return 0;
}

// Logits of one request, position by position (teacher-forced runs of --invariance).
using LogitsByPosition = std::map<std::size_t, std::vector<float>>;

// The golden README's bf16 comparison of two logits rows: cosine, max|a−b| / max|ref|, top-5 overlap.
struct LogitsAgreement {
  double worst_cosine = 1, worst_rel_max = 0;
  int worst_top5 = 5, positions = 0, argmax_equal = 0;
  void add(const std::vector<float>& ref, const std::vector<float>& got) {
    double dot = 0, nr = 0, ng = 0, maxref = 0, maxdiff = 0;
    for (std::size_t v = 0; v < ref.size() && v < got.size(); ++v) {
      dot += static_cast<double>(ref[v]) * got[v];
      nr += static_cast<double>(ref[v]) * ref[v];
      ng += static_cast<double>(got[v]) * got[v];
      maxref = std::max(maxref, std::fabs(static_cast<double>(ref[v])));
      maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(ref[v]) - got[v]));
    }
    auto top5 = [](const std::vector<float>& x) {
      std::vector<std::size_t> idx(x.size());
      for (std::size_t v = 0; v < idx.size(); ++v) idx[v] = v;
      std::partial_sort(idx.begin(), idx.begin() + std::min<std::size_t>(5, idx.size()), idx.end(),
                        [&](std::size_t a, std::size_t b) { return x[a] > x[b]; });
      idx.resize(std::min<std::size_t>(5, idx.size()));
      return idx;
    };
    const auto tr = top5(ref), tg = top5(got);
    int overlap = 0;
    for (std::size_t a : tr) overlap += std::count(tg.begin(), tg.end(), a) > 0 ? 1 : 0;
    worst_cosine = std::min(worst_cosine, dot / std::max(std::sqrt(nr * ng), 1e-30));
    worst_rel_max = std::max(worst_rel_max, maxdiff / std::max(maxref, 1e-30));
    worst_top5 = std::min(worst_top5, overlap);
    argmax_equal += !tr.empty() && !tg.empty() && tr[0] == tg[0] ? 1 : 0;
    ++positions;
  }
  bool within_bf16() const { return worst_cosine >= 0.999 && worst_rel_max <= 0.1; }
};

int run_invariance(vv::Runner& runner, const vv::Tokenizer& tok, const Args& args) {
  const int n = args.invariance;
  vv::EngineLoopOptions opt;
  opt.warmup = on_gpu(args);
  opt.max_running = n;
  opt.max_waiting = n;
  // Teacher-forced runs (below): every forced position's logits, by request id.
  std::mutex logits_mu;
  std::map<vv::RequestId, LogitsByPosition> logits;
  opt.on_logits = [&](vv::RequestId id, std::size_t pos, std::span<const float> row) {
    std::lock_guard<std::mutex> lk(logits_mu);
    logits[id][pos].assign(row.begin(), row.end());
  };
  auto loop = vv::EngineLoop::create(runner, tok, opt);
  if (!loop.is_ok()) {
    std::fprintf(stderr, "engine loop: %s\n", loop.status().to_string().c_str());
    return 1;
  }
  while (!(*loop)->load().ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int hop = runner.spec().acoustic.hop();
  auto request = [&](int i) {
    vv::Request r;
    // Different lengths too, so that rows sit at different positions in every step.
    r.audio.push_back(
        vv::bench::noise(args.audio_s * (0.5 + 0.5 * (i % 4) / 3.0), static_cast<std::uint64_t>(i + 1), hop));
    r.sampling.max_new_tokens = args.tokens;
    r.sampling.ignore_eos = true;
    r.repetition_detection = false;
    return r;
  };
  struct Out {
    std::mutex mu;
    std::condition_variable cv;
    int left = 0;
    std::vector<std::vector<vv::TokenId>> ids;
    std::vector<vv::RequestId> rid;
  } out;
  // forced: each request's ids forced to forced[i] (teacher forcing), its logits captured.
  auto run = [&](const std::vector<int>& which,
                 const std::vector<std::vector<vv::TokenId>>* forced = nullptr) {
    {
      std::lock_guard<std::mutex> lk(out.mu);
      out.left = static_cast<int>(which.size());
    }
    for (int i : which) {
      vv::Request r = request(i);
      if (forced) r.forced_ids = (*forced)[static_cast<std::size_t>(i)];
      r.arrival = Clock::now();
      auto id = (*loop)->submit(std::move(r), [&out, i](vv::RequestEvent&& e) {
        if (!e.terminal()) return;
        if (e.type == vv::RequestEvent::Type::kError) {
          std::fprintf(stderr, "request failed: %s\n", e.error.to_string().c_str());
          std::exit(1);
        }
        std::lock_guard<std::mutex> lk(out.mu);
        out.ids[static_cast<std::size_t>(i)] = e.generated_ids;
        --out.left;
        out.cv.notify_all();
      });
      if (!id.is_ok()) {
        std::fprintf(stderr, "submit: %s\n", id.status().to_string().c_str());
        std::exit(1);
      }
      std::lock_guard<std::mutex> lk(out.mu);
      out.rid[static_cast<std::size_t>(i)] = *id;
    }
    std::unique_lock<std::mutex> lk(out.mu);
    out.cv.wait(lk, [&] { return out.left == 0; });
  };
  // The captured logits of request i's last run (moved out).
  auto take_logits = [&](int i) {
    std::lock_guard<std::mutex> lk(logits_mu);
    auto it = logits.find(out.rid[static_cast<std::size_t>(i)]);
    LogitsByPosition l;
    if (it != logits.end()) {
      l = std::move(it->second);
      logits.erase(it);
    }
    return l;
  };
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  out.ids.assign(static_cast<std::size_t>(n), {});
  out.rid.assign(static_cast<std::size_t>(n), 0);
  run(all);
  const auto together = out.ids;
  std::vector<std::vector<vv::TokenId>> alone(static_cast<std::size_t>(n));
  int same = 0;
  for (int i = 0; i < n; ++i) {
    run({i});
    const auto& a = together[static_cast<std::size_t>(i)];
    const auto& b = out.ids[static_cast<std::size_t>(i)];
    alone[static_cast<std::size_t>(i)] = b;
    std::size_t agree = 0;
    while (agree < a.size() && agree < b.size() && a[agree] == b[agree]) ++agree;
    same += a == b ? 1 : 0;
    std::printf("  request %2d: %zu ids together, %zu alone, %s (first difference at %zu)\n", i, a.size(),
                b.size(), a == b ? "identical" : "DIFFERENT", agree);
  }
  // Teacher-forced: every request forced to its solo ids, together and then alone, so that both
  // runs see the same tokens; each position's logits compared as the golden README compares bf16
  // logits (cosine >= 0.999, max|a-b| <= 0.1 max|ref|, top-5 overlap; equal ids not required).
  run(all, &alone);
  std::vector<LogitsByPosition> forced_together(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) forced_together[static_cast<std::size_t>(i)] = take_logits(i);
  LogitsAgreement overall;
  int bitwise = 0;
  for (int i = 0; i < n; ++i) {
    run({i}, &alone);
    const LogitsByPosition solo = take_logits(i);
    const LogitsByPosition& batched = forced_together[static_cast<std::size_t>(i)];
    LogitsAgreement one;
    bool equal = !solo.empty() && solo.size() == batched.size();
    for (const auto& [pos, ref] : solo) {
      auto it = batched.find(pos);
      if (it == batched.end()) {
        equal = false;
        continue;
      }
      one.add(ref, it->second);
      overall.add(ref, it->second);
      equal = equal && ref == it->second;
    }
    bitwise += equal ? 1 : 0;
    std::printf(
        "  request %2d teacher-forced: %d positions, logits %s; worst cosine %.6f, max|a-b|/max|ref| %.2e, "
        "top-5 overlap >= %d, argmax equal %d/%d\n",
        i, one.positions, equal ? "bitwise equal" : "differ", one.worst_cosine, one.worst_rel_max,
        one.worst_top5, one.argmax_equal, one.positions);
  }
  std::printf(
      "  teacher-forced logits, together vs alone: %s bf16 tolerance (worst cosine %.6f, max|a-b|/max|ref| "
      "%.2e, top-5 overlap >= %d of 5); %d of %d requests bitwise equal\n",
      overall.within_bf16() ? "within" : "OUTSIDE", overall.worst_cosine, overall.worst_rel_max,
      overall.worst_top5, bitwise, n);
  std::printf(
      "{\"bench\":\"invariance\",\"device\":\"%s\",\"requests\":%d,\"identical\":%d,"
      "\"forced_logits_bitwise\":%d,\"forced_worst_cosine\":%.6f,\"forced_worst_rel_max\":%.3e,"
      "\"forced_worst_top5\":%d,\"forced_within_bf16\":%s}\n",
      args.device.c_str(), n, same, bitwise, overall.worst_cosine, overall.worst_rel_max, overall.worst_top5,
      overall.within_bf16() ? "true" : "false");
  (*loop)->shutdown();
  return same == n ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--preset")
      args.preset = next();
    else if (a == "--device")
      args.device = next();
    else if (a == "--tokens")
      args.tokens = std::stoi(next());
    else if (a == "--audio")
      args.audio_s = std::stod(next());
    else if (a == "--bf16")
      args.bf16 = true;
    else if (a == "--deterministic")
      args.deterministic = true;
    else if (a == "--threads")
      args.threads = std::stoi(next());
    else if (a == "--invariance")
      args.invariance = std::stoi(next());
    else if (a == "--pad")
      args.pad = std::stoi(next());
    else if (a == "--logprobs")
      args.logprobs = true;
    else if (a == "--free")
      args.free = true;
    else if (a == "--sample")
      args.sample_t = std::stod(next());
    else if (a == "--output-threads")
      args.output_threads = std::stoi(next());
    else if (a == "--ttft-probe")
      args.ttft_probe_long_s = std::stod(next());
    else if (a == "--concurrency") {
      args.concurrency.clear();
      std::stringstream ss(next());
      for (std::string x; std::getline(ss, x, ',');) args.concurrency.push_back(std::stoi(x));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const vv::bench::RandomModel model = vv::bench::random_model(args.preset, args.bf16);
  const vv::ModelSpec& spec = model.spec;
  const int max_n =
      std::max(args.invariance, *std::max_element(args.concurrency.begin(), args.concurrency.end()));
  vv::RunnerOptions ro;
  const std::int64_t frames = static_cast<std::int64_t>(args.audio_s * 24000 / spec.acoustic.hop()) + 1;
  ro.kv_positions = static_cast<std::int64_t>(max_n) * (frames + 128 + args.tokens);
  if (args.ttft_probe_long_s > 0) {
    const auto long_frames =
        static_cast<std::int64_t>(args.ttft_probe_long_s * 24000 / spec.acoustic.hop()) + 1;
    ro.kv_positions = long_frames + 128 + args.tokens + 2 * (frames + 128 + 16);
  }
  ro.max_seqs = std::max(64, max_n);
  ro.max_rows = std::max(512, max_n);
  if (args.bf16) ro.kv_dtype = vv::DType::kBF16;
  ro.decode_pad = args.pad;
  vv::BackendOptions bo;
  bo.cpu_threads = args.threads;
  bo.gpu_bf16_gemm = args.bf16;
  bo.deterministic = args.deterministic;
  auto runner = vv::make_runner(*model.ckpt, ro, args.device, bo);
  if (!runner.is_ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  if (args.ttft_probe_long_s > 0) return run_ttft_probe(**runner, *model.tok, args);
  if (args.invariance > 0) return run_invariance(**runner, *model.tok, args);
  const std::string pad = (*runner)->decode_pad() > 0 ? "padded to 1, 2, 4, 8, then multiples of " +
                                                            std::to_string((*runner)->decode_pad())
                                                      : std::string("not padded");
  std::printf(
      "engine_loop_bench: preset %s on %s, %g s of audio and %d forced tokens per request; decode steps %s\n",
      args.preset.c_str(), (*runner)->backend().name().c_str(), args.audio_s, args.tokens, pad.c_str());
  std::printf("%6s %14s %12s %10s %10s %9s %10s %12s %11s %10s\n", "N", "decode tok/s", "e2e tok/s",
              "rows/step", "TTFT s", "wall s", "x first N", "full tok/s", "full steps", "full ms");
  std::vector<Point> pts;
  for (int n : args.concurrency) {
    Point p = run_point(**runner, *model.tok, n, args);
    const double first = pts.empty() ? p.decode_tps : pts.front().decode_tps;
    std::printf("%6d %14.1f %12.1f %10.2f %10.3f %9.2f %10.2f %12.1f %11lld %10.3f\n", p.n, p.decode_tps,
                p.e2e_tps, p.rows_per_step, p.ttft, p.wall, first > 0 ? p.decode_tps / first : 0.0,
                p.full_tps, p.full_steps, p.full_ms);
    std::fflush(stdout);
    pts.push_back(p);
  }
  std::printf(
      "{\"bench\":\"engine_loop\",\"preset\":\"%s\",\"device\":\"%s\",\"tokens\":%d,\"audio_s\":%g,"
      "\"points\":[",
      args.preset.c_str(), args.device.c_str(), args.tokens, args.audio_s);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    std::printf(
        "%s{\"n\":%d,\"decode_tps\":%.1f,\"e2e_tps\":%.1f,\"rows_per_step\":%.2f,\"ttft_s\":%.4f,\"full_"
        "tps\":%.1f,"
        "\"full_steps\":%lld}",
        i ? "," : "", pts[i].n, pts[i].decode_tps, pts[i].e2e_tps, pts[i].rows_per_step, pts[i].ttft,
        pts[i].full_tps, pts[i].full_steps);
  }
  std::printf("]}\n");
  return 0;
}
