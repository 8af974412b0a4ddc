// The CpuBackend's non-GEMM ops (every ISA available here) against the scalar reference or double
// formulas: rms_norm, depthwise conv with history, rope, kv_write + paged_attention against dense
// attention (several sequences, block sizes, GQA ratios, KV dtypes), elementwise ops, argmax ties;
// and the determinism contract for attention (thread count, batch composition).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/reference_ops.h"
#include "tests/unit/kernels/cpu_isas.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace vv {
namespace {

using Isa = CpuBackendOptions::Isa;
using test::close;
using test::random_matrix;
using test::random_vec;

TEST(Ops, RmsNormMatchesReferenceInPlaceAndOutOfPlace) {
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int64_t C : {1, 5, 31, 48, 127, 3584}) {
        const int64_t R = 7;
        auto x = random_matrix(R, C, DType::kF32, 3 + C, 2.0f);
        auto wt = random_matrix(1, C, dt, 4);
        Tensor w = Tensor::vector(wt.bytes.data(), dt, C);
        std::vector<float> want(R * C);
        Tensor wt_out = Tensor::matrix(want.data(), DType::kF32, R, C);
        ref::rms_norm(x.view(), w, 1e-6f, wt_out);
        Tensor xv = x.view();
        be->rms_norm(xv, w, 1e-6f, xv);  // in place
        for (int64_t i = 0; i < R * C; ++i)
          ASSERT_TRUE(close(x.f32()[i], want[i], 2e-6, 1e-7)) << be->name() << " C " << C << " i " << i;
      }
  }
}

TEST(Ops, DepthwiseConvMatchesReferenceAcrossChannelSplits) {
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa, 3);
    for (auto [T, C, K] : std::vector<std::array<int64_t, 3>>{
             {1, 5, 7}, {13, 200, 7}, {40, 64, 3}, {9, 77, 7}, {3, 2048, 7}}) {
      auto x = random_matrix(T, C, DType::kF32, 1);
      auto hist = random_matrix(K - 1, C, DType::kF32, 2);
      auto w = random_matrix(C, K, DType::kBF16, 3);
      auto bias = random_vec(C, 4);
      std::vector<float> got(T * C), want(T * C);
      Tensor g = Tensor::matrix(got.data(), DType::kF32, T, C),
             wv = Tensor::matrix(want.data(), DType::kF32, T, C);
      Tensor b = Tensor::vector(bias.data(), DType::kF32, C);
      be->depthwise_conv1d_causal(x.view(), hist.view(), w.view(), b, g);
      ref::depthwise_conv1d_causal(x.view(), hist.view(), w.view(), b, wv);
      EXPECT_EQ(got, want) << be->name();
    }
  }
}

TEST(Ops, RopeMatchesFormulaInDouble) {
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    const int heads = 5, D = 128;
    const int64_t n = 6;
    auto x = random_matrix(n, heads * D, DType::kF32, 9);
    std::vector<float> orig(x.f32(), x.f32() + n * heads * D);
    std::vector<int32_t> pos = {0, 1, 2, 100, 1000, 31999};
    Tensor xt = x.view();
    be->rope(xt, Tensor::vector(pos.data(), DType::kI32, n), heads, D, 1e6f);
    for (int64_t r = 0; r < n; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < D / 2; ++i) {
          // The contract computes inv_freq and φ in f32; the double formula uses the same f32 φ.
          const float inv = 1.0f / std::pow(1e6f, static_cast<float>(2 * i) / static_cast<float>(D));
          const double phi = static_cast<float>(pos[r]) * inv;
          const double x1 = orig[r * heads * D + h * D + i], x2 = orig[r * heads * D + h * D + i + D / 2];
          ASSERT_TRUE(
              close(x.f32()[r * heads * D + h * D + i], x1 * std::cos(phi) - x2 * std::sin(phi), 1e-5, 1e-6));
          ASSERT_TRUE(close(x.f32()[r * heads * D + h * D + i + D / 2],
                            x2 * std::cos(phi) + x1 * std::sin(phi), 1e-5, 1e-6));
        }
  }
}

// Several sequences with scattered blocks; every row's k/v written, then attention for all rows
// (prefill rows and single decode rows mixed) compared with a dense double-precision softmax.
struct AttnCase {
  int heads, kv_heads, head_dim, block_size;
  std::vector<int> seq_len;  // rows per sequence (positions 0..len−1)
  DType kv_dtype;
};

