// The split-K skinny GEMM (kernels/cuda/skinny_gemm.cuh; VV_CUDA_SKINNY_GEMM=1): bf16 GEMMs of 2..128
// rows against a double-precision reference on the same bf16-rounded operands, over odd, prime and
// the 7B's production shapes (one slice and many; a K shorter than a stage; N not a multiple of the
// block's 128 columns), with bias, residual and strided outputs; every output written, the kernel
// really taken (the profiler's table names it), and each row's bits independent of how many rows
// share the launch. The weight-streaming GEMM (stream_gemm.cuh) over the same kind of cases. Labelled
// gpu: skipped with the reason where no GPU is usable.
#include "kernels/cuda/skinny_gemm.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/stream_gemm.cuh"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

// A bf16 backend with `env`=`value` set while it is made (the switches are read at creation).
Result<std::unique_ptr<Backend>> sk_backend_with(const char* env, const char* value, bool profile) {
  ::setenv(env, value, 1);
  if (profile) ::setenv("VV_CUDA_PROFILE", "1", 1);
  BackendOptions opt;
  opt.gpu_bf16_gemm = true;
  auto be = make_backend("cuda:0", opt);
  ::unsetenv(env);
  ::unsetenv("VV_CUDA_PROFILE");
  return be;
}
Result<std::unique_ptr<Backend>> sk_backend(bool profile) {
  return sk_backend_with("VV_CUDA_SKINNY_GEMM", "1", profile);
}

struct SkCase {
  int64_t M, N, K;
  bool bias, residual;
  int64_t ldo_pad;  // extra columns of the output's row stride
};

// The GEMM on the backend: out (=|+=) bf16(a) · wᵀ + bias; the output rows, packed.
std::vector<float> sk_run(Backend& be, HostMatrix& a, HostMatrix& w, HostMatrix* bias, HostMatrix& res,
                          const SkCase& c) {
  DeviceMatrix da = to_device(be, a), dw = to_device(be, w);
  DeviceMatrix out = poisoned(be, c.M, c.N, c.N + c.ldo_pad);
  if (c.residual) {
    for (int64_t r = 0; r < c.M; ++r)
      be.upload(static_cast<float*>(out.t.data) + r * out.t.row_stride(), res.f32() + r * c.N,
                static_cast<size_t>(c.N) * 4);
  }
  DeviceMatrix db;
  Tensor bv;
  if (bias) {
    db = to_device(be, *bias);
    bv = Tensor::vector(db.buf.data(), DType::kF32, c.N);
  }
  be.gemm(da.t, dw.t, bias ? &bv : nullptr, out.t, c.residual ? Epilogue::kAddResidual : Epilogue::kNone);
  return download_f32(be, out.t);
}

// The reference in double over the bf16-rounded a, and the size of each element's terms (for the
// tolerance: f32 accumulation over K).
void sk_reference(const HostMatrix& a, const HostMatrix& w, const HostMatrix* bias, const HostMatrix& res,
                  const SkCase& c, std::vector<double>* want, std::vector<double>* scale) {
  want->assign(static_cast<size_t>(c.M * c.N), 0.0);
  scale->assign(static_cast<size_t>(c.M * c.N), 0.0);
  std::vector<float> ab(static_cast<size_t>(c.M * c.K)), wf(static_cast<size_t>(c.N * c.K));
  for (int64_t i = 0; i < c.M * c.K; ++i) ab[i] = bf16_to_f32(f32_to_bf16(a.f[i]));
  parallel_ranges(c.N, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t k = 0; k < c.K; ++k) wf[n * c.K + k] = w.at(n, k);
  });
  parallel_ranges(c.M * c.N, [&](int64_t i0, int64_t i1) {  // output elements, row-major
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t m = i / c.N, n = i % c.N;
      double s = 0, t = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(ab[m * c.K + k]) * wf[n * c.K + k];
        s += p;
        t += std::fabs(p);
      }
      if (bias) s += bias->at(0, n), t += std::fabs(bias->at(0, n));
      if (c.residual) s += res.at(m, n), t += std::fabs(res.at(m, n));
      (*want)[i] = s;
      (*scale)[i] = t;
    }
  });
}

