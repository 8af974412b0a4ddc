// The tensor-core decode attention (bf16 mode, decode_ops.cu: mma_decode_kernel, the default, and
// mma_decode_stream_kernel, VV_CUDA_MMA_DECODE=stream) against the CPU's scalar reference: one
// row per sequence over a shuffled paged cache, rows 1, 2, 3, 5, 7, 13, 64 and 128, lengths 1, 17,
// 63, 64, 65, 600 and 1,031 (one and several 64-key units, a unit boundary ±1) and primes, GQA
// groups of 1, 4, 7 and 8, head_dim 64 and 128, bf16 and f16 caches, block sizes 16 and 32 (a
// 16-key step within one block) and 8 and 24 (steps across blocks), and a block table wider than
// any row needs (as the decoder pads it), rows of up to 4,093 keys (more than 32 units) and a table
// wider than 16,384 keys; the stream kernel also with 4 stages, 1 and 2 warps per block and 128-
// and 256-key units. Then batch invariance: a row's output is bit for bit the same alone, in
// a batch of 2 and in a batch of 64, for each kernel.
//
// Tolerance (as the flash prefill's test): the kernel rounds q, the cached k/v and the softmax
// weights P to bf16 (f32 scores, softmax and sums). The reference gets the same bf16-rounded q and
// k/v, so what remains is P's rounding (2^-9 relative per weight) of a convex combination of V
// rows (|v| ≤ 1), plus f32 order effects: 4e-3 of max(|ref|, 1).
#include "kernels/cuda/decode_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/reference_ops.h"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/prefill_attention.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

constexpr int kH200Sms = 132;

// A decode step: row i attends positions 0..lens[i]−1 of its own sequence (row_pos = lens[i] − 1)
// through a block table `extra` blocks wider than the longest row needs.
struct Step {
  int heads, kv_heads, D;
  DType kv_dtype;
  int bs;
  std::vector<int> lens;
  int extra = 3;
  float q_scale = 2.0f;
};

struct StepData {
  int64_t n = 0, width = 0, qw = 0, slots = 0;
  int max_blocks = 0;
  std::vector<int32_t> tables, row_seq, row_pos;
  HostMatrix kc, vc, q;
};

StepData make_step(const Step& st, uint32_t seed) {
  StepData d;
  d.n = static_cast<int64_t>(st.lens.size());
  int total = 0;
  for (int L : st.lens) {
    d.max_blocks = std::max(d.max_blocks, (L + st.bs - 1) / st.bs);
    total += (L + st.bs - 1) / st.bs;
  }
  d.max_blocks += st.extra;
  std::vector<int32_t> perm(total + 5);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  d.tables.assign(static_cast<size_t>(d.n) * d.max_blocks, 0);
  int used = 0;
  for (int64_t s = 0; s < d.n; ++s) {
    for (int b = 0; b < (st.lens[s] + st.bs - 1) / st.bs; ++b) d.tables[s * d.max_blocks + b] = perm[used++];
    d.row_seq.push_back(static_cast<int32_t>(s));
    d.row_pos.push_back(st.lens[s] - 1);
  }
  d.width = static_cast<int64_t>(st.kv_heads) * st.D;
  d.qw = static_cast<int64_t>(st.heads) * st.D;
  d.slots = static_cast<int64_t>(total + 5) * st.bs;
  d.kc = random_matrix(d.slots, d.width, st.kv_dtype, seed + 1);
  d.vc = random_matrix(d.slots, d.width, st.kv_dtype, seed + 2);
  d.q = random_matrix(d.n, d.qw, DType::kF32, seed + 3, st.q_scale);
  return d;
}

// The backend with the tensor-core kernel for every row count: with the register kernel its default
// (VV_CUDA_DECODE_ATTN=auto) takes the SIMT kernel for one-row steps, which the one-row cases here
// would then test instead.
std::unique_ptr<Backend> mma_backend() {
  ::setenv("VV_CUDA_DECODE_ATTN", "mma", 1);
  BackendOptions opt;
  opt.gpu_bf16_gemm = true;
  auto be = make_backend("cuda:0", opt);
  ::unsetenv("VV_CUDA_DECODE_ATTN");
  return be.is_ok() ? std::move(be).value() : nullptr;
}

