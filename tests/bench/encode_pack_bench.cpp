// The encoder packer (issue 13) against one segment per launch: N requests of S seconds of audio,
// each forced to T tokens (the scripted decoder), submitted at once to one EngineLoop with seeded
// random weights, once per samples budget (EngineLoopOptions::encode_pack_samples; 0 = unpacked).
// For each (N, budget): encoder launches and segments, when the last request finished encoding,
// mean and max time to first token, wall time to the last done, and the decode tok/s end to end.
// Prints a table and, last, one JSON line.
//   encode_pack_bench [--preset tiny|7b] [--device cpu|cuda] [--bf16] [--concurrency 1,16,64]
//                     [--pack 0,960000] [--audio 30] [--tokens 32] [--segment 240000] [--threads N]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
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
double since(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

std::vector<std::int64_t> parse_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::stoll(x));
  return out;
}

struct Args {
  std::string preset = "tiny", device = "cpu";
  std::vector<std::int64_t> concurrency{1, 8, 16}, pack{0, 4 * 240000};
  double audio_s = 30;
  int tokens = 32;
  std::int64_t segment = 240000;
  bool bf16 = false;
  int threads = 0;
};

struct Point {
  std::int64_t n = 0, pack = 0;
  vv::EncodeStats enc;
  double encoded_s = 0, ttft_mean = 0, ttft_max = 0, wall = 0, e2e_tps = 0;
};