// Runs each case on `be` and checks it against the float64 reference (1e-4 of the terms' size: f32
// accumulation over K), that every output was written, and that the kernel named `label` ran.
void sk_check_cases(Backend& be, const std::vector<SkCase>& cases, const char* label, uint32_t seed) {
  for (const SkCase& c : cases) {
    const std::string what =
        "M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
    HostMatrix a = random_matrix(c.M, c.K, DType::kF32, seed, 1.5f);
    HostMatrix w = random_matrix(c.N, c.K, DType::kBF16, seed + 1, 1.0f / std::sqrt(static_cast<float>(c.K)));
    HostMatrix bias = random_matrix(1, c.N, DType::kF32, seed + 2, 0.5f);
    HostMatrix res = random_matrix(c.M, c.N, DType::kF32, seed + 3, 2.0f);
    seed += 10;
    (void)backend_profile_report(be);
    const std::vector<float> got = sk_run(be, a, w, c.bias ? &bias : nullptr, res, c);
    const std::string table = backend_profile_report(be);
    EXPECT_NE(table.find(label), std::string::npos) << what << ": " << label << " did not run\n" << table;
    std::vector<double> want, scale;
    sk_reference(a, w, c.bias ? &bias : nullptr, res, c, &want, &scale);
    size_t bad = 0, nan = 0, worst = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(got[i])) {
        ++nan;
        continue;
      }
      const double tol = 1e-4 * scale[i] + 1e-30;
      const double r = std::fabs(got[i] - want[i]) / tol;
      if (r > 1) ++bad;
      if (r > worst_ratio) worst_ratio = r, worst = i;
    }
    EXPECT_EQ(nan, 0u) << what << ": unwritten or non-finite outputs";
    EXPECT_EQ(bad, 0u) << what << ": worst at row " << worst / c.N << " column " << worst % c.N << " got "
                       << got[worst] << " want " << want[worst] << " (" << worst_ratio << "x the tolerance)";
  }
}

TEST(CudaSkinnyGemm, MatchesReferenceOverOddPrimeAndProductionShapes) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  auto be = sk_backend(true);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  const std::vector<SkCase> cases = {
      {2, 8, 8, false, false, 0},               // the smallest: one 16-byte chunk of K, 8 columns
      {3, 129, 72, true, false, 3},             // one column past a block, a K of one stage and a bit
      {5, 257, 1000, true, true, 0},            // prime rows, K not a multiple of 64, residual
      {13, 511, 4104, false, true, 1},          // several slices with a short last one
      {17, 1031, 2056, true, false, 0},         // 17 rows: two 16-row tiles
      {31, 640, 3584, true, true, 0},           // 31 rows, many slices
      {64, 3584, 3584, false, true, 0},         // 7B o_proj at a 64-row step, residual
      {64, 4608, 3584, true, false, 0},         // 7B q|k|v with bias
      {100, 3584, 18944, false, true, 0},       // 7B down, 100 rows: the 128-row form
      {127, 1024, 3584, true, false, 5},        // prime rows near the limit, strided output
      {128, 37888 / 8, 3584, false, false, 0},  // an eighth of 7B gate_up: one slice, 37 blocks
  };
  sk_check_cases(**be, cases, "gemm.skinny_mma", 4100);
}

// The weight-streaming GEMM (stream_gemm.cuh; VV_CUDA_STREAM_GEMM=LO-HI): tiles whole and shared by
// blocks (atomics into a zeroed or residual output), every row-count form (16, 32, 64, 128 padded
// rows), K not a multiple of the 64-deep step, N not a multiple of the 128-row tile, strided outputs.
const std::vector<SkCase>& stream_cases() {
  static const std::vector<SkCase> cases = {
      {1, 3584, 3584, true, false, 0},     // one row (VV_CUDA_STREAM_GEMM=1-...)
      {2, 8, 8, false, false, 0},          // one unit: one block, a whole tile
      {3, 129, 72, true, false, 3},        // two tiles, a K of one step and a bit, strided output
      {5, 257, 1000, true, true, 0},       // prime rows, K not a multiple of 64, residual
      {13, 511, 4104, false, false, 1},    // tiles shared by blocks, zeroed output
      {17, 1031, 2056, true, false, 0},    // the 32-row form
      {31, 640, 3584, true, true, 0},      // 31 rows, residual
      {37, 3584, 3584, false, true, 0},    // the 64-row form at 7B o_proj, residual
      {64, 4608, 3584, true, false, 0},    // 7B q|k|v with bias
      {100, 3584, 18944, false, true, 0},  // 7B down in the 128-row form
      {127, 1024, 3584, true, false, 5},   // prime rows near the limit, strided output
      {40, 37888, 3584, false, false, 0},  // 7B gate_up
      {3, 152064, 3584, false, false, 0},  // 7B LM head
  };
  return cases;
}