void check_attention(Backend& be, const AttnCase& c) {
  const int S = static_cast<int>(c.seq_len.size());
  int max_len = 0, total = 0;
  for (int l : c.seq_len) max_len = std::max(max_len, l), total += l;
  const int bps = (max_len + c.block_size - 1) / c.block_size;
  const int num_blocks = S * bps + 3;
  std::vector<int32_t> table(S * bps);
  int stride = 7;  // a stride coprime to num_blocks scatters the blocks without collisions
  while (std::gcd(stride, num_blocks) != 1) ++stride;
  for (int i = 0; i < S * bps; ++i) table[i] = (i * stride + 3) % num_blocks;
  const int64_t width = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  const int64_t slots = static_cast<int64_t>(num_blocks) * c.block_size;
  std::vector<uint8_t> kc(slots * width * dtype_size(c.kv_dtype)), vc(kc.size());
  KvLayer cache{Tensor::matrix(kc.data(), c.kv_dtype, slots, width),
                Tensor::matrix(vc.data(), c.kv_dtype, slots, width)};
  auto q = random_matrix(total, c.heads * c.head_dim, DType::kF32, 1);
  auto k = random_matrix(total, width, DType::kF32, 2, 2.0f);
  auto v = random_matrix(total, width, DType::kF32, 3);
  std::vector<int32_t> seq, pos;
  for (int s = 0; s < S; ++s)
    for (int p = 0; p < c.seq_len[s]; ++p) seq.push_back(s), pos.push_back(p);
  AttentionRows rows{Tensor::vector(seq.data(), DType::kI32, total),
                     Tensor::vector(pos.data(), DType::kI32, total),
                     Tensor::matrix(table.data(), DType::kI32, S, bps), c.block_size};
  AttentionShape shape{c.heads, c.kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  be.kv_write(k.view(), v.view(), rows, cache, shape);
  std::vector<float> out(total * c.heads * c.head_dim);
  Tensor ot = Tensor::matrix(out.data(), DType::kF32, total, c.heads * c.head_dim);
  be.paged_attention(q.view(), rows, cache, shape, ot);
  auto stored = [&](const std::vector<uint8_t>& buf, int64_t slot, int64_t col) {
    return ref::load_as_f32(buf.data() + slot * width * dtype_size(c.kv_dtype), c.kv_dtype, col);
  };
  const int group = c.heads / c.kv_heads;
  for (int r = 0; r < total; ++r) {
    const int s = seq[r], L = pos[r] + 1;
    const int row0 = r - pos[r];
    for (int h = 0; h < c.heads; ++h) {
      const int g = h / group;
      std::vector<double> sc(L);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < L; ++j) {
        const int64_t slot = ref::kv_slot(rows, s, j);
        double d = 0;
        for (int e = 0; e < c.head_dim; ++e) {
          // the cache holds k/v rounded to its dtype: the written value is what k was
          ASSERT_TRUE(
              close(stored(kc, slot, g * c.head_dim + e), k.at(row0 + j, g * c.head_dim + e), 4e-3, 1e-7))
              << stored(kc, slot, g * c.head_dim + e) << " vs " << k.at(row0 + j, g * c.head_dim + e) << " "
              << dtype_name(c.kv_dtype);
          d += double(q.at(r, h * c.head_dim + e)) * stored(kc, slot, g * c.head_dim + e);
        }
        sc[j] = d * shape.scale;
        mx = std::max(mx, sc[j]);
      }
      for (int j = 0; j < L; ++j) sum += sc[j] = std::exp(sc[j] - mx);
      for (int e = 0; e < c.head_dim; ++e) {
        double o = 0;
        for (int j = 0; j < L; ++j)
          o += sc[j] / sum * stored(vc, ref::kv_slot(rows, s, j), g * c.head_dim + e);
        ASSERT_TRUE(close(out[(int64_t(r) * c.heads + h) * c.head_dim + e], o, 2e-5, 2e-6))
            << be.name() << " row " << r << " head " << h << " e " << e;
      }
    }
  }
}

TEST(Ops, PagedAttentionMatchesDenseAttentionOverSequencesBlocksAndGqa) {
  const std::vector<AttnCase> cases = {
      {4, 4, 8, 1, {5, 1, 3}, DType::kF32},
      {14, 2, 16, 4, {9, 2}, DType::kF32},
      {6, 3, 12, 16, {40, 17, 1}, DType::kBF16},
      {7, 1, 64, 16, {150}, DType::kF16},
      {28, 4, 128, 64, {70, 3}, DType::kBF16},
      {20, 1, 8, 4, {30, 2}, DType::kF32},  // a group larger than the AVX2 kernel's 16 heads at once
  };
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    for (const auto& c : cases) check_attention(*be, c);
  }
}

