// The AVX2 GEMV path (M = 1: decode of one sequence) against the GEMM paths it must agree with
// bit for bit: a row computed alone equals the same row inside a batch (the direct path for M ≤ 8,
// the blocked path above), and neither depends on the thread count. The shapes stress the GEMV's
// edges: N not a multiple of its 8-row tile, K shorter than a cache line of w, K with a tail below
// 8, rows shorter than the prefetch distance, a row stride wider than K, sizes that change how the
// rows are split over the threads, and chunks long enough for several rows per lane with rows left
// over.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/reference_ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace vv {
namespace {

using Isa = CpuBackendOptions::Isa;
using test::HostMatrix;
using test::random_matrix;
using test::random_vec;

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

std::unique_ptr<Backend> avx2_backend(int threads) {
  CpuBackendOptions o;
  o.isa = Isa::kAvx2;
  o.threads = threads;
  o.pin = false;
  return make_cpu_backend(o);
}

std::vector<float> run_gemm(Backend& be, const Tensor& a, HostMatrix& w, std::vector<float>* bias,
                            std::vector<float> out, Epilogue ep) {
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, a.rows(), w.rows);
  Tensor bt;
  if (bias) bt = Tensor::vector(bias->data(), DType::kF32, w.rows);
  be.gemm(a, w.view(), bias ? &bt : nullptr, ot, ep);
  return out;
}

std::string what(const char* path, DType dt, int64_t N, int64_t K, Epilogue ep) {
  return std::string(path) + " " + dtype_name(dt) + " N" + std::to_string(N) + " K" + std::to_string(K) +
         " ep" + std::to_string(static_cast<int>(ep));
}

TEST(Gemv, RowAloneEqualsTheSameRowInEveryBatchPath) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  auto be = avx2_backend(2);
  const std::vector<std::array<int64_t, 2>> shapes = {
      {1, 1},    {7, 5},    {8, 8},    {9, 31},     {17, 32},   {15, 33},    {24, 255},
      {23, 256}, {41, 257}, {61, 300}, {130, 1031}, {67, 3584}, {203, 4100}, {1031, 700}};
  uint32_t seed = 500;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (auto [N, K] : shapes) {
      const Epilogue ep = static_cast<Epilogue>(seed % 3);
      HostMatrix w = random_matrix(N, K, dt, ++seed);
      std::vector<float> bias = random_vec(N, ++seed);
      std::vector<float>* bp = seed % 2 ? &bias : nullptr;
      for (int64_t M : {2, 5, 8, 9, 40}) {  // direct path up to 8 rows, blocked path above
        HostMatrix a = random_matrix(M, K, DType::kF32, ++seed);
        std::vector<float> init = random_vec(M * N, ++seed);
        init.resize(M * N);
        auto batch = run_gemm(*be, a.view(), w, bp, init, ep);
        for (int64_t r : {int64_t{0}, M - 1}) {
          std::vector<float> one_init(init.begin() + r * N, init.begin() + (r + 1) * N);
          auto alone = run_gemm(*be, a.view().row_slice(r, 1), w, bp, one_init, ep);
          ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + r * N, N * sizeof(float)))
              << what("gemv", dt, N, K, ep) << " batch M " << M << " row " << r;
        }
      }
    }
  }
}

TEST(Gemv, IsBitwiseIndependentOfThreadCountAndMatchesTheReference) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  // Sizes around the split thresholds: one chunk, a few, and the most chunks per thread.
  for (auto [N, K] : std::vector<std::array<int64_t, 2>>{{13, 64}, {77, 512}, {1031, 257}, {4099, 1031}}) {
    HostMatrix a = random_matrix(1, K, DType::kF32, 1);
    HostMatrix w = random_matrix(N, K, DType::kBF16, 2);
    std::vector<float> bias = random_vec(N, 3);
    std::vector<float> first;
    for (int threads : {1, 2, 3, 5}) {
      auto be = avx2_backend(threads);
      auto got = run_gemm(*be, a.view(), w, &bias, std::vector<float>(N, 0.0f), Epilogue::kGelu);
      if (first.empty()) {
        first = got;
        std::vector<float> want(N, 0.0f);
        Tensor ot = Tensor::matrix(want.data(), DType::kF32, 1, N);
        Tensor bt = Tensor::vector(bias.data(), DType::kF32, N);
        ref::gemm(a.view(), w.view(), &bt, ot, Epilogue::kGelu);
        for (int64_t n = 0; n < N; ++n) {
          double mag = 1.0;
          for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(a.at(0, k)) * w.at(n, k));
          // a reordered f32 sum (4·K·eps·Σ|a·w|) through gelu (slope ≤ 1.13), plus gelu's own error
          ASSERT_NEAR(got[n], want[n], 1.13 * 4.0 * (K + 8) * 1.2e-7 * mag + 2e-6 * std::fabs(want[n]))
              << "N" << N << " K" << K << " n " << n;
        }
      } else {
        ASSERT_EQ(0, std::memcmp(first.data(), got.data(), N * sizeof(float)))
            << be->name() << " N" << N << " K" << K;
      }
    }
  }
}

TEST(Gemv, RowStrideWiderThanKReadsOnlyTheRowsOwnElements) {
  if (!has_avx2()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  auto be = avx2_backend(2);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const int64_t N = 37, K = 300, stride = 333;
    HostMatrix w = random_matrix(N, K, dt, 9, 1.0f, stride);
    HostMatrix packed = random_matrix(N, K, dt, 10);  // the same rows, stored contiguously
    for (int64_t n = 0; n < N; ++n) {
      std::memcpy(packed.bytes.data() + n * K * dtype_size(dt), w.bytes.data() + n * stride * dtype_size(dt),
                  K * dtype_size(dt));
    }
    HostMatrix a = random_matrix(1, K, DType::kF32, 11);
    auto strided = run_gemm(*be, a.view(), w, nullptr, std::vector<float>(N, 0.0f), Epilogue::kNone);
    auto contiguous = run_gemm(*be, a.view(), packed, nullptr, std::vector<float>(N, 0.0f), Epilogue::kNone);
    EXPECT_EQ(0, std::memcmp(strided.data(), contiguous.data(), N * sizeof(float))) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace vv