// The default form: the Hopper one (TMA + wgmma) on sm_90 devices, the mma one elsewhere (the
// profiler's label says which ran, so each device checks the form it would use).
TEST(CudaStreamGemm, DefaultFormMatchesReference) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const bool hopper = prop.major == 9 && prop.minor == 0;
  auto be = sk_backend_with("VV_CUDA_STREAM_GEMM", "1-128", true);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  sk_check_cases(**be, stream_cases(), hopper ? "gemm.stream_wgmma" : "gemm.stream_mma", 5100);
}

TEST(CudaStreamGemm, MmaFormMatchesReference) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  ::setenv("VV_CUDA_STREAM_GEMM_KIND", "mma", 1);
  auto be = sk_backend_with("VV_CUDA_STREAM_GEMM", "1-128", true);
  ::unsetenv("VV_CUDA_STREAM_GEMM_KIND");
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  sk_check_cases(**be, stream_cases(), "gemm.stream_mma", 6100);
}

// The warp-specialised Hopper form (VV_CUDA_STREAM_GEMM_KIND=ws; elsewhere the backend keeps the mma
// form, whose label the check then expects), with clusters of two and four (a's rows multicast) and of
// one: the same cases, and the same bits on a second run (its shared tiles are added up in a fixed order,
// with no atomics).
void check_ws_form(const char* cluster, uint32_t seed) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const bool hopper = prop.major == 9 && prop.minor == 0;
  ::setenv("VV_CUDA_STREAM_GEMM_KIND", "ws", 1);
  ::setenv("VV_CUDA_STREAM_WS_CLUSTER", cluster, 1);
  auto be = sk_backend_with("VV_CUDA_STREAM_GEMM", "1-128", true);
  ::unsetenv("VV_CUDA_STREAM_GEMM_KIND");
  ::unsetenv("VV_CUDA_STREAM_WS_CLUSTER");
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  SCOPED_TRACE(std::string("cluster of ") + cluster);
  sk_check_cases(**be, stream_cases(), hopper ? "gemm.stream_ws" : "gemm.stream_mma", seed);
  if (!hopper) return;
  seed += 800;
  for (const SkCase c : {SkCase{64, 3584, 3584, true, true, 0}, SkCase{100, 3584, 18944, false, false, 0},
                         SkCase{9, 37888, 3584, false, false, 0}}) {
    HostMatrix a = random_matrix(c.M, c.K, DType::kF32, seed, 1.0f);
    HostMatrix w = random_matrix(c.N, c.K, DType::kBF16, seed + 1, 1.0f / std::sqrt(static_cast<float>(c.K)));
    HostMatrix bias = random_matrix(1, c.N, DType::kF32, seed + 2, 0.5f);
    HostMatrix res = random_matrix(c.M, c.N, DType::kF32, seed + 3, 1.0f);
    seed += 10;
    const std::vector<float> first = sk_run(**be, a, w, c.bias ? &bias : nullptr, res, c);
    const std::vector<float> second = sk_run(**be, a, w, c.bias ? &bias : nullptr, res, c);
    ASSERT_EQ(first.size(), second.size());
    EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0)
        << "M=" << c.M << " N=" << c.N << " K=" << c.K << ": two runs differ";
  }
}

TEST(CudaStreamGemm, WarpSpecialisedFormMatchesReferenceAndRepeatsItsBits) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  check_ws_form("2", 7100);
  check_ws_form("1", 8100);
  check_ws_form("4", 9100);
}