// The tensor-core kernel's variant for a scope (decode_attention.h); the previous one after it.
struct MmaVariant {
  cuda::MmaDecodeConfig saved = cuda::mma_decode_config();
  explicit MmaVariant(const cuda::MmaDecodeConfig& c) { cuda::set_mma_decode_config(c); }
  ~MmaVariant() { cuda::set_mma_decode_config(saved); }
  MmaVariant(const MmaVariant&) = delete;
  MmaVariant& operator=(const MmaVariant&) = delete;
};
cuda::MmaDecodeConfig stream_kernel(int stages = 2, int warps = 4, int chunk = cuda::kMmaDecodeChunk) {
  cuda::MmaDecodeConfig c{true, stages, warps, chunk};
  c.share = false;  // a unit a warp
  return c;
}
// The stream kernel with a unit's steps spread over the block's warps (MmaDecodeConfig::share), at every
// row count.
cuda::MmaDecodeConfig shared_units(int stages, int warps, int chunk) {
  cuda::MmaDecodeConfig c = stream_kernel(stages, warps, chunk);
  c.share = true;
  c.share_min_pairs = 0;
  return c;
}
cuda::MmaDecodeConfig register_kernel() {
  return cuda::MmaDecodeConfig{false, 2, 4, cuda::kMmaDecodeChunk};
}
std::string describe(const cuda::MmaDecodeConfig& c) {
  std::ostringstream w;
  if (c.stream) {
    w << "stream kernel, " << c.stages << " stages, " << c.warps << " warps, " << c.chunk << "-key units"
      << (c.heads ? ", the kv heads of a unit in one block" : "")
      << (c.share ? ", a unit's steps over the block's warps" : "");
  } else {
    w << "register kernel, " << c.chunk << "-key units";
  }
  return w.str();
}

AttentionShape shape_of(const Step& st) {
  return AttentionShape{st.heads, st.kv_heads, st.D, 1.0f / std::sqrt(static_cast<float>(st.D))};
}

// The GPU's output for rows `pick` of the step (each with its own table row, the first `width`
// blocks of it; all by default), [pick.size(), qw].
std::vector<float> run_gpu(Backend& gpu, const Step& st, StepData& d, const std::vector<int>& pick,
                           int width = -1) {
  const int64_t n = static_cast<int64_t>(pick.size());
  if (width < 0) width = d.max_blocks;
  std::vector<int32_t> tables, row_seq, row_pos;
  for (int64_t i = 0; i < n; ++i) {
    const int s = pick[i];
    tables.insert(tables.end(), d.tables.begin() + static_cast<int64_t>(s) * d.max_blocks,
                  d.tables.begin() + static_cast<int64_t>(s) * d.max_blocks + width);
    row_seq.push_back(static_cast<int32_t>(i));
    row_pos.push_back(d.row_pos[s]);
  }
  HostMatrix q = random_matrix(n, d.qw, DType::kF32, 1);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(q.bytes.data() + i * d.qw * 4, d.q.bytes.data() + static_cast<int64_t>(pick[i]) * d.qw * 4,
                static_cast<size_t>(d.qw) * 4);
  DeviceMatrix dkc = to_device(gpu, d.kc), dvc = to_device(gpu, d.vc), dtab = to_device_i32(gpu, tables);
  DeviceMatrix dq = to_device(gpu, q), ds = to_device_i32(gpu, row_seq), dp = to_device_i32(gpu, row_pos);
  AttentionRows rows;
  rows.row_seq = ds.t;
  rows.row_pos = dp.t;
  rows.block_tables = Tensor::matrix(dtab.buf.data(), DType::kI32, n, width);
  rows.block_size = st.bs;
  KvLayer cache{Tensor::matrix(dkc.buf.data(), st.kv_dtype, d.slots, d.width),
                Tensor::matrix(dvc.buf.data(), st.kv_dtype, d.slots, d.width)};
  DeviceMatrix dout = poisoned(gpu, n, d.qw);
  gpu.paged_attention(dq.t, rows, cache, shape_of(st), dout.t);
  return download_f32(gpu, dout.t);
}

