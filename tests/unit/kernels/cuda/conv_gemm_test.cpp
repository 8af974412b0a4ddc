// cuda::conv_gemm (default; VV_CUDA_CONV_GEMM=0 off; labelled gpu, skips without a device): the encoders'
// strided convolutions as GEMMs whose f32 rows overlap (row stride stride·C_in < K = kernel·C_in), with bf16
// weights, against a reference on the host that rounds a's values to bf16 as the kernel (and
// gemm_lt's pack) does and sums in double; then a row's bits alone against the same row in a longer
// launch and from a shifted view (they must not depend on the row count or the row's place).
#include "kernels/cuda/conv_gemm.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/device/backend_factory.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test::convgemm {
namespace {

float round_bf16(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

struct ConvCase {
  int64_t rows;    // M: output rows
  int64_t c_in;    // the input's channels
  int64_t stride;  // rows of input per output row
  int64_t kernel;  // rows of input per window (K = kernel · c_in)
  int64_t n;       // output channels
  bool bias;
};

// out[m, n] = Σ_k bf16(x[m·stride·c_in + k]) · w[n, k] + bias[n], in double.
std::vector<float> reference(const std::vector<float>& x, const ConvCase& c, const HostMatrix& w,
                             const HostMatrix* b) {
  const int64_t K = c.kernel * c.c_in, lda = c.stride * c.c_in;
  std::vector<float> out(static_cast<size_t>(c.rows * c.n));
  parallel_ranges(c.rows, [&](int64_t r0, int64_t r1) {
    std::vector<double> a(static_cast<size_t>(K));
    for (int64_t m = r0; m < r1; ++m) {
      for (int64_t k = 0; k < K; ++k) a[k] = round_bf16(x[m * lda + k]);
      for (int64_t n = 0; n < c.n; ++n) {
        double s = b ? b->at(0, n) : 0.0;
        for (int64_t k = 0; k < K; ++k) s += a[k] * w.at(n, k);
        out[m * c.n + n] = static_cast<float>(s);
      }
    }
  });
  return out;
}

std::string name_of(const ConvCase& c) {
  return "conv_gemm M=" + std::to_string(c.rows) + " C_in=" + std::to_string(c.c_in) +
         " stride=" + std::to_string(c.stride) + " kernel=" + std::to_string(c.kernel) +
         " N=" + std::to_string(c.n) + (c.bias ? " bias" : " no bias");
}

void check_case(Backend& be, const ConvCase& c, uint32_t seed) {
  const int64_t K = c.kernel * c.c_in, lda = c.stride * c.c_in;
  const int64_t len = (c.rows - 1) * lda + K;
  HostMatrix xin = random_matrix(1, len, DType::kF32, seed);
  HostMatrix w = random_matrix(c.n, K, DType::kBF16, seed + 1, 1.0f / std::sqrt(static_cast<float>(K)));
  HostMatrix b = random_matrix(1, c.n, DType::kF32, seed + 2, 0.5f);
  const std::string what = name_of(c);
  DeviceMatrix dx = to_device(be, xin), dw = to_device(be, w), db = to_device(be, b);
  const Tensor bias = Tensor::vector(db.buf.data(), DType::kF32, c.n);
  const auto run = [&](int64_t first, int64_t rows) {
    const Tensor a =
        Tensor::matrix(static_cast<float*>(dx.buf.data()) + first * lda, DType::kF32, rows, K, lda);
    DeviceMatrix out = poisoned(be, rows, c.n);
    be.gemm(a, dw.t, c.bias ? &bias : nullptr, out.t, Epilogue::kNone);
    return download_f32(be, out.t);
  };
  const std::vector<float> got = run(0, c.rows);
  expect_close(got, reference(xin.f, c, w, c.bias ? &b : nullptr), 2e-5, what);
  // The first rows alone, and rows from a view that starts 7 rows in: the same bits as in the long
  // launch (both still at least the backend's 2,048 rows, so they take the kernel too).
  const int64_t part = std::max<int64_t>(2048, c.rows / 3 + 5);
  if (part + 7 <= c.rows) {
    const std::vector<float> head = run(0, part), shifted = run(7, part);
    EXPECT_EQ(std::memcmp(head.data(), got.data(), head.size() * 4), 0)
        << what << ": first rows alone differ";
    EXPECT_EQ(std::memcmp(shifted.data(), got.data() + 7 * c.n, shifted.size() * 4), 0)
        << what << ": rows from a shifted view differ";
  }
}

TEST(CudaConvGemm, OverlappingRowsAgainstTheReferenceAndIndependentOfTheRowCount) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  auto made = cuda_backend_with({{"VV_CUDA_CONV_GEMM", "1"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  Backend& be = **made;
  (void)backend_profile_report(be);
  // The encoders' stem (K = 7: one k-step, odd K, scalar loads), down0 and down1 at the 60 s stage
  // shapes' widths (fewer rows), an odd row stride, K = 336 (88 KB of weights), and contiguous rows.
  check_case(be, {100003, 1, 1, 7, 32, true}, 11);
  check_case(be, {72001, 32, 2, 4, 64, true}, 12);
  check_case(be, {36001, 64, 2, 4, 128, true}, 13);
  check_case(be, {4099, 3, 5, 10, 64, false}, 14);
  check_case(be, {2053, 24, 7, 14, 128, true}, 15);
  check_case(be, {2048, 16, 1, 1, 32, true}, 16);
  const std::string table = backend_profile_report(be);
  EXPECT_NE(table.find("gemm.conv_mma"), std::string::npos) << table;
  // Below 2,048 rows the backend keeps cuBLASLt; with VV_CUDA_CONV_GEMM=0 too. The default backend
  // (switch unset) takes the kernel.
  check_case(be, {2047, 32, 2, 4, 64, true}, 17);
  EXPECT_EQ(backend_profile_report(be).find("gemm.conv_mma"), std::string::npos);
  auto off = cuda_backend_with({{"VV_CUDA_CONV_GEMM", "0"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  (void)backend_profile_report(**off);
  check_case(**off, {9001, 32, 2, 4, 64, true}, 18);
  EXPECT_EQ(backend_profile_report(**off).find("gemm.conv_mma"), std::string::npos);
  check_case(*plain, {9001, 32, 2, 4, 64, true}, 19);
}

TEST(CudaConvGemm, FitsOnlyWhatItTakes) {
  float f = 0;
  uint16_t h = 0;
  const auto fits = [&](int64_t M, int64_t K, int64_t N, int64_t ldo, DType wt) {
    const Tensor a = Tensor::matrix(&f, DType::kF32, M, K, 3);
    const Tensor w = Tensor::matrix(&h, wt, N, K);
    const Tensor o = Tensor::matrix(reinterpret_cast<void*>(uintptr_t{256}), DType::kF32, M, N, ldo);
    return cuda::conv_gemm_fits(a, w, o);
  };
  EXPECT_TRUE(fits(4096, 128, 64, 64, DType::kBF16));
  EXPECT_TRUE(fits(4096, 7, 32, 32, DType::kBF16));
  EXPECT_TRUE(fits(4096, 336, 128, 128, DType::kBF16));
  EXPECT_FALSE(fits(4096, 400, 128, 128, DType::kBF16)) << "weights over 96 KB";
  EXPECT_FALSE(fits(4096, 128, 256, 256, DType::kBF16)) << "N = 256";
  EXPECT_FALSE(fits(4096, 128, 48, 48, DType::kBF16)) << "N = 48";
  EXPECT_FALSE(fits(4096, 128, 64, 65, DType::kBF16)) << "odd output row stride";
  EXPECT_FALSE(fits(4096, 128, 64, 64, DType::kF16)) << "f16 weights";
}

}  // namespace
}  // namespace vv::test::convgemm