// The SwiGLU form (stream_gemm_swiglu: gate_up and silu(g)·u in one launch, bf16 out) straight on the
// kernel, against a float64 reference: every output written and none past it (the row stride's
// padding keeps its poison), within what the bf16 roundings of g, u and the output and f32
// accumulation explain, with clusters of two, one and four, and the same bits on a second run. Shapes: one
// row and one tile, I not a multiple of the 128-column tile (its last tile's gate rows run into the up
// rows), an odd tile count (the last cluster's second tile empty), the 7B's gate_up at 64 rows, the
// 128-row form.
TEST(CudaStreamGemm, SwiGluFormMatchesReferenceAndRepeatsItsBits) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (!(prop.major == 9 && prop.minor == 0))
    GTEST_SKIP() << "the SwiGLU form is sm_90a code (" << prop.name << ")";
  struct Case {
    int64_t M, I, K;
  };
  const int64_t pad = 8;
  int* counts = nullptr;
  float* ws = nullptr;
  const size_t count_ints = 4096, ws_bytes = cuda::stream_gemm_ws_bytes(prop.multiProcessorCount);
  ASSERT_EQ(cudaMalloc(&counts, count_ints * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(counts, 0, count_ints * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  uint32_t seed = 9100;
  for (const Case c : {Case{1, 128, 64}, Case{5, 200, 1000}, Case{17, 640, 776}, Case{37, 1152, 3584},
                       Case{64, 18944, 3584}, Case{128, 384, 3584}}) {
    const std::string what =
        "M=" + std::to_string(c.M) + " I=" + std::to_string(c.I) + " K=" + std::to_string(c.K);
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<float> ua(-1.5f, 1.5f), uw(-1.0f, 1.0f);
    const float wscale = 3.0f / std::sqrt(static_cast<float>(c.K));  // g and u of a few units: silu's curve
    std::vector<uint16_t> a(static_cast<size_t>(c.M * c.K)), w(static_cast<size_t>(2 * c.I * c.K));
    for (auto& v : a) v = f32_to_bf16(ua(rng));
    for (auto& v : w) v = f32_to_bf16(uw(rng) * wscale);
    // The reference: g, u and the sizes of their terms in double over the same bf16 operands.
    const int64_t ldo = c.I + pad;
    std::vector<double> want(static_cast<size_t>(c.M * c.I)), tol(want.size());
    parallel_ranges(c.M * c.I, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t m = i / c.I, j = i % c.I;
        double g = 0, u = 0, tg = 0, tu = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double x = bf16_to_f32(a[m * c.K + k]);
          const double pg = x * bf16_to_f32(w[j * c.K + k]), pu = x * bf16_to_f32(w[(c.I + j) * c.K + k]);
          g += pg, u += pu, tg += std::fabs(pg), tu += std::fabs(pu);
        }
        const double sg = g / (1 + std::exp(-g));
        // bf16 rounds to within 2^-8 of the value (8 significant bits); f32 accumulation over K within
        // 1e-4 of the terms' size (the other stream GEMM tests' bound)
        const double eg = std::ldexp(std::fabs(g), -8) + 1e-4 * tg,
                     eu = std::ldexp(std::fabs(u), -8) + 1e-4 * tu;
        want[i] = sg * u;
        // silu' is within [-0.1, 1.1]; the output's own rounding on top
        tol[i] =
            1.5 * (1.1 * eg * (std::fabs(u) + eu) + std::fabs(sg) * eu + std::ldexp(std::fabs(sg * u), -8)) +
            1e-6;
      }
    });
    void *da = nullptr, *dw = nullptr, *dout = nullptr;
    ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, static_cast<size_t>(c.M * ldo) * 2), cudaSuccess);
    // On the test's (non-blocking) stream: a cudaMemcpy from pageable memory may return before its DMA
    // lands, and the legacy stream it runs on orders nothing on this one.
    ASSERT_EQ(cudaMemcpyAsync(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
    std::vector<uint16_t> first;
    for (const int cluster : {2, 1, 4}) {
      for (int run = 0; run < 2; ++run) {
        SCOPED_TRACE(what + ", cluster of " + std::to_string(cluster) + ", run " + std::to_string(run));
        ASSERT_EQ(cudaMemsetAsync(dout, 0xFF, static_cast<size_t>(c.M * ldo) * 2, stream),
                  cudaSuccess);  // NaN
        cuda::StreamGemmScratch scratch{counts, count_ints, ws, ws_bytes, cluster};
        ASSERT_TRUE(cuda::stream_gemm_swiglu(da, c.M, c.K, dw, c.K, c.I, dout, ldo, prop.multiProcessorCount,
                                             scratch, stream));
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<uint16_t> got(static_cast<size_t>(c.M * ldo));
        ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        size_t bad = 0, unwritten = 0, past = 0, worst = 0;
        double worst_ratio = 0;
        for (int64_t m = 0; m < c.M; ++m) {
          for (int64_t j = 0; j < ldo; ++j) {
            const uint16_t bits = got[m * ldo + j];
            if (j >= c.I) {
              past += bits != 0xFFFF;
              continue;
            }
            const float v = bf16_to_f32(bits);
            const size_t i = static_cast<size_t>(m * c.I + j);
            if (!std::isfinite(v)) {
              ++unwritten;
              continue;
            }
            const double r = std::fabs(v - want[i]) / tol[i];
            if (r > 1) ++bad;
            if (r > worst_ratio) worst_ratio = r, worst = i;
          }
        }
        EXPECT_EQ(unwritten, 0u) << "unwritten or non-finite outputs";
        EXPECT_EQ(past, 0u) << "writes past the I columns";
        EXPECT_EQ(bad, 0u) << "worst at row " << worst / c.I << " column " << worst % c.I << " want "
                           << want[worst] << " (" << worst_ratio << "x the tolerance)";
        if (run == 0) {
          first = got;
        } else {
          EXPECT_EQ(got, first) << "two runs differ";
        }
      }
    }
    cudaFree(da);
    cudaFree(dw);
    cudaFree(dout);
  }
  cudaStreamDestroy(stream);
  cudaFree(counts);
  cudaFree(ws);
}