std::string describe(const Step& st) {
  std::ostringstream w;
  w << "decode attention " << st.heads << "/" << st.kv_heads << "x" << st.D << " " << dtype_name(st.kv_dtype)
    << " bs " << st.bs << ", " << st.lens.size() << " rows";
  if (st.lens.size() <= 8)
    for (int L : st.lens) w << " " << L;
  return w.str();
}

void check_step(Backend& gpu, const Step& st, uint32_t seed) {
  const int64_t n = static_cast<int64_t>(st.lens.size());
  ASSERT_TRUE(cuda::mma_decode_applies(st.heads, st.kv_heads, st.D)) << describe(st);
  ASSERT_FALSE(cuda::flash_prefill_applies(n, st.heads, st.kv_heads, st.D, kH200Sms))
      << describe(st) << " would reach the flash prefill kernel";
  StepData d = make_step(st, seed);
  HostMatrix qr = bf16_rounded_f32(d.q), kr = bf16_rounded_f32(d.kc), vr = bf16_rounded_f32(d.vc);
  AttentionRows rows;
  rows.row_seq = Tensor::vector(d.row_seq.data(), DType::kI32, n);
  rows.row_pos = Tensor::vector(d.row_pos.data(), DType::kI32, n);
  rows.block_tables = Tensor::matrix(d.tables.data(), DType::kI32, n, d.max_blocks);
  rows.block_size = st.bs;
  HostMatrix want = random_matrix(n, d.qw, DType::kF32, 9);
  Tensor want_t = want.view();
  ref::paged_attention(qr.view(), rows, KvLayer{kr.view(), vr.view()}, shape_of(st), want_t);
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  expect_close(run_gpu(gpu, st, d, all), host_rows(want_t), 4e-3,
               describe(st) + ", " + describe(cuda::mma_decode_config()), 1.0);
}

TEST(CudaDecodeAttention, ProductionShapeSixtyFourAndOneTwentyEightRows) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  const std::vector<int> pattern = {1, 17, 63, 64, 65, 600, 1031, 599, 601, 640, 128, 129, 300};
  for (const cuda::MmaDecodeConfig& k : {stream_kernel(), shared_units(2, 4, 512), register_kernel()}) {
    MmaVariant v(k);
    for (int n : {64, 128}) {
      Step st{28, 4, 128, DType::kBF16, 16, {}};
      for (int i = 0; i < n; ++i) st.lens.push_back(pattern[i % pattern.size()] + (i / 13) * 7 % 40);
      check_step(*gpu, st, 100 + n);
    }
  }
}

