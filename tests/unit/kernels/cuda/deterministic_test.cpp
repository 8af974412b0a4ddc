// The CUDA backend's deterministic mode (BackendOptions::deterministic, `--deterministic`): a row's
// results must not depend on how many rows share its launch or where in the launch it sits, so a
// request gives the same bits alone and batched (issue 13's equivalence at the GPU's precision).
//  - GEMMs: every row count M (1 included: no GEMV kernel) and every row offset gives bitwise the
//    rows of one big launch, for f32 and bf16 compute, BF16/F16 weights, bias and residual
//    epilogues, odd, prime and production shapes; the big launch itself within the GEMM tests'
//    tolerance of the CPU reference.
//  - Attention (bf16): a decode row alone and beside a long prefill, a prefill chunk whole and in
//    pieces: bitwise the same rows (every call takes the flash kernel in deterministic mode).
//  - The runner: the tiny golden cases' greedy ids alone equal their ids in one batch, bf16 compute.
// Labelled gpu: skipped with the reason where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/runner/device_runner.h"
#include "kernels/cpu/reference_ops.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

Result<std::unique_ptr<Backend>> det_backend(bool bf16) {
  if (usable_gpu_count() == 0) return unsupported(gpu_unavailable_reason());
  BackendOptions o;
  o.gpu_bf16_gemm = bf16;
  o.deterministic = true;
  return make_backend("cuda:0", o);
}

#define VV_DET_BACKEND_OR_SKIP(var, bf16)                                             \
  auto var##_r = det_backend(bf16);                                                   \
  if (!var##_r.is_ok()) {                                                             \
    if (gpu_required()) FAIL() << "VV_REQUIRE_GPU=1: " << var##_r.status().message(); \
    GTEST_SKIP() << "no usable GPU: " << var##_r.status().message();                  \
  }                                                                                   \
  Backend& var = **var##_r;

struct DetGemmCase {
  int64_t N, K;
  DType wt;
  Epilogue ep;
  bool bias;
};

std::string det_case_name(const DetGemmCase& c, bool bf16) {
  return "N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " " + dtype_name(c.wt) +
         " ep=" + std::to_string(static_cast<int>(c.ep)) + (c.bias ? " bias" : "") +
         (bf16 ? " bf16-compute" : " f32-compute");
}

// Rows [first, first + m) of A through one launch; the output starts as the same residual rows.
std::vector<float> det_gemm_rows(Backend& be, const DetGemmCase& c, DeviceMatrix& a, DeviceMatrix& w,
                                 DeviceMatrix& b, HostMatrix& residual, int64_t first, int64_t m) {
  HostMatrix o = residual;
  DeviceMatrix dout = to_device(be, o);
  Tensor av = Tensor::matrix(static_cast<char*>(a.buf.data()) + first * c.K * 4, DType::kF32, m, c.K, c.K);
  Tensor ov = Tensor::matrix(static_cast<char*>(dout.buf.data()) + first * c.N * 4, DType::kF32, m, c.N, c.N);
  Tensor bv = Tensor::vector(b.buf.data(), DType::kF32, c.N);
  be.gemm(av, w.t, c.bias ? &bv : nullptr, ov, c.ep);
  return download_f32(be, ov);
}