// A row's bits do not depend on the rows beside it: the split of K is chosen from N and K only.
TEST(CudaSkinnyGemm, RowsAreBitwiseIndependentOfRowCount) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  auto be = sk_backend(false);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  struct Shape {
    int64_t N, K;
  };
  for (const Shape sh : {Shape{3584, 3584}, Shape{512, 3584}, Shape{3584, 18944}, Shape{300, 776},
                         Shape{152064, 3584}}) {  // ... and the 7B LM head
    const int64_t M = 128;
    HostMatrix a = random_matrix(M, sh.K, DType::kF32, 77, 1.0f);
    HostMatrix w = random_matrix(sh.N, sh.K, DType::kBF16, 78, 0.05f);
    HostMatrix bias = random_matrix(1, sh.N, DType::kF32, 79, 0.5f);
    HostMatrix res = random_matrix(M, sh.N, DType::kF32, 80, 1.0f);
    const SkCase all{M, sh.N, sh.K, true, true, 0};
    const std::vector<float> full = sk_run(**be, a, w, &bias, res, all);
    for (const int64_t rows : {2, 5, 16, 17, 64, 100}) {
      const int64_t first = (M - rows) / 3;  // a window of the rows, at another offset than in the full run
      HostMatrix as = random_matrix(rows, sh.K, DType::kF32, 1, 1.0f);
      HostMatrix rs = random_matrix(rows, sh.N, DType::kF32, 1, 1.0f);
      std::memcpy(as.f32(), a.f32() + first * sh.K, static_cast<size_t>(rows * sh.K) * 4);
      std::memcpy(rs.f32(), res.f32() + first * sh.N, static_cast<size_t>(rows * sh.N) * 4);
      const std::vector<float> part = sk_run(**be, as, w, &bias, rs, SkCase{rows, sh.N, sh.K, true, true, 0});
      const bool same = std::memcmp(part.data(), full.data() + first * sh.N, part.size() * 4) == 0;
      EXPECT_TRUE(same) << "N=" << sh.N << " K=" << sh.K << ": rows " << first << ".." << first + rows - 1
                        << " alone differ from the same rows in a launch of " << M;
    }
  }
}