// The stream kernel's shapes (2 and 4 stages: with 4 a 64-key unit's copies are all in flight at
// once; 1, 2 and 4 warps per block; 128- and 256-key units, whose steps refill the stages) and block
// sizes that split a 16-key step across blocks, at odd and prime row counts and lengths.
TEST(CudaDecodeAttention, StreamKernelStagesWarpsUnitsAndBlockSizes) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  const std::vector<int> primes = {2, 3, 31, 97, 257, 509, 1021, 1031, 13, 61, 67, 127, 131};
  for (const cuda::MmaDecodeConfig& k :
       {stream_kernel(), stream_kernel(4), stream_kernel(2, 1), stream_kernel(4, 2), stream_kernel(2, 4, 128),
        stream_kernel(4, 1, 256), shared_units(2, 4, 512), shared_units(2, 4, 1024), shared_units(4, 2, 256),
        shared_units(2, 4, 64), shared_units(2, 1, 128), stream_kernel(2, 2, 1024)}) {
    MmaVariant v(k);
    Step st{28, 4, 128, DType::kBF16, 16, {}};
    for (int i = 0; i < 13; ++i) st.lens.push_back(primes[i]);
    check_step(*gpu, st, 41);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 8, {1, 16, 17, 33, 600, 1031, 97}}, 42);
    check_step(*gpu, {14, 2, 64, DType::kF16, 24, {5, 23, 24, 25, 257, 1021}}, 43);
  }
  MmaVariant v(register_kernel());  // the register kernel at the block sizes that split a step
  check_step(*gpu, {28, 4, 128, DType::kBF16, 8, {1, 16, 17, 33, 600, 1031, 97}}, 44);
  check_step(*gpu, {28, 4, 128, DType::kF16, 24, {5, 23, 24, 25, 257, 1021}}, 45);
  check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {509, 2, 1021, 3, 97}}, 46);
}

// VV_CUDA_MMA_DECODE_HEADS=1: the stream kernel's blocks take every kv head of the same keys (4 warps:
// 4 / kv_heads units of each head), reading whole cache rows together. Which warp computes a (row, kv
// head, unit) does not change its arithmetic: the outputs must be the bits of the default mapping, at
// 4, 2 and 1 kv heads, and at 8 (more than a block's 4 warps: the default mapping then runs), with 2
// and 4 stages, and near the reference.
TEST(CudaDecodeAttention, KvHeadsOfTheSameKeysInOneBlockGiveTheSameBits) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  const std::vector<Step> steps = {
      {28, 4, 128, DType::kBF16, 16, {1, 17, 63, 64, 65, 600, 1031, 599, 601, 640, 128, 129, 300}},
      {14, 2, 64, DType::kF16, 24, {5, 23, 24, 25, 257, 1021}},
      {8, 1, 128, DType::kBF16, 8, {1, 16, 33, 600, 97}},
      {32, 8, 128, DType::kBF16, 16, {97, 600, 2}}};
  uint32_t seed = 61;
  for (const Step& st : steps) {
    StepData d = make_step(st, seed);
    std::vector<int> all(st.lens.size());
    std::iota(all.begin(), all.end(), 0);
    std::vector<float> base;
    {
      MmaVariant v(stream_kernel(2, 2));
      base = run_gpu(*gpu, st, d, all);
    }
    for (int stages : {2, 4}) {
      cuda::MmaDecodeConfig c = stream_kernel(stages, 2);
      c.heads = true;
      MmaVariant v(c);
      EXPECT_EQ(run_gpu(*gpu, st, d, all), base)
          << describe(st) << ", " << stages << " stages: the kv heads in one block changed a bit";
      check_step(*gpu, st, seed);
    }
    // Shared units take no heads mapping: asking for both runs the shared units alone.
    cuda::MmaDecodeConfig c = shared_units(2, 4, 512);
    std::vector<float> shared;
    {
      MmaVariant v(c);
      shared = run_gpu(*gpu, st, d, all);
    }
    c.heads = true;
    MmaVariant v(c);
    EXPECT_EQ(run_gpu(*gpu, st, d, all), shared) << describe(st) << ": heads changed the shared units' bits";
    ++seed;
  }
}