void det_check_gemm(Backend& be, const DetGemmCase& c, bool bf16) {
  const int64_t kRows = 200;
  HostMatrix a = random_matrix(kRows, c.K, DType::kF32, 11);
  HostMatrix w = random_matrix(c.N, c.K, c.wt, 12, 1.0f / std::sqrt(static_cast<float>(c.K)));
  HostMatrix b = random_matrix(1, c.N, DType::kF32, 13, 0.1f);
  HostMatrix residual = random_matrix(kRows, c.N, DType::kF32, 14);
  DeviceMatrix da = to_device(be, a), dw = to_device(be, w), db = to_device(be, b);
  const std::string what = det_case_name(c, bf16);
  const std::vector<float> all = det_gemm_rows(be, c, da, dw, db, residual, 0, kRows);

  // The big launch against the reference (16-bit activations where the tensor-core path rounds them).
  HostMatrix ar = a;
  if (bf16 && c.wt != DType::kF32) {
    float* p = ar.f32();
    for (int64_t i = 0; i < kRows * c.K; ++i) {
      p[i] = c.wt == DType::kF16 ? f16_to_f32(cpu::f32_to_f16(p[i])) : bf16_to_f32(f32_to_bf16(p[i]));
      ar.f[i] = p[i];
    }
  }
  HostMatrix want = residual;
  Tensor wantv = Tensor::matrix(want.bytes.data(), DType::kF32, kRows, c.N, c.N);
  Tensor bv = Tensor::vector(b.bytes.data(), DType::kF32, c.N);
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  cpu->gemm(Tensor::matrix(ar.bytes.data(), DType::kF32, kRows, c.K, c.K), w.view(), c.bias ? &bv : nullptr,
            wantv, c.ep);
  expect_close(all, host_rows(wantv), 2e-5 * std::sqrt(static_cast<double>(c.K)), what);

  // Every row count, at the start and at an offset: bitwise the big launch's rows.
  for (int64_t m : {1, 2, 3, 7, 64, 129}) {
    for (int64_t first : {int64_t{0}, int64_t{5}}) {
      const std::vector<float> part = det_gemm_rows(be, c, da, dw, db, residual, first, m);
      ASSERT_EQ(part.size(), static_cast<size_t>(m * c.N));
      int64_t differ = 0;
      for (int64_t i = 0; i < m * c.N; ++i) {
        const float x = part[static_cast<size_t>(i)], y = all[static_cast<size_t>(first * c.N + i)];
        if (std::memcmp(&x, &y, sizeof x) != 0) ++differ;
      }
      EXPECT_EQ(differ, 0) << what << ": rows [" << first << ", " << first + m << ") alone differ in "
                           << differ << " of " << m * c.N << " values from the same rows of a " << kRows
                           << "-row launch";
    }
  }
}

class CudaDeterministic : public ::testing::TestWithParam<bool> {};

TEST_P(CudaDeterministic, GemmRowsDoNotDependOnTheRowCountOrOffset) {
  const bool bf16 = GetParam();
  VV_DET_BACKEND_OR_SKIP(be, bf16);
  const DetGemmCase cases[] = {
      {37, 64, DType::kBF16, Epilogue::kNone, true},               // odd
      {131, 257, DType::kBF16, Epilogue::kAddResidual, false},     // prime
      {509, 1031, DType::kF16, Epilogue::kNone, true},             // prime, f16 weights
      {4608, 3584, DType::kBF16, Epilogue::kNone, true},           // 7B q/k/v fused
      {3584, 18944, DType::kBF16, Epilogue::kAddResidual, false},  // 7B down projection
      {152064, 3584, DType::kBF16, Epilogue::kNone, false},        // 7B LM head (the first token's logits)
  };
  for (const DetGemmCase& c : cases) det_check_gemm(be, c, bf16);
}