TEST(Ops, PagedAttentionRowIsBitwiseIndependentOfBatchAndThreads) {
  const int heads = 14, kv_heads = 2, D = 16, bs = 16, L = 200;
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[i] = 15 - i;
  std::vector<float> kc(256 * kv_heads * D), vc(kc.size());
  KvLayer cache{Tensor::matrix(kc.data(), DType::kF32, 256, kv_heads * D),
                Tensor::matrix(vc.data(), DType::kF32, 256, kv_heads * D)};
  auto q = random_matrix(L, heads * D, DType::kF32, 1);
  auto k = random_matrix(L, kv_heads * D, DType::kF32, 2);
  auto v = random_matrix(L, kv_heads * D, DType::kF32, 3);
  std::vector<int32_t> seq(L, 0), pos(L);
  for (int i = 0; i < L; ++i) pos[i] = i;
  AttentionRows rows{Tensor::vector(seq.data(), DType::kI32, L), Tensor::vector(pos.data(), DType::kI32, L),
                     Tensor::matrix(table.data(), DType::kI32, 1, 16), bs};
  AttentionShape shape{heads, kv_heads, D, 0.25f};
  for (Isa isa : test::cpu_isas()) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      auto be = test::cpu_backend(isa, threads);
      be->kv_write(k.view(), v.view(), rows, cache, shape);
      std::vector<float> out(L * heads * D);
      Tensor ot = Tensor::matrix(out.data(), DType::kF32, L, heads * D);
      be->paged_attention(q.view(), rows, cache, shape, ot);
      if (first.empty()) first = out;
      EXPECT_EQ(first, out) << be->name();
      // The last row alone (a decode step) equals the same row in the full batch.
      AttentionRows one = rows;
      one.row_seq = Tensor::vector(seq.data() + L - 1, DType::kI32, 1);
      one.row_pos = Tensor::vector(pos.data() + L - 1, DType::kI32, 1);
      std::vector<float> alone(heads * D);
      Tensor at = Tensor::matrix(alone.data(), DType::kF32, 1, heads * D);
      be->paged_attention(q.view().row_slice(L - 1, 1), one, cache, shape, at);
      EXPECT_EQ(0, std::memcmp(alone.data(), out.data() + (L - 1) * heads * D, alone.size() * 4))
          << be->name();
    }
  }
}

TEST(Ops, ElementwiseOpsMatchReference) {
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    const int64_t n = 9, I = 37;
    auto gu = random_matrix(n, 2 * I, DType::kF32, 5, 5.0f);
    std::vector<float> got(n * I), want(n * I);
    Tensor g = Tensor::matrix(got.data(), DType::kF32, n, I),
           w = Tensor::matrix(want.data(), DType::kF32, n, I);
    be->silu_mul(gu.view(), g);
    ref::silu_mul(gu.view(), w);
    for (int64_t i = 0; i < n * I; ++i) ASSERT_TRUE(close(got[i], want[i], 1e-6, 1e-7));
    auto x = random_matrix(n, I, DType::kF32, 6), y = random_matrix(n, I, DType::kF32, 7);
    auto sc = random_matrix(1, I, DType::kBF16, 8);
    auto x2 = x;
    Tensor xv = x.view(), x2v = x2.view();
    be->add_scaled(xv, Tensor::vector(sc.bytes.data(), DType::kBF16, I), y.view());
    ref::add_scaled(x2v, Tensor::vector(sc.bytes.data(), DType::kBF16, I), y.view());
    for (int64_t i = 0; i < n * I; ++i) ASSERT_TRUE(close(x.f32()[i], x2.f32()[i], 1e-6, 1e-7));
    be->add(x.view(), y.view(), xv);  // out aliases a
    for (int64_t i = 0; i < n * I; ++i) ASSERT_EQ(x.f32()[i], x2.f32()[i] + y.f32()[i]);
    // embedding from a bf16 table, and copy between different row strides
    auto table = random_matrix(50, I, DType::kBF16, 9);
    std::vector<int32_t> ids = {49, 0, 7, 7, 3, 1, 2, 48, 10};
    be->embedding(table.view(), Tensor::vector(ids.data(), DType::kI32, n), g);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < I; ++c) ASSERT_EQ(got[r * I + c], table.at(ids[r], c));
    std::vector<float> wide(n * 50, -1.0f);
    Tensor wd = Tensor::matrix(wide.data(), DType::kF32, n, I, 50);
    be->copy(g, wd);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < I; ++c) ASSERT_EQ(wide[r * 50 + c], got[r * I + c]);
      ASSERT_EQ(wide[r * 50 + I], -1.0f);
    }
  }
}

TEST(Ops, ArgmaxTiesGoToLowestIndexOnLargeRows) {
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    const int64_t V = 152064;
    std::vector<float> logits(3 * V, 0.0f);
    logits[0 * V + 100] = 5, logits[0 * V + 99999] = 5;      // tie: 100
    logits[1 * V + V - 1] = 1;                               // last
    for (int64_t i = 0; i < V; ++i) logits[2 * V + i] = -3;  // all equal: 0
    std::vector<int32_t> out(3);
    Tensor ot = Tensor::vector(out.data(), DType::kI32, 3);
    be->argmax(Tensor::matrix(logits.data(), DType::kF32, 3, V), ot);
    EXPECT_EQ(out, (std::vector<int32_t>{100, static_cast<int32_t>(V - 1), 0})) << be->name();
  }
}