// MmaDecodeConfig::share_min_pairs: a step with fewer (row, kv head) pairs than the bound runs a unit a
// warp of 64 keys (the bits of that form), one with as many or more the shared units (their bits).
TEST(CudaDecodeAttention, SharedUnitsFromACountOfPairsOnly) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  const std::vector<int> lens = {1, 17, 600, 1031, 63, 64, 65};  // 7 rows × 4 kv heads = 28 pairs
  const Step st{28, 4, 128, DType::kBF16, 16, lens};
  StepData d = make_step(st, 71);
  const std::vector<int> five = {0, 1, 2, 3, 4}, seven = {0, 1, 2, 3, 4, 5, 6};
  std::vector<float> unit_warp5, shared5, shared7;
  {
    MmaVariant v(stream_kernel(2, 2, cuda::kMmaDecodeChunk));
    unit_warp5 = run_gpu(*gpu, st, d, five);
  }
  {
    MmaVariant v(shared_units(2, 2, cuda::kMmaDecodeShareChunk));
    shared5 = run_gpu(*gpu, st, d, five);
    shared7 = run_gpu(*gpu, st, d, seven);
  }
  ASSERT_NE(unit_warp5, shared5) << "the two forms gave the same bits: the test cannot tell them apart";
  cuda::MmaDecodeConfig c = shared_units(2, 2, cuda::kMmaDecodeShareChunk);
  c.share_min_pairs = 24;
  MmaVariant v(c);
  EXPECT_EQ(run_gpu(*gpu, st, d, five), unit_warp5) << "20 pairs, below 24: not a unit a warp";
  EXPECT_EQ(run_gpu(*gpu, st, d, seven), shared7) << "28 pairs: not the shared units";
  Step five_rows = st;
  five_rows.lens.resize(5);
  check_step(*gpu, five_rows, 72);
  check_step(*gpu, st, 73);
}

// The plan behind it (host code, no device needed): below share_min_pairs a unit a warp of 64 keys,
// from it the shared units of the configured chunk; a row-invariant plan (deterministic mode) keeps the
// shared units at every row count; share_min_pairs 0 never changes the form. The default bound is 256
// pairs (64 rows at 4 kv heads).
TEST(CudaDecodeAttentionPlan, SharedUnitsFromACountOfPairsOnlyOutsideDeterministicMode) {
  std::vector<int32_t> table(64 * 40, 0);
  AttentionRows rows;
  rows.block_size = 16;
  const AttentionShape shape{28, 4, 128, 1.0f / std::sqrt(128.0f)};
  auto plan = [&](int64_t n, bool invariant) {
    rows.block_tables = Tensor::matrix(table.data(), DType::kI32, n, 40);  // 640 keys of width
    return cuda::plan_mma_decode_attention(n, rows, shape, invariant);
  };
  cuda::MmaDecodeConfig c = shared_units(2, 2, cuda::kMmaDecodeShareChunk);
  {
    MmaVariant v(c);
    for (int64_t n : {1, 5, 8})
      for (bool inv : {false, true}) {
        const cuda::MmaDecodePlan p = plan(n, inv);
        EXPECT_TRUE(p.use && p.share) << n << " rows, share_min_pairs 0";
        EXPECT_EQ(p.chunk, cuda::kMmaDecodeShareChunk) << n << " rows";
        EXPECT_EQ(p.splits, 2) << n << " rows: 640 keys in 512-key units";
      }
  }
  {
    MmaVariant v(cuda::MmaDecodeConfig{});
    EXPECT_FALSE(plan(63, false).share) << "the default at 252 pairs";
    EXPECT_EQ(plan(63, false).chunk, cuda::kMmaDecodeChunk);
    EXPECT_TRUE(plan(64, false).share) << "the default at 256 pairs";
    EXPECT_TRUE(plan(8, true).share) << "the default's row-invariant plan";
  }
  c.share_min_pairs = 24;
  MmaVariant v(c);
  const cuda::MmaDecodePlan low = plan(5, false), high = plan(6, false), det = plan(5, true);
  EXPECT_TRUE(low.use && !low.share) << "20 pairs";
  EXPECT_EQ(low.chunk, cuda::kMmaDecodeChunk);
  EXPECT_EQ(low.splits, 10) << "640 keys in 64-key units";
  EXPECT_TRUE(high.use && high.share) << "24 pairs";
  EXPECT_EQ(high.chunk, cuda::kMmaDecodeShareChunk);
  EXPECT_TRUE(det.use && det.share) << "row-invariant plan at 20 pairs";
  EXPECT_EQ(det.chunk, cuda::kMmaDecodeShareChunk);
}

