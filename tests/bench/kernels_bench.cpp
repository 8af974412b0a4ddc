// CPU kernel benchmarks at the 7B shape (hidden 3584, intermediate 18944, vocab 152064, bf16
// weights), each compared against the roofline bounds measured on this machine in the same run:
// decode GEMV (M=1) at every decoder shape (q/o 3584×3584, k/v 512×3584, gate+up 37888×3584, down
// 3584×18944, lm_head 152064×3584) against the memory bandwidth (target ≥ 70%), prefill GEMM (M=512)
// against the FMA peak (target ≥ 50%). The memory bound is the higher of a STREAM triad and a
// read-only stream (decode only reads), both best of several passes. Prints the bounds first; never
// fails. Threads: $VIBEVOICE_THREADS, else physical cores.
// Each GEMV cycles through enough copies of its weights (≥ 512 MiB) that none is still in the LLC
// from the previous call, as in a decode step.
// GB/s, GFLOP/s and the x_* ratios are per CPU-second of the threads used (process CPU time /
// threads), like the bounds, so they hold on a machine shared with other work; wall_GB/s and
// wall_GFLOP/s are plain wall-clock rates, and cpu_share says how much of the cores we got.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace {

double g_triad_gbps = 0;
double g_read_gbps = 0;
double g_bw_bound = 0;  // max(triad, read)
double g_fma_gflops = 0;
int g_threads = 1;

double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

vv::Backend& backend() {
  static std::unique_ptr<vv::Backend> be = vv::make_cpu_backend();
  return *be;
}

struct Operands {
  vv::Buffer a, out;
  std::vector<vv::Buffer> w;  // copies of the same weights, used in turn
  int64_t M, N, K;
};

Operands make_operands(int64_t M, int64_t N, int64_t K) {
  vv::Backend& be = backend();
  const int64_t w_bytes = N * K * 2;
  const int64_t copies = M == 1 ? std::max<int64_t>(1, ((int64_t{512} << 20) + w_bytes - 1) / w_bytes) : 1;
  Operands o{be.allocate(M * K * 4), be.allocate(M * N * 4), {}, M, N, K};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  float* a = static_cast<float*>(o.a.data());
  for (int64_t i = 0; i < M * K; ++i) a[i] = d(rng);
  for (int64_t c = 0; c < copies; ++c) {
    o.w.push_back(be.allocate(w_bytes));
    uint16_t* w = static_cast<uint16_t*>(o.w.back().data());
    if (c == 0) {
      for (int64_t i = 0; i < N * K; ++i) w[i] = vv::f32_to_bf16(d(rng) * 0.02f);
    } else {
      std::memcpy(w, o.w[0].data(), w_bytes);
    }
  }
  return o;
}

void run(benchmark::State& state, int64_t M, int64_t N, int64_t K) {
  Operands o = make_operands(M, N, K);
  vv::Backend& be = backend();
  vv::Tensor a = o.a.matrix(vv::DType::kF32, M, K);
  vv::Tensor out = o.out.matrix(vv::DType::kF32, M, N);
  std::vector<vv::Tensor> w;
  for (auto& b : o.w) w.push_back(b.matrix(vv::DType::kBF16, N, K));
  be.gemm(a, w[0], nullptr, out, vv::Epilogue::kNone);  // warm
  size_t next = 1 % w.size();
  const double cpu0 = process_cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    be.gemm(a, w[next], nullptr, out, vv::Epilogue::kNone);
    next = (next + 1) % w.size();
    benchmark::DoNotOptimize(o.out.data());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  const double cpu = (process_cpu_seconds() - cpu0) / g_threads;  // per-thread CPU seconds
  const double iters = static_cast<double>(state.iterations());
  const double bytes = (double(N) * K * 2 + double(M) * K * 4 + double(M) * N * 4) * iters;
  const double flops = 2.0 * M * N * K * iters;
  state.counters["cpu_share"] = cpu / wall;
  state.counters["wall_GB/s"] = bytes / wall * 1e-9;
  state.counters["wall_GFLOP/s"] = flops / wall * 1e-9;
  state.counters["GB/s"] = bytes / cpu * 1e-9;
  state.counters["GFLOP/s"] = flops / cpu * 1e-9;
  state.counters["x_triad"] = bytes / cpu * 1e-9 / g_triad_gbps;
  state.counters["x_read"] = bytes / cpu * 1e-9 / g_read_gbps;
  state.counters["x_bw_bound"] = bytes / cpu * 1e-9 / g_bw_bound;
  state.counters["x_fma_peak"] = flops / cpu * 1e-9 / g_fma_gflops;
  state.SetLabel(be.name());
}