// argmax_logprob against a double-precision log-softmax computed here: lengths of 1, odd, prime and the
// 7B's vocabulary, f32 and bf16 rows, rows with −inf and NaN entries, a row of −inf only; its ids are
// argmax's; a row's value does not depend on the rows beside it.
TEST(Ops, ArgmaxLogprobGivesTheLogSoftmaxAtTheArgmax) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : test::cpu_isas()) {
    auto be = test::cpu_backend(isa);
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int64_t V : {1, 7, 1000, 65537, 152064}) {
        const int64_t R = 5;
        std::vector<float> f(static_cast<size_t>(R * V));
        uint32_t st = static_cast<uint32_t>(V * 31 + R);
        for (float& x : f) {
          st = st * 1664525u + 1013904223u;
          x = (static_cast<float>(st >> 8) / 16777216.0f - 0.5f) * 12.0f;
        }
        if (V > 3) {
          f[1 * V + 2] = -kInf;          // row 1: a −inf entry
          f[2 * V + 1] = std::nanf("");  // row 2: a NaN (counts as −inf in the sum; wins argmax)
        }
        for (int64_t i = 0; i < V; ++i) f[3 * V + i] = -kInf;  // row 3: nothing finite
        // Rows as the dtype holds them (bf16: the rounded values), read back as f32 for the check.
        std::vector<uint16_t> h(f.size());
        for (size_t i = 0; i < f.size(); ++i) {
          uint32_t b;
          std::memcpy(&b, &f[i], 4);
          h[i] = static_cast<uint16_t>(std::isnan(f[i]) ? 0x7fc0 : (b + 0x7fff + ((b >> 16) & 1)) >> 16);
          if (dt == DType::kBF16) {
            const uint32_t w = static_cast<uint32_t>(h[i]) << 16;
            std::memcpy(&f[i], &w, 4);
          }
        }
        void* data = dt == DType::kF32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data());
        const Tensor l = Tensor::matrix(data, dt, R, V);
        std::vector<int32_t> ids(R, -7), want_ids(R);
        std::vector<float> lp(R, 1.0f);
        Tensor it = Tensor::vector(ids.data(), DType::kI32, R),
               lt = Tensor::vector(lp.data(), DType::kF32, R);
        Tensor wt = Tensor::vector(want_ids.data(), DType::kI32, R);
        be->argmax_logprob(l, it, lt);
        be->argmax(l, wt);
        const std::string what = be->name() + " " + dtype_name(dt) + " V=" + std::to_string(V);
        EXPECT_EQ(ids, want_ids) << what;
        for (int64_t r = 0; r < R; ++r) {
          const float* x = f.data() + r * V;
          double m = -kInf;
          for (int64_t i = 0; i < V; ++i) m = x[i] > m ? x[i] : m;
          const float xi = x[ids[r]];
          if (!(m > -kInf) || !(xi > -kInf)) {
            EXPECT_EQ(lp[r], -kInf) << what << " row " << r;
            continue;
          }
          double s = 0;
          for (int64_t i = 0; i < V; ++i) s += x[i] > -kInf ? std::exp(static_cast<double>(x[i]) - m) : 0.0;
          const double want = std::min(0.0, xi - m - std::log(s));
          EXPECT_NEAR(lp[r], want, 2e-6 * (1.0 + std::fabs(want))) << what << " row " << r;
          EXPECT_LE(lp[r], 0.0f) << what << " row " << r;
          // Alone: the same bits.
          std::vector<int32_t> id1(1);
          std::vector<float> lp1(1);
          Tensor i1 = Tensor::vector(id1.data(), DType::kI32, 1),
                 l1 = Tensor::vector(lp1.data(), DType::kF32, 1);
          be->argmax_logprob(l.row_slice(r, 1), i1, l1);
          EXPECT_EQ(id1[0], ids[r]) << what << " row " << r;
          EXPECT_EQ(std::memcmp(&lp1[0], &lp[r], 4), 0) << what << " row " << r << ": alone " << lp1[0];
        }
      }
  }
}

TEST(Backend, NameAllocateAndThreadOverride) {
  CpuBackendOptions o;
  o.threads = 3;
  o.isa = Isa::kScalar;
  auto be = make_cpu_backend(o);
  EXPECT_EQ(be->name(), "cpu-scalar (3 threads)");
  Buffer b = be->allocate(1000);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.bytes(), 1000u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<uint8_t*>(b.data())[i], 0);
  EXPECT_GE(physical_core_count(), 1);
}

}  // namespace
}  // namespace vv