// Long rows: more than 32 units to merge (the merge's lanes take several units each), and a table
// wider than 256 units (16,384 keys at 64-key units, 131,072 at the default's 512: the units widen to
// bound the workspace), with both kernels and the default form (a unit a warp at these 3 rows' 12 pairs).
TEST(CudaDecodeAttention, ManyUnitsAndVeryWideTables) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  for (const cuda::MmaDecodeConfig& k : {stream_kernel(), stream_kernel(4, 1), shared_units(2, 4, 512),
                                         cuda::MmaDecodeConfig{}, register_kernel()}) {
    MmaVariant v(k);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {2100, 4093, 65}}, 51);
    Step wide{28, 4, 128, DType::kBF16, 16, {600, 5, 2049}};
    wide.extra = 1040;  // (129 + 1040) blocks of 16 = 18,704 keys of table width
    check_step(*gpu, wide, 52);
    if (k.stream && k.chunk >= 512) {
      wide.extra = 8300;  // (129 + 8,300) blocks of 16 = 134,864 keys: 576-key units
      check_step(*gpu, wide, 53);
    }
  }
}

TEST(CudaDecodeAttention, FewRowsOddAndPrimeLengths) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  for (const cuda::MmaDecodeConfig& k : {stream_kernel(), register_kernel()}) {
    MmaVariant v(k);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {1031}}, 11);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {1}}, 12);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {64, 65}}, 13);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 32, {17, 1031, 63}}, 14);
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {1, 17, 63, 64, 65, 600, 1031}, 9, 8.0f}, 15);  // peaky
    check_step(*gpu, {28, 4, 128, DType::kBF16, 16, {2, 3, 5, 7, 11}}, 16);
  }
}

TEST(CudaDecodeAttention, GroupsOfOneFourSevenEightHeadDimsAndCacheDtypes) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  for (const cuda::MmaDecodeConfig& k : {stream_kernel(), shared_units(2, 4, 512), register_kernel()}) {
    MmaVariant v(k);
    check_step(*gpu, {8, 8, 128, DType::kF16, 16, {1, 65, 1031}}, 21);                    // G = 1
    check_step(*gpu, {16, 4, 64, DType::kBF16, 16, {1, 17, 63, 64, 65, 600, 1031}}, 22);  // G = 4, D = 64
    check_step(*gpu, {14, 2, 64, DType::kF16, 32, {600, 1, 17, 63, 64, 65, 1031}}, 23);   // G = 7, D = 64
    check_step(*gpu, {16, 2, 128, DType::kBF16, 16, {63, 1031}}, 24);                     // G = 8
    Step st{14, 2, 64, DType::kBF16, 16, {}};
    for (int i = 0; i < 128; ++i) st.lens.push_back(1 + (i * 37) % 700);
    check_step(*gpu, st, 25);
  }
}