// Attention, bf16 compute, 7B heads: a sequence's rows give the same bits whatever else shares the
// call. A decode row alone and beside a 300-row prefill (which alone would pick another kernel), and
// a prefill chunk in one call and in two halves, over a shuffled paged cache.
TEST(CudaDeterministicAttention, RowsDoNotDependOnTheRowsBesideThem) {
  VV_DET_BACKEND_OR_SKIP(be, true);
  const int heads = 28, kv_heads = 4, D = 128, bs = 16;
  const AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D))};
  // Sequences: 0 and 1 decode one row at positions 517 and 44; 2 prefills rows [96, 396).
  const int pos0 = 517, pos1 = 44, start2 = 96, len2 = 300;
  const int ends[3] = {pos0 + 1, pos1 + 1, start2 + len2};
  const int width_blocks =
      (ends[0] + bs - 1) / bs > (ends[2] + bs - 1) / bs ? (ends[0] + bs - 1) / bs : (ends[2] + bs - 1) / bs;
  int total_blocks = 0;
  for (int e : ends) total_blocks += (e + bs - 1) / bs;
  std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
  for (int i = 0; i < total_blocks; ++i) perm[static_cast<size_t>(i)] = (i * 37 + 11) % total_blocks;
  std::vector<int32_t> tables(static_cast<size_t>(3 * width_blocks), 0);
  int used = 0;
  for (int sq = 0; sq < 3; ++sq)
    for (int b = 0; b < (ends[sq] + bs - 1) / bs; ++b)
      tables[static_cast<size_t>(sq * width_blocks + b)] = perm[used++];
  const int64_t kvw = static_cast<int64_t>(kv_heads) * D, qw = static_cast<int64_t>(heads) * D;
  const int64_t slots = static_cast<int64_t>(total_blocks) * bs;
  HostMatrix kc = random_matrix(slots, kvw, DType::kBF16, 81),
             vc = random_matrix(slots, kvw, DType::kBF16, 82);
  DeviceMatrix dkc = to_device(be, kc), dvc = to_device(be, vc), dtab = to_device_i32(be, tables);
  const KvLayer cache{Tensor::matrix(dkc.buf.data(), DType::kBF16, slots, kvw),
                      Tensor::matrix(dvc.buf.data(), DType::kBF16, slots, kvw)};
  // All rows of the big call: seq 0's row, seq 1's row, then seq 2's chunk.
  std::vector<int32_t> seq_all = {0, 1}, pos_all = {pos0, pos1};
  for (int p = start2; p < start2 + len2; ++p) seq_all.push_back(2), pos_all.push_back(p);
  const int64_t n = static_cast<int64_t>(seq_all.size());
  HostMatrix q = random_matrix(n, qw, DType::kF32, 83, 2.0f);
  DeviceMatrix dq = to_device(be, q);
  // Attention over rows [first, first + m) of the big call's rows.
  auto attend = [&](int64_t first, int64_t m) {
    std::vector<int32_t> sq(seq_all.begin() + first, seq_all.begin() + first + m);
    std::vector<int32_t> ps(pos_all.begin() + first, pos_all.begin() + first + m);
    DeviceMatrix ds = to_device_i32(be, sq), dp = to_device_i32(be, ps);
    AttentionRows rows;
    rows.row_seq = ds.t;
    rows.row_pos = dp.t;
    rows.block_tables = Tensor::matrix(dtab.buf.data(), DType::kI32, 3, width_blocks);
    rows.block_size = bs;
    Tensor qv = Tensor::matrix(static_cast<char*>(dq.buf.data()) + first * qw * 4, DType::kF32, m, qw, qw);
    DeviceMatrix out = poisoned(be, m, qw);
    be.paged_attention(qv, rows, cache, shape, out.t);
    return download_f32(be, out.t);
  };
  auto differ = [](const std::vector<float>& a, const std::vector<float>& b, size_t at) {
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[at + i], sizeof(float)) != 0;
    return d;
  };
  const std::vector<float> all = attend(0, n);
  EXPECT_EQ(differ(attend(0, 1), all, 0), 0) << "decode row alone vs beside a 300-row prefill";
  EXPECT_EQ(differ(attend(0, 2), all, 0), 0) << "two decode rows vs the big call";
  EXPECT_EQ(differ(attend(2, 150), all, static_cast<size_t>(2 * qw)), 0) << "first half of the chunk";
  EXPECT_EQ(differ(attend(152, 150), all, static_cast<size_t>(152 * qw)), 0) << "second half of the chunk";
  EXPECT_EQ(differ(attend(151, 3), all, static_cast<size_t>(151 * qw)), 0) << "three rows mid-chunk";
  // And the big call is attention: the CPU reference on the same bf16-rounded q and cache, within
  // the flash kernel's tolerance (prefill_attention_test.cpp: P rounded to bf16 for P·V).
  AttentionRows hrows;
  hrows.row_seq = Tensor::vector(seq_all.data(), DType::kI32, n);
  hrows.row_pos = Tensor::vector(pos_all.data(), DType::kI32, n);
  hrows.block_tables = Tensor::matrix(tables.data(), DType::kI32, 3, width_blocks);
  hrows.block_size = bs;
  HostMatrix qr = bf16_rounded_f32(q), kr = bf16_rounded_f32(kc), vr = bf16_rounded_f32(vc);
  HostMatrix want = random_matrix(n, qw, DType::kF32, 84);
  Tensor want_t = want.view();
  parallel_ranges(shape.heads, [&](int64_t h0, int64_t h1) {
    ref::paged_attention(qr.view(), hrows, KvLayer{kr.view(), vr.view()}, shape, want_t, static_cast<int>(h0),
                         static_cast<int>(h1));
  });
  expect_close(all, host_rows(want_t), 4e-3, "deterministic attention, 2 decode rows + a 300-row chunk", 1.0);
}

