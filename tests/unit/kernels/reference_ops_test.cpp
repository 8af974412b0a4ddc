// The scalar reference checked against straightforward double-precision formulas on small shapes.
#include "kernels/cpu/reference_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace vv {
namespace {

using test::close;
using test::random_matrix;
using test::random_vec;

double gelu_d(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(ReferenceOps, GemmMatchesDoubleForEveryWeightDtypeAndEpilogue) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kAddResidual}) {
      const int64_t M = 5, N = 7, K = 37;
      auto a = random_matrix(M, K, DType::kF32, 1);
      auto w = random_matrix(N, K, dt, 2);
      auto bias = random_vec(N, 3);
      auto out = random_matrix(M, N, DType::kF32, 4);
      std::vector<float> before(out.f32(), out.f32() + M * N);
      Tensor bt = Tensor::vector(bias.data(), DType::kF32, N);
      Tensor ot = out.view();
      ref::gemm(a.view(), w.view(), &bt, ot, ep);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = bias[n];
          for (int64_t k = 0; k < K; ++k) s += static_cast<double>(a.at(m, k)) * w.at(n, k);
          double want = ep == Epilogue::kGelu ? gelu_d(s) : ep == Epilogue::kAddResidual ? before[m * N + n] + s : s;
          EXPECT_TRUE(close(out.f32()[m * N + n], want, 1e-5, 1e-5))
              << dtype_name(dt) << " ep " << int(ep) << " m " << m << " n " << n;
        }
    }
  }
}

TEST(ReferenceOps, GemmOverlappingRowsEqualsExplicitStridedConv) {
  // A strided conv (stride 2, kernel 4 over 3 channels) as a GEMM over overlapping rows of x [T, C].
  const int64_t T = 20, C = 3, Kk = 4, S = 2, O = 5;
  auto x = random_vec(T * C, 7);
  auto w = random_matrix(O, Kk * C, DType::kF32, 8);  // [out, kernel·channels], k-major
  const int64_t T_out = (T - Kk) / S + 1;
  Tensor a = Tensor::matrix(x.data(), DType::kF32, T_out, Kk * C, S * C);
  std::vector<float> out(T_out * O);
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, T_out, O);
  ref::gemm(a, w.view(), nullptr, ot, Epilogue::kNone);
  for (int64_t t = 0; t < T_out; ++t)
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t k = 0; k < Kk; ++k)
        for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x[(t * S + k) * C + c]) * w.at(o, k * C + c);
      EXPECT_TRUE(close(out[t * O + o], s, 1e-5, 1e-6));
    }
}

TEST(ReferenceOps, RmsNormMatchesDoubleWithF32AndBf16Weight) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t R = 3, C = 29;
    auto x = random_matrix(R, C, DType::kF32, 11, 3.0f);
    auto wt = random_matrix(1, C, dt, 12);
    std::vector<float> out(R * C);
    Tensor ot = Tensor::matrix(out.data(), DType::kF32, R, C);
    ref::rms_norm(x.view(), Tensor::vector(wt.bytes.data(), dt, C), 1e-6f, ot);
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x.at(r, c)) * x.at(r, c);
      const double inv = 1.0 / std::sqrt(ss / C + 1e-6);
      for (int64_t c = 0; c < C; ++c) EXPECT_TRUE(close(out[r * C + c], x.at(r, c) * inv * wt.f[c], 1e-5, 1e-6));
    }
  }
}

TEST(ReferenceOps, DepthwiseConvUsesHistoryBeforeRowZero) {
  const int64_t T = 9, C = 5, K = 7;
  auto x = random_matrix(T, C, DType::kF32, 21);
  auto hist = random_matrix(K - 1, C, DType::kF32, 22);
  auto w = random_matrix(C, K, DType::kBF16, 23);
  auto bias = random_vec(C, 24);
  std::vector<float> out(T * C);
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, T, C);
  ref::depthwise_conv1d_causal(x.view(), hist.view(), w.view(), Tensor::vector(bias.data(), DType::kF32, C), ot);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double s = bias[c];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t src = t + k - (K - 1);
        const double xv = src >= 0 ? x.at(src, c) : hist.at(src + K - 1, c);
        s += w.at(c, k) * xv;
      }
      EXPECT_TRUE(close(out[t * C + c], s, 1e-5, 1e-6)) << t << "," << c;
    }
}

TEST(ReferenceOps, RopeMatchesFormulaInDouble) {
  const int heads = 3, D = 16;
  const int64_t n = 4;
  auto x = random_matrix(n, heads * D, DType::kF32, 31);
  std::vector<float> orig(x.f32(), x.f32() + n * heads * D);
  std::vector<int32_t> pos = {0, 1, 17, 4095};
  Tensor xt = x.view();
  ref::rope(xt, Tensor::vector(pos.data(), DType::kI32, n), heads, D, 1e6f);
  for (int64_t r = 0; r < n; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const double inv = 1.0 / std::pow(1e6, 2.0 * i / D);
        const double phi = pos[r] * inv;
        const double x1 = orig[r * heads * D + h * D + i], x2 = orig[r * heads * D + h * D + i + D / 2];
        EXPECT_TRUE(close(x.f32()[r * heads * D + h * D + i], x1 * std::cos(phi) - x2 * std::sin(phi), 1e-3, 1e-4));
        EXPECT_TRUE(close(x.f32()[r * heads * D + h * D + i + D / 2], x2 * std::cos(phi) + x1 * std::sin(phi), 1e-3, 1e-4));
      }
}