// The same rows alone (with a table as wide as the batch's, and as narrow as the row allows), in a
// batch of 2 and in the batch of 64 give the same bits (issue 13: a request's ids do not depend on
// what else shares its steps), with each kernel and block shape.
TEST(CudaDecodeAttention, RowResultsDoNotDependOnTheOtherRows) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> gpu = mma_backend();
  ASSERT_NE(gpu, nullptr);
  Step st{28, 4, 128, DType::kBF16, 16, {}};
  for (int i = 0; i < 64; ++i) st.lens.push_back(1 + (i * 53) % 1100);
  st.extra = 20;  // a table much wider than any row: more units launched than any row uses
  StepData d = make_step(st, 31);
  std::vector<int> all(64);
  std::iota(all.begin(), all.end(), 0);
  const int64_t qw = d.qw;
  for (const cuda::MmaDecodeConfig& k :
       {stream_kernel(), stream_kernel(4, 1), shared_units(2, 4, 512), register_kernel()}) {
    MmaVariant v(k);
    const std::vector<float> batch = run_gpu(*gpu, st, d, all);
    for (int r : {0, 5, 21, 63}) {
      const std::vector<float> alone = run_gpu(*gpu, st, d, {r});
      const std::vector<float> narrow = run_gpu(*gpu, st, d, {r}, (st.lens[r] + st.bs - 1) / st.bs);
      const std::vector<float> pair = run_gpu(*gpu, st, d, {(r + 1) % 64, r});
      EXPECT_EQ(std::memcmp(alone.data(), batch.data() + r * qw, static_cast<size_t>(qw) * 4), 0)
          << "row " << r << " (length " << st.lens[r] << ") alone differs from the batch of 64, "
          << describe(k);
      EXPECT_EQ(std::memcmp(narrow.data(), batch.data() + r * qw, static_cast<size_t>(qw) * 4), 0)
          << "row " << r << " (length " << st.lens[r]
          << ") alone with a narrow table differs from the batch, " << describe(k);
      EXPECT_EQ(std::memcmp(pair.data() + qw, batch.data() + r * qw, static_cast<size_t>(qw) * 4), 0)
          << "row " << r << " (length " << st.lens[r] << ") in a batch of 2 differs from the batch of 64, "
          << describe(k);
    }
  }
}

// The SIMT kernel's one-wave plan (host only): for one row, whole 64-key rounds a split, as few splits as
// keep the kv heads' blocks within the SMs, no longer than the shared memory allows; more rows keep the
// 64-key splits. The 7B's 4 kv heads of 7 query heads on 132 SMs.
TEST(CudaDecodeAttentionPlan, OneWaveSplitsWithinTheSmsAndTheSharedMemory) {
  std::vector<int32_t> table(64 * 1251, 0);
  AttentionRows rows;
  rows.block_size = 16;
  const AttentionShape shape{28, 4, 128, 1.0f / std::sqrt(128.0f)};
  auto plan = [&](int64_t n, int64_t blocks, bool wave, size_t smem = 48 * 1024, int sms = 132) {
    rows.block_tables = Tensor::matrix(table.data(), DType::kI32, n, blocks);
    return cuda::plan_decode_attention(n, rows, shape, sms, wave, smem);
  };
  struct Case {
    int64_t n, blocks;  // rows, the table's width in blocks of 16 keys
    size_t smem;
    int sms, chunk, splits, chunk_without, splits_without;
  };
  for (const Case& c : std::vector<Case>{
           {1, 84, 48 * 1024, 132, 64, 21, 64, 21},        // 1,344 keys: as without
           {1, 273, 48 * 1024, 132, 192, 23, 64, 69},      // 4,368 keys: 133 a pair, in rounds of 64
           {1, 1251, 227 * 1024, 132, 640, 32, 128, 157},  // 20,016 keys with 227 KB a block
           {1, 1251, 48 * 1024, 132, 448, 45, 128, 157},   // with 48 KB: 640 keys would need 54 KB
           {2, 273, 48 * 1024, 132, 64, 69, 64, 69},       // two rows: as without
           {1, 273, 48 * 1024, 3, 64, 69, 64, 69},         // fewer SMs than kv heads: as without
           {1, 273, 48 * 1024, 0, 64, 69, 64, 69}}) {      // no SM count, as without
    const std::string what = std::to_string(c.n) + " rows, " + std::to_string(c.blocks * 16) + " keys, " +
                             std::to_string(c.smem / 1024) + " KB, " + std::to_string(c.sms) + " SMs";
    const cuda::DecodeAttentionPlan w = plan(c.n, c.blocks, true, c.smem, c.sms);
    const cuda::DecodeAttentionPlan d = plan(c.n, c.blocks, false, c.smem, c.sms);
    ASSERT_TRUE(w.use && d.use) << what;
    EXPECT_EQ(w.chunk, c.chunk) << what;
    EXPECT_EQ(w.splits, c.splits) << what;
    EXPECT_EQ(d.chunk, c.chunk_without) << what;
    EXPECT_EQ(d.splits, c.splits_without) << what;
    EXPECT_EQ(w.chunk % 64, 0) << what;
    EXPECT_GE(int64_t{w.chunk} * w.splits, c.blocks * 16) << what << ": every key in a split";
    EXPECT_LE(w.smem, c.smem) << what;
    EXPECT_GE(w.pstride, std::max(w.chunk, w.splits)) << what;
  }
}