Point run_point(vv::Runner& runner, const vv::Tokenizer& tok, std::int64_t n, std::int64_t pack,
                const Args& args) {
  std::mutex mu;
  std::condition_variable cv;
  Point p;
  p.n = n;
  p.pack = pack;
  std::int64_t left = n, generated = 0;
  double ttft_sum = 0;
  Clock::time_point t0;
  vv::EngineLoopOptions opt;
  opt.max_running = static_cast<int>(n);
  opt.max_waiting = static_cast<int>(n);
  opt.encode_segment = args.segment;
  opt.encode_pack_samples = pack;
  opt.progress = [&](const vv::TranscriptionProgress& pr) {
    if (pr.phase != vv::TranscriptionProgress::Phase::kEncoding || pr.done < pr.total) return;
    std::lock_guard<std::mutex> lk(mu);
    p.encoded_s = std::max(p.encoded_s, since(t0));
  };
  auto loop = vv::EngineLoop::create(runner, tok, opt);
  if (!loop.is_ok()) {
    std::fprintf(stderr, "engine loop: %s\n", loop.status().to_string().c_str());
    std::exit(1);
  }
  while (!(*loop)->load().ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int hop = runner.spec().acoustic.hop();
  std::vector<vv::Request> reqs;
  for (std::int64_t i = 0; i < n; ++i) {
    reqs.push_back(
        vv::bench::forced_request(args.audio_s, args.tokens, static_cast<std::uint64_t>(i + 1), hop));
  }
  (*loop)->pause();  // every request is admitted in the same step
  {
    std::lock_guard<std::mutex> lk(mu);
    t0 = Clock::now();
  }
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
      p.ttft_max = std::max(p.ttft_max, e.timings.time_to_first_token);
      generated += e.usage.output_tokens;
      --left;
      cv.notify_all();
    });
    if (!id.is_ok()) {
      std::fprintf(stderr, "submit: %s\n", id.status().to_string().c_str());
      std::exit(1);
    }
  }
  (*loop)->resume();
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return left == 0; });
  p.wall = since(t0);
  p.ttft_mean = ttft_sum / static_cast<double>(n);
  p.e2e_tps = static_cast<double>(generated) / p.wall;
  lk.unlock();
  p.enc = (*loop)->encode_stats();
  (*loop)->shutdown();
  return p;
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
    else if (a == "--bf16")
      args.bf16 = true;
    else if (a == "--concurrency")
      args.concurrency = parse_list(next());
    else if (a == "--pack")
      args.pack = parse_list(next());
    else if (a == "--audio")
      args.audio_s = std::stod(next());
    else if (a == "--tokens")
      args.tokens = std::stoi(next());
    else if (a == "--segment")
      args.segment = std::stoll(next());
    else if (a == "--threads")
      args.threads = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const vv::bench::RandomModel model = vv::bench::random_model(args.preset, args.bf16);
  const vv::ModelSpec& spec = model.spec;
  const std::int64_t max_n = *std::max_element(args.concurrency.begin(), args.concurrency.end());
  const std::int64_t max_pack = *std::max_element(args.pack.begin(), args.pack.end());
  vv::RunnerOptions ro;
  const std::int64_t frames = static_cast<std::int64_t>(args.audio_s * 24000 / spec.acoustic.hop()) + 1;
  ro.kv_positions = max_n * (frames + 128 + args.tokens);
  ro.max_seqs = static_cast<int>(std::max<std::int64_t>(64, max_n));
  ro.max_rows = static_cast<int>(std::max<std::int64_t>(512, max_n));
  ro.encoder_pack_samples = max_pack;  // never below the segment workspace (60 s by default)
  if (args.bf16) ro.kv_dtype = vv::DType::kBF16;
  vv::BackendOptions bo;
  bo.cpu_threads = args.threads;
  bo.gpu_bf16_gemm = args.bf16;
  auto runner = vv::make_runner(*model.ckpt, ro, args.device, bo);
  if (!runner.is_ok()) {
    std::fprintf(stderr, "runner: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  std::printf(
      "encode_pack_bench: preset %s on %s, %g s of audio, %d forced tokens, segments of %lld samples\n",
      args.preset.c_str(), (*runner)->backend().name().c_str(), args.audio_s, args.tokens,
      static_cast<long long>(args.segment));
  std::printf("%6s %9s %9s %9s %8s %11s %11s %10s %10s %9s %10s\n", "N", "pack", "launches", "segments",
              "max/l", "encode s", "encoded at", "TTFT mean", "TTFT max", "wall s", "e2e tok/s");
  std::vector<Point> pts;
  for (std::int64_t n : args.concurrency) {
    for (std::int64_t pack : args.pack) {
      const Point p = run_point(**runner, *model.tok, n, pack, args);
      std::printf("%6lld %9lld %9lld %9lld %8lld %11.3f %11.3f %10.3f %10.3f %9.2f %10.1f\n",
                  static_cast<long long>(p.n), static_cast<long long>(p.pack),
                  static_cast<long long>(p.enc.launches), static_cast<long long>(p.enc.segments),
                  static_cast<long long>(p.enc.most_segments), p.enc.seconds, p.encoded_s, p.ttft_mean,
                  p.ttft_max, p.wall, p.e2e_tps);
      std::fflush(stdout);
      pts.push_back(p);
    }
  }
  std::printf(
      "{\"bench\":\"encode_pack\",\"preset\":\"%s\",\"device\":\"%s\",\"audio_s\":%g,\"tokens\":%d,"
      "\"points\":[",
      args.preset.c_str(), args.device.c_str(), args.audio_s, args.tokens);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const Point& p = pts[i];
    std::printf(
        "%s{\"n\":%lld,\"pack\":%lld,\"launches\":%lld,\"segments\":%lld,\"encoded_s\":%.4f,\"ttft_mean_s\":%"
        ".4f,"
        "\"ttft_max_s\":%.4f,\"wall_s\":%.3f,\"e2e_tps\":%.1f}",
        i ? "," : "", static_cast<long long>(p.n), static_cast<long long>(p.pack),
        static_cast<long long>(p.enc.launches), static_cast<long long>(p.enc.segments), p.encoded_s,
        p.ttft_mean, p.ttft_max, p.wall, p.e2e_tps);
  }
  std::printf("]}\n");
  return 0;
}