// Decode, one sequence: every GEMV of a 7B decoder layer and the lm_head.
void BM_DecodeGemv_QO_3584x3584(benchmark::State& s) { run(s, 1, 3584, 3584); }
void BM_DecodeGemv_KV_512x3584(benchmark::State& s) { run(s, 1, 512, 3584); }
void BM_DecodeGemv_GateUp_37888x3584(benchmark::State& s) { run(s, 1, 37888, 3584); }
void BM_DecodeGemv_Down_3584x18944(benchmark::State& s) { run(s, 1, 3584, 18944); }
void BM_DecodeGemv_LmHead_152064x3584(benchmark::State& s) { run(s, 1, 152064, 3584); }
void BM_DecodeGemv_Batch4_18944x3584(benchmark::State& s) { run(s, 4, 18944, 3584); }
void BM_PrefillGemm_M512_18944x3584(benchmark::State& s) { run(s, 512, 18944, 3584); }
void BM_PrefillGemm_M512_3584x18944(benchmark::State& s) { run(s, 512, 3584, 18944); }
BENCHMARK(BM_DecodeGemv_QO_3584x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemv_KV_512x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemv_GateUp_37888x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemv_Down_3584x18944)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemv_LmHead_152064x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_DecodeGemv_Batch4_18944x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_PrefillGemm_M512_18944x3584)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_PrefillGemm_M512_3584x18944)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// Decode attention: one row at position L−1 over a bf16 paged cache, 28 query / 4 kv heads of 128.
void BM_DecodeAttention_28x4x128_Bf16(benchmark::State& state) {
  const int heads = 28, kv_heads = 4, D = 128, bs = 64;
  const int L = static_cast<int>(state.range(0));
  vv::Backend& be = backend();
  const int blocks = (L + bs - 1) / bs;
  vv::Buffer kc = be.allocate(int64_t{blocks} * bs * kv_heads * D * 2), vc = be.allocate(kc.bytes());
  vv::Buffer q = be.allocate(heads * D * 4), out = be.allocate(heads * D * 4);
  std::vector<int32_t> table(blocks), seq = {0}, pos = {L - 1};
  for (int i = 0; i < blocks; ++i) table[i] = i;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-1, 1);
  for (size_t i = 0; i < kc.bytes() / 2; ++i) {
    static_cast<uint16_t*>(kc.data())[i] = vv::f32_to_bf16(d(rng));
    static_cast<uint16_t*>(vc.data())[i] = vv::f32_to_bf16(d(rng));
  }
  for (int i = 0; i < heads * D; ++i) static_cast<float*>(q.data())[i] = d(rng);
  vv::KvLayer cache{kc.matrix(vv::DType::kBF16, int64_t{blocks} * bs, kv_heads * D),
                    vc.matrix(vv::DType::kBF16, int64_t{blocks} * bs, kv_heads * D)};
  vv::AttentionRows rows{vv::Tensor::vector(seq.data(), vv::DType::kI32, 1),
                         vv::Tensor::vector(pos.data(), vv::DType::kI32, 1),
                         vv::Tensor::matrix(table.data(), vv::DType::kI32, 1, blocks), bs};
  vv::AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(128.0f)};
  vv::Tensor qt = q.matrix(vv::DType::kF32, 1, heads * D), ot = out.matrix(vv::DType::kF32, 1, heads * D);
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) be.paged_attention(qt, rows, cache, shape, ot);
  const double cpu = (process_cpu_seconds() - cpu0) / g_threads;
  const double bytes = 2.0 * L * kv_heads * D * 2 * static_cast<double>(state.iterations());
  state.counters["GB/s"] = bytes / cpu * 1e-9;
  state.counters["x_triad"] = bytes / cpu * 1e-9 / g_triad_gbps;
  state.counters["x_bw_bound"] = bytes / cpu * 1e-9 / g_bw_bound;
}
BENCHMARK(BM_DecodeAttention_28x4x128_Bf16)->Arg(1024)->Arg(8192)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const int threads = vv::resolve_cpu_threads(0);
  g_threads = threads;
  g_triad_gbps = vv::measure_triad_gbps(threads);
  g_read_gbps = vv::measure_read_gbps(threads);
  g_bw_bound = std::max(g_triad_gbps, g_read_gbps);
  g_fma_gflops = vv::measure_fma_gflops(threads);
  std::printf("bounds (%d threads): STREAM triad %.1f GB/s, read stream %.1f GB/s (memory bound: the higher), "
              "FMA peak %.1f GFLOP/s; targets: GEMV >= 0.70 x_bw_bound, GEMM >= 0.50 x_fma_peak\n",
              threads, g_triad_gbps, g_read_gbps, g_fma_gflops);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