INSTANTIATE_TEST_SUITE_P(Compute, CudaDeterministic, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Bf16" : "F32"; });

RunnerOptions deterministic_runner_options() {
  RunnerOptions ro;
  ro.kv_positions = 8192;
  ro.max_rows = 512;
  ro.max_seqs = 8;
  ro.prefill_chunk = 100;
  return ro;
}

BackendOptions deterministic_bf16() {
  BackendOptions bo;
  bo.gpu_bf16_gemm = true;
  bo.deterministic = true;
  return bo;
}

// The first `most` golden cases with their input values, encoded on `r`.
void encode_golden_cases(Runner& r, size_t most, std::vector<GoldenCase>* cases,
                         std::vector<SpeechRows>* speech) {
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    if (!gc.ok() || !gc.has("input_values") || cases->size() == most) continue;
    const std::vector<float>& x = gc.tensor("input_values").data;
    auto s = r.encode(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    speech->push_back(std::move(*s));
    cases->push_back(std::move(gc));
  }
}

TEST(CudaDeterministicRunner, GoldenIdsAloneEqualTheirIdsInOneBatch) {
  VV_GPU_OR_SKIP();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_runner(**ckpt, deterministic_runner_options(), "cuda:0", deterministic_bf16());
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  Runner& r = **runner;
  std::vector<GoldenCase> cases;
  std::vector<SpeechRows> speech;
  ASSERT_NO_FATAL_FAILURE(encode_golden_cases(r, 4, &cases, &speech));
  ASSERT_GE(cases.size(), 2u);
  std::vector<GreedyRequest> reqs(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    reqs[i].prompt = cases[i].prompt_ids();
    reqs[i].speech = &speech[i].rows.t;
    reqs[i].max_new_tokens = 24;
  }
  auto batch = r.generate_greedy(reqs);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  for (size_t i = 0; i < cases.size(); ++i) {
    auto alone = r.generate_greedy(reqs[i]);
    ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
    EXPECT_EQ(*alone, (*batch)[i]) << cases[i].name() << ": alone vs in a batch of " << cases.size();
  }
}

// RunnerOptions::decode_pad (on by default on CUDA): decode steps of 3 sequences run as 4 rows, the
// fourth a padding row. Deterministic mode's rows do not depend on the rows beside them, so the ids
// equal those of the same runner options with padding off, as the sequences finish one by one.
TEST(CudaDeterministicRunner, PaddedDecodeStepsGiveTheUnpaddedIds) {
  VV_GPU_OR_SKIP();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions ro = deterministic_runner_options();
  std::vector<std::vector<TokenId>> ids[2];
  for (int pad : {-1, 0}) {
    ro.decode_pad = pad;
    auto runner = make_runner(**ckpt, ro, "cuda:0", deterministic_bf16());
    ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
    Runner& r = **runner;
    EXPECT_EQ(r.decode_pad(), pad < 0 ? 8 : 0);
    std::vector<GoldenCase> cases;
    std::vector<SpeechRows> speech;
    ASSERT_NO_FATAL_FAILURE(encode_golden_cases(r, 3, &cases, &speech));
    ASSERT_EQ(cases.size(), 3u);
    std::vector<GreedyRequest> reqs(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      reqs[i].prompt = cases[i].prompt_ids();
      reqs[i].speech = &speech[i].rows.t;
      reqs[i].max_new_tokens = 24 - 6 * static_cast<int>(i);  // 3 decoding rows, then 2, then 1
    }
    auto batch = r.generate_greedy(reqs);
    ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
    ids[pad < 0 ? 0 : 1] = std::move(*batch);
    EXPECT_EQ(r.kv().free_blocks(), r.kv().num_blocks()) << "every block is back";
  }
  ASSERT_EQ(ids[0].size(), 3u);
  for (size_t i = 0; i < ids[0].size(); ++i) EXPECT_EQ(ids[0][i], ids[1][i]) << "sequence " << i;
}

}  // namespace
}  // namespace vv::test