// A backend created while a VV_CUDA_MMA_DECODE* variable is set keeps that variant for its life
// (cuda_decode_bench --ab compares two backends of one process); one created without follows the
// process-wide setting. Here: a unit a warp (VV_CUDA_MMA_DECODE_SHARE=0) against the shared units (the
// default) at 64 rows, whose sums differ in order: each backend gives the bits the process-wide setting
// of its variant gives, whatever the process-wide setting is when it runs.
TEST(CudaDecodeAttention, BackendMadeWithTheVariablesKeepsItsVariant) {
  VV_CUDA_BACKEND_OR_SKIP(probe, true);
  const std::unique_ptr<Backend> plain = mma_backend();
  ASSERT_NE(plain, nullptr);
  ::setenv("VV_CUDA_MMA_DECODE_SHARE", "0", 1);
  EXPECT_TRUE(cuda::mma_decode_env_set());
  const cuda::MmaDecodeConfig from_env = cuda::mma_decode_config_from_env();
  const std::unique_ptr<Backend> unshared = mma_backend();
  ::unsetenv("VV_CUDA_MMA_DECODE_SHARE");
  ASSERT_NE(unshared, nullptr);
  EXPECT_FALSE(from_env.share);
  EXPECT_EQ(from_env.chunk, cuda::kMmaDecodeChunk);
  const std::vector<int> pattern = {1, 17, 63, 64, 65, 600, 1031, 599, 601, 640, 128, 129, 300};
  Step st{28, 4, 128, DType::kBF16, 16, {}};
  for (int i = 0; i < 64; ++i) st.lens.push_back(pattern[i % pattern.size()] + (i / 13) * 7 % 40);
  StepData d = make_step(st, 71);
  std::vector<int> all(st.lens.size());
  std::iota(all.begin(), all.end(), 0);
  cuda::MmaDecodeConfig shared_cfg;  // the defaults: shared units from 256 (row, kv head) pairs
  cuda::MmaDecodeConfig unit_cfg = shared_cfg;
  unit_cfg.share = false;
  unit_cfg.chunk = cuda::kMmaDecodeChunk;
  std::vector<float> want_shared, want_unit;
  {
    MmaVariant v(shared_cfg);
    want_shared = run_gpu(*plain, st, d, all);
  }
  {
    MmaVariant v(unit_cfg);
    want_unit = run_gpu(*plain, st, d, all);
  }
  ASSERT_EQ(want_shared.size(), want_unit.size());
  ASSERT_NE(std::memcmp(want_shared.data(), want_unit.data(), want_shared.size() * 4), 0)
      << "the two variants give the same bits: the test cannot tell them apart";
  for (const cuda::MmaDecodeConfig& process : {shared_cfg, unit_cfg}) {
    MmaVariant v(process);
    const std::string what = "process-wide: " + describe(process);
    const std::vector<float> got_unshared = run_gpu(*unshared, st, d, all);
    EXPECT_EQ(std::memcmp(got_unshared.data(), want_unit.data(), want_unit.size() * 4), 0)
        << what << ": the backend made with VV_CUDA_MMA_DECODE_SHARE=0 did not keep a unit a warp";
    const std::vector<float> got_plain = run_gpu(*plain, st, d, all);
    const std::vector<float>& want = process.share ? want_shared : want_unit;
    EXPECT_EQ(std::memcmp(got_plain.data(), want.data(), want.size() * 4), 0)
        << what << ": the backend made without the variables did not follow the process-wide setting";
  }
}

}  // namespace
}  // namespace vv::test