TEST(ReferenceOps, PagedAttentionMatchesDenseDoubleSoftmax) {
  const int heads = 4, kv_heads = 2, D = 8, bs = 4;
  const int L = 11;  // one sequence, rows at positions 0..L-1, blocks scattered
  std::vector<int32_t> table = {5, 2, 7};
  const int64_t slots = 8 * bs;
  std::vector<float> kc(slots * kv_heads * D), vc(slots * kv_heads * D);
  KvLayer cache{Tensor::matrix(kc.data(), DType::kF32, slots, kv_heads * D),
                Tensor::matrix(vc.data(), DType::kF32, slots, kv_heads * D)};
  auto q = random_matrix(L, heads * D, DType::kF32, 41);
  auto k = random_matrix(L, kv_heads * D, DType::kF32, 42);
  auto v = random_matrix(L, kv_heads * D, DType::kF32, 43);
  std::vector<int32_t> seq(L, 0), pos(L);
  for (int i = 0; i < L; ++i) pos[i] = i;
  AttentionRows rows{Tensor::vector(seq.data(), DType::kI32, L), Tensor::vector(pos.data(), DType::kI32, L),
                     Tensor::matrix(table.data(), DType::kI32, 1, 3), bs};
  AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D))};
  ref::kv_write(k.view(), v.view(), rows, cache, shape);
  std::vector<float> out(L * heads * D);
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, L, heads * D);
  ref::paged_attention(q.view(), rows, cache, shape, ot);
  for (int r = 0; r < L; ++r)
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads);
      std::vector<double> s(r + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= r; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += static_cast<double>(q.at(r, h * D + e)) * k.at(j, g * D + e);
        s[j] = d * shape.scale;
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j <= r; ++j) sum += s[j] = std::exp(s[j] - mx);
      for (int e = 0; e < D; ++e) {
        double o = 0;
        for (int j = 0; j <= r; ++j) o += s[j] / sum * v.at(j, g * D + e);
        EXPECT_TRUE(close(out[r * heads * D + h * D + e], o, 1e-5, 1e-6)) << r << " " << h << " " << e;
      }
    }
}

TEST(ReferenceOps, ArgmaxTiesGoToLowestIndex) {
  std::vector<float> logits = {1, 3, 3, 2, /**/ -1, -1, -1, -1, /**/ 0, 5, 1, 5};
  std::vector<int32_t> out(3);
  Tensor ot = Tensor::vector(out.data(), DType::kI32, 3);
  ref::argmax(Tensor::matrix(logits.data(), DType::kF32, 3, 4), ot);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 1}));
}

TEST(ReferenceOps, SiluMulAddScaledAddEmbeddingMatchDouble) {
  const int64_t n = 3, I = 6;
  auto gu = random_matrix(n, 2 * I, DType::kF32, 51, 4.0f);
  std::vector<float> out(n * I);
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, n, I);
  ref::silu_mul(gu.view(), ot);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < I; ++c) {
      const double g = gu.at(r, c);
      EXPECT_TRUE(close(out[r * I + c], g / (1 + std::exp(-g)) * gu.at(r, I + c), 1e-5, 1e-6));
    }
  auto x = random_matrix(n, I, DType::kF32, 52);
  auto y = random_matrix(n, I, DType::kF32, 53);
  auto sc = random_matrix(1, I, DType::kBF16, 54);
  std::vector<float> x0(x.f32(), x.f32() + n * I);
  Tensor xt = x.view();
  ref::add_scaled(xt, Tensor::vector(sc.bytes.data(), DType::kBF16, I), y.view());
  for (int64_t i = 0; i < n * I; ++i) EXPECT_TRUE(close(x.f32()[i], x0[i] + double(sc.f[i % I]) * y.f[i], 1e-6, 1e-7));
  ref::add(x.view(), y.view(), ot);
  for (int64_t i = 0; i < n * I; ++i) EXPECT_EQ(out[i], x.f32()[i] + y.f32()[i]);
  auto table = random_matrix(10, I, DType::kBF16, 55);
  std::vector<int32_t> ids = {9, 0, 4};
  ref::embedding(table.view(), Tensor::vector(ids.data(), DType::kI32, 3), ot);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < I; ++c) EXPECT_EQ(out[r * I + c], table.at(ids[r], c));
}

TEST(ReferenceOps, F16RoundTripIsExactForHalfValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    EXPECT_EQ(cpu::f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  }
}

}  // namespace
}  // namespace vv