// Deterministic mode with VV_CUDA_DETERMINISTIC_GEMM=ws (sm_90; elsewhere the skinny kernel, checked the
// same way): the bf16 GEMMs on the ws form in its
// row-invariant settings, in 128-row launches. Against the float64 reference over the stream GEMM's
// cases, and each row's bits independent of the rows beside it (windows of 1..128 rows of a 200-row
// launch, at another offset), by M (a launch's N = its padded rows) and with VV_CUDA_STREAM_WS_PAD128=1
// (always N = 128).
TEST(CudaStreamGemm, DeterministicWsRowsAreBitwiseIndependentOfRowCount) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  // Off sm_90 the switch is ignored and deterministic mode keeps the skinny kernel: the same checks,
  // under its label.
  const bool hopper = prop.major == 9 && prop.minor == 0;
  for (const char* pad : {"0", "1"}) {
    SCOPED_TRACE(std::string("VV_CUDA_STREAM_WS_PAD128=") + pad);
    auto be = cuda_backend_with({{"VV_CUDA_DETERMINISTIC", "1"},
                                 {"VV_CUDA_DETERMINISTIC_GEMM", "ws"},
                                 {"VV_CUDA_STREAM_WS_PAD128", pad},
                                 {"VV_CUDA_PROFILE", "1"}},
                                true);
    ASSERT_TRUE(be.is_ok()) << be.status().to_string();
    std::vector<SkCase> cases = stream_cases();
    cases.push_back({200, 1031, 2056, true, true, 3});  // two launches of 128 and 72 rows
    sk_check_cases(**be, cases, hopper ? "gemm.stream_ws" : "gemm.skinny_mma", 9700);
    struct Shape {
      int64_t N, K;
    };
    for (const Shape sh :
         {Shape{3584, 3584}, Shape{4608, 3584}, Shape{3584, 18944}, Shape{37888, 3584}, Shape{300, 776}}) {
      const int64_t M = 200;
      HostMatrix a = random_matrix(M, sh.K, DType::kF32, 97, 1.0f);
      HostMatrix w = random_matrix(sh.N, sh.K, DType::kBF16, 98, 0.05f);
      HostMatrix bias = random_matrix(1, sh.N, DType::kF32, 99, 0.5f);
      HostMatrix res = random_matrix(M, sh.N, DType::kF32, 100, 1.0f);
      const std::vector<float> full = sk_run(**be, a, w, &bias, res, SkCase{M, sh.N, sh.K, true, true, 0});
      for (const int64_t rows : {1, 2, 5, 16, 17, 64, 100, 128}) {
        const int64_t first = (M - rows) / 3;  // a window of the rows, at another offset than in the full run
        HostMatrix as = random_matrix(rows, sh.K, DType::kF32, 1, 1.0f);
        HostMatrix rs = random_matrix(rows, sh.N, DType::kF32, 1, 1.0f);
        std::memcpy(as.f32(), a.f32() + first * sh.K, static_cast<size_t>(rows * sh.K) * 4);
        std::memcpy(rs.f32(), res.f32() + first * sh.N, static_cast<size_t>(rows * sh.N) * 4);
        const std::vector<float> part =
            sk_run(**be, as, w, &bias, rs, SkCase{rows, sh.N, sh.K, true, true, 0});
        EXPECT_EQ(std::memcmp(part.data(), full.data() + first * sh.N, part.size() * 4), 0)
            << "N=" << sh.N << " K=" << sh.K << ": rows " << first << ".." << first + rows - 1
            << " alone differ from the same rows in a launch of " << M;
      }
    }
  }
}

// The plan depends on N, K and the SM count only, covers K, and fits the preallocated partials.
TEST(CudaSkinnyGemm, PlanCoversKAndFitsTheWorkspace) {
  for (const int per_sm : {1, 2, 4}) {
    for (const int sms : {1, 78, 132}) {
      for (const int64_t N : {1, 8, 127, 512, 3584, 4608, 37888, 152064}) {
        for (const int64_t K : {8, 64, 200, 3584, 18944}) {
          const cuda::SkinnyGemmPlan p = cuda::plan_skinny_gemm(N, K, sms, per_sm);
          const std::string what = std::to_string(per_sm) + " per SM, sms " + std::to_string(sms) + " N " +
                                   std::to_string(N) + " K " + std::to_string(K);
          EXPECT_GE(p.splits, 1) << what;
          EXPECT_EQ(p.ks % 64, 0) << what;
          EXPECT_GE(p.splits * p.ks, K) << what;
          EXPECT_LT((p.splits - 1) * p.ks, K) << what << ": an empty slice";
          EXPECT_LE(cuda::skinny_gemm_ws_bytes(cuda::kSkinnyGemmMaxRows, N, p),
                    cuda::skinny_gemm_ws_max_bytes(sms, per_sm))
              << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vv::test
