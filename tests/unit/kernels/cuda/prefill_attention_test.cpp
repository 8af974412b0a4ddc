// The tensor-core prefill attention (bf16 mode, kernels/cuda/prefill_attention.cu) against the
// CPU's scalar reference: varlen prefills over a shuffled paged cache (several sequences in one
// call, a chunk that continues an earlier one), production (28/4 heads of 128, 1,024 rows), odd
// and prime lengths, GQA groups of 1, 7 and 32, head_dim 64 and 128, every cache dtype.
//
// Tolerance: the kernel rounds q and the cached k/v to bf16 and the softmax weights P to bf16 for
// P·V (f32 scores, softmax and accumulation). The reference gets the same bf16-rounded q and k/v,
// so what remains is P's rounding: each weight is off by at most 2^-9 relative, so an output
// (a convex combination of V rows, |v| ≤ 1) is off by at most ~2^-9 of max|v|, plus f32 order
// effects. The test allows 4e-3 (about twice that) of max(|ref|, 1).
#include "kernels/cuda/prefill_attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "kernels/cpu/reference_ops.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test::flashprefill {
namespace {

struct Seq {
  int start;  // positions before this are already cached (random k/v): a continued chunk
  int len;    // rows of this call
};

constexpr int kH200Sms = 132;

void check_flash(Backend& gpu, int heads, int kv_heads, int D, DType kv_dtype, const std::vector<Seq>& seqs,
                 int bs) {
  const int S = static_cast<int>(seqs.size());
  int max_blocks = 0, total_blocks = 0;
  for (const Seq& s : seqs) {
    max_blocks = std::max(max_blocks, (s.start + s.len + bs - 1) / bs);
    total_blocks += (s.start + s.len + bs - 1) / bs;
  }
  std::vector<int32_t> perm(total_blocks + 5);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(11));
  std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, 0);
  int used = 0;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < (seqs[s].start + seqs[s].len + bs - 1) / bs; ++b)
      tables[s * max_blocks + b] = perm[used++];
  std::vector<int32_t> row_seq, row_pos;
  for (int s = 0; s < S; ++s)
    for (int p = seqs[s].start; p < seqs[s].start + seqs[s].len; ++p)
      row_seq.push_back(s), row_pos.push_back(p);
  const int64_t n = static_cast<int64_t>(row_seq.size());
  ASSERT_TRUE(cuda::flash_prefill_applies(n, heads, kv_heads, D, kH200Sms))
      << n << " rows of " << heads << "/" << kv_heads << "x" << D << " would not reach the flash kernel";

  const int64_t width = static_cast<int64_t>(kv_heads) * D, qw = static_cast<int64_t>(heads) * D;
  const int64_t slots = static_cast<int64_t>(total_blocks + 5) * bs;
  HostMatrix kc = random_matrix(slots, width, kv_dtype, 71), vc = random_matrix(slots, width, kv_dtype, 72);
  DeviceMatrix dkc = to_device(gpu, kc), dvc = to_device(gpu, vc), dtab = to_device_i32(gpu, tables);
  HostMatrix q = random_matrix(n, qw, DType::kF32, 73, 2.0f);
  HostMatrix k = random_matrix(n, width, DType::kF32, 74), v = random_matrix(n, width, DType::kF32, 75);
  AttentionRows rows;
  rows.row_seq = Tensor::vector(row_seq.data(), DType::kI32, n);
  rows.row_pos = Tensor::vector(row_pos.data(), DType::kI32, n);
  rows.block_tables = Tensor::matrix(tables.data(), DType::kI32, S, max_blocks);
  rows.block_size = bs;
  const AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D))};
  std::ostringstream what;
  what << "flash attention " << heads << "/" << kv_heads << "x" << D << " " << dtype_name(kv_dtype) << " bs "
       << bs << " rows";
  for (const Seq& s : seqs) what << " " << s.start << "+" << s.len;
  // The reference depends only on the shape (every input comes from fixed seeds): the scalar CPU
  // attention runs once per shape, however many forms are checked against it.
  static std::map<std::string, std::vector<float>> references;
  auto ref_it = references.find(what.str());
  if (ref_it == references.end()) {
    HostMatrix hk = random_matrix(slots, width, kv_dtype, 71), hv = random_matrix(slots, width, kv_dtype, 72);
    KvLayer host_cache{hk.view(), hv.view()};
    ref::kv_write(k.view(), v.view(), rows, host_cache, shape);
    HostMatrix qr = bf16_rounded_f32(q), kr = bf16_rounded_f32(hk), vr = bf16_rounded_f32(hv);
    const KvLayer rounded_cache{kr.view(), vr.view()};
    HostMatrix want = random_matrix(n, qw, DType::kF32, 76);
    Tensor want_t = want.view();
    parallel_ranges(shape.heads, [&](int64_t h0, int64_t h1) {
      ref::paged_attention(qr.view(), rows, rounded_cache, shape, want_t, static_cast<int>(h0),
                           static_cast<int>(h1));
    });
    ref_it = references.emplace(what.str(), host_rows(want_t)).first;
  }

  DeviceMatrix dq = to_device(gpu, q), dk = to_device(gpu, k), dv = to_device(gpu, v);
  DeviceMatrix ds = to_device_i32(gpu, row_seq), dp = to_device_i32(gpu, row_pos);
  AttentionRows drows = rows;
  drows.row_seq = ds.t;
  drows.row_pos = dp.t;
  drows.block_tables = Tensor::matrix(dtab.buf.data(), DType::kI32, S, max_blocks);
  KvLayer dcache{Tensor::matrix(dkc.buf.data(), kv_dtype, slots, width),
                 Tensor::matrix(dvc.buf.data(), kv_dtype, slots, width)};
  gpu.kv_write(dk.t, dv.t, drows, dcache, shape);
  DeviceMatrix dout = poisoned(gpu, n, qw);
  gpu.paged_attention(dq.t, drows, dcache, shape, dout.t);
  expect_close(download_f32(gpu, dout.t), ref_it->second, 4e-3, what.str(), 1.0);
}

TEST(CudaFlashPrefill, ProductionShapeOneKiloRowPrompt) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_flash(*gpu, 28, 4, 128, DType::kF32, {{0, 1024}}, 16);
}

TEST(CudaFlashPrefill, VarlenOddAndPrimeLengthsAndAContinuedChunk) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 37}, {0, 300}, {0, 1}, {0, 129}, {200, 311}, {0, 541}},
              16);
  check_flash(*gpu, 28, 4, 128, DType::kF32, {{1000, 257}, {0, 63}}, 32);
}

TEST(CudaFlashPrefill, OtherGroupsHeadDimsAndCacheDtypes) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_flash(*gpu, 14, 2, 64, DType::kF16, {{0, 997}}, 16);             // G = 7, head_dim 64
  check_flash(*gpu, 8, 8, 128, DType::kBF16, {{0, 1031}, {5, 70}}, 16);  // G = 1: 64 rows per tile
  check_flash(*gpu, 32, 1, 128, DType::kF32, {{0, 263}, {17, 50}}, 4);   // G = 32: 2 rows per tile
}

// VV_CUDA_FLASH_QV=128 (8 warps of 16 query vectors sharing each K/V tile) and 128x2 (4 warps of 32,
// each K/V fragment feeding two mmas), where a GQA group has ≥ 2 heads (G = 1 keeps 64 per block).
// Same shapes, same tolerance; the profile shows which kernel ran.
struct FlashFormEnv {  // for the backend made in its scope (read once, at construction)
  explicit FlashFormEnv(const char* form) {
    ::setenv("VV_CUDA_FLASH_QV", form, 1);
    ::setenv("VV_CUDA_PROFILE", "1", 1);
  }
  ~FlashFormEnv() {
    ::unsetenv("VV_CUDA_FLASH_QV");
    ::unsetenv("VV_CUDA_PROFILE");
  }
  FlashFormEnv(const FlashFormEnv&) = delete;
  FlashFormEnv& operator=(const FlashFormEnv&) = delete;
};

void check_flash_form(const char* form, const std::string& label) {
  FlashFormEnv env(form);
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  (void)backend_profile_report(*gpu);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 1024}}, 16);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 37}, {0, 300}, {0, 1}, {0, 129}, {200, 311}, {0, 541}},
              16);
  check_flash(*gpu, 28, 4, 128, DType::kF32, {{1000, 257}, {0, 63}}, 32);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{700, 301}}, 1);  // block size 1: 65 table entries a tile
  check_flash(*gpu, 14, 2, 64, DType::kF16, {{0, 997}}, 16);
  check_flash(*gpu, 32, 1, 128, DType::kF32, {{0, 263}, {17, 50}}, 4);
  const std::string wide = backend_profile_report(*gpu);
  EXPECT_NE(wide.find("paged_attention." + label + " "), std::string::npos) << wide;
  check_flash(*gpu, 8, 8, 128, DType::kBF16, {{0, 1031}, {5, 70}}, 16);  // G = 1: 64 per block
  const std::string narrow = backend_profile_report(*gpu);
  if (label != "flash") {
    EXPECT_EQ(narrow.find("paged_attention." + label + " "), std::string::npos) << narrow;
  }
  EXPECT_NE(narrow.find("paged_attention.flash "), std::string::npos) << narrow;
}

// VV_CUDA_FLASH_QV=narrow: 4 warps of 16 query vectors (the default off sm_90; on an H200 the
// default is wgf, so this is where the narrow form runs there).
TEST(CudaFlashPrefill, NarrowBlocksOf64QueryVectors) {
  check_flash_form("narrow", "flash");
}

TEST(CudaFlashPrefill, WideBlocksOf128QueryVectors) {
  check_flash_form("128", "flash128");
}

TEST(CudaFlashPrefill, TwoMTilesPerWarpBlocksOf128QueryVectors) {
  check_flash_form("128x2", "flash128x2");
}

// Whether device 0 is sm_90, where the wgmma forms exist.
bool device_is_sm90() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

// The wgmma forms on sm_90; on any other device the backend must take the narrow form instead (its
// label, the same shapes and tolerance), which is what this checks there.
void check_hopper_form(const char* form, const std::string& label) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, true); }
  check_flash_form(form, device_is_sm90() ? label : std::string("flash"));
}

// VV_CUDA_FLASH_QV=wg: two warpgroups whose scores come from wgmma (Q and K in 128-byte-swizzled
// shared memory).
TEST(CudaFlashPrefill, WarpgroupMmaScoresOnHopper) {
  check_hopper_form("wg", "flashwg");
}

// VV_CUDA_FLASH_QV=wgp: the same with tile t + 1's score wgmmas in flight during tile t's softmax
// and P·V (three K/V stages).
TEST(CudaFlashPrefill, PipelinedWarpgroupMmaScoresOnHopper) {
  check_hopper_form("wgp", "flashwgp");
}

// VV_CUDA_FLASH_QV=wgf: the pipelined form with P·V on wgmma too (P from
// registers, V swizzled in shared memory as the MN-major operand).
TEST(CudaFlashPrefill, WarpgroupMmaScoresAndValuesOnHopper) {
  check_hopper_form("wgf", "flashwgf");
}

// VV_CUDA_ROPE_FLASH (the default; sm_90, the wgmma forms): rope(q), rope(k), kv_write, paged_attention(q),
// discard(q) run as rope_kv_write of k alone and the flash kernel applying q's rope as it loads it.
// The attention output and the cache must be the bits of the ops run one by one (VV_CUDA_ROPE_FLASH=0;
// rope_rotate and the
// same cosf/sinf of the same angle in both kernels); q is left as it was (it was discarded).
void rope_flash_case(int heads, int kv_heads, const std::vector<Seq>& seqs, int bs, uint32_t seed) {
  auto plain = cuda_backend_with({{"VV_CUDA_ROPE_FLASH", "0"}, {"VV_CUDA_PROFILE", "1"}}, true),
       fused = cuda_backend_with({{"VV_CUDA_ROPE_FLASH", "1"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(plain.is_ok() && fused.is_ok());
  const int D = 128, S = static_cast<int>(seqs.size());
  int max_blocks = 0, total_blocks = 0;
  for (const Seq& q : seqs) {
    max_blocks = std::max(max_blocks, (q.start + q.len + bs - 1) / bs);
    total_blocks += (q.start + q.len + bs - 1) / bs;
  }
  std::vector<int32_t> perm(total_blocks + 3);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, 0), row_seq, row_pos;
  for (int sq = 0, used = 0; sq < S; ++sq) {
    for (int b = 0; b < (seqs[sq].start + seqs[sq].len + bs - 1) / bs; ++b)
      tables[sq * max_blocks + b] = perm[used++];
    for (int p = seqs[sq].start; p < seqs[sq].start + seqs[sq].len; ++p)
      row_seq.push_back(sq), row_pos.push_back(p);
  }
  const int64_t n = static_cast<int64_t>(row_seq.size()), width = static_cast<int64_t>(kv_heads) * D;
  const int64_t qw = static_cast<int64_t>(heads) * D, slots = static_cast<int64_t>(total_blocks + 3) * bs;
  HostMatrix kc = random_matrix(slots, width, DType::kBF16, seed + 1),
             vc = random_matrix(slots, width, DType::kBF16, seed + 2);
  HostMatrix q = random_matrix(n, qw, DType::kF32, seed + 3, 2.0f),
             k = random_matrix(n, width, DType::kF32, seed + 4);
  HostMatrix v = random_matrix(n, width, DType::kF32, seed + 5);
  const AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D))};
  struct Out {
    std::vector<float> o, kc, vc;
    std::string profile;
  };
  auto run = [&](Backend& be) {
    DeviceMatrix dkc = to_device(be, kc), dvc = to_device(be, vc), dtab = to_device_i32(be, tables);
    DeviceMatrix dq = to_device(be, q), dk = to_device(be, k), dv = to_device(be, v);
    DeviceMatrix ds = to_device_i32(be, row_seq), dp = to_device_i32(be, row_pos);
    AttentionRows rows;
    rows.row_seq = ds.t;
    rows.row_pos = dp.t;
    rows.block_tables = Tensor::matrix(dtab.buf.data(), DType::kI32, S, max_blocks);
    rows.block_size = bs;
    KvLayer cache{Tensor::matrix(dkc.buf.data(), DType::kBF16, slots, width),
                  Tensor::matrix(dvc.buf.data(), DType::kBF16, slots, width)};
    DeviceMatrix out = poisoned(be, n, qw);
    be.synchronize();
    (void)backend_profile_report(be);
    be.rope(dq.t, dp.t, heads, D, 1e6f);
    be.rope(dk.t, dp.t, kv_heads, D, 1e6f);
    be.kv_write(dk.t, dv.t, rows, cache, shape);
    be.paged_attention(dq.t, rows, cache, shape, out.t);
    be.discard(dq.t);
    Out r;
    r.o = download_f32(be, out.t);
    // (the bf16 caches' bytes, read as floats two elements at a time)
    r.kc = download_f32(be, Tensor::matrix(dkc.buf.data(), DType::kF32, slots, width / 2));
    r.vc = download_f32(be, Tensor::matrix(dvc.buf.data(), DType::kF32, slots, width / 2));
    r.profile = backend_profile_report(be);
    return r;
  };
  const Out want = run(**plain), got = run(**fused);
  std::ostringstream what;
  what << heads << "/" << kv_heads << " rows";
  for (const Seq& q : seqs) what << " " << q.start << "+" << q.len;
  EXPECT_EQ(got.profile.find("rope_kv_write.k ") != std::string::npos, device_is_sm90())
      << what.str() << ": fused exactly where a wgmma form runs (sm_90)\n"
      << got.profile;
  EXPECT_EQ(want.profile.find("rope_kv_write.k "), std::string::npos)
      << what.str() << ": fused without the switch";
  for (float f : got.o) ASSERT_FALSE(std::isnan(f)) << what.str() << ": output not written";
  EXPECT_EQ(std::memcmp(got.o.data(), want.o.data(), want.o.size() * 4), 0)
      << what.str() << ": attention differs";
  ASSERT_EQ(got.kc.size(), want.kc.size());
  EXPECT_EQ(std::memcmp(got.kc.data(), want.kc.data(), want.kc.size() * 4), 0)
      << what.str() << ": k cache differs";
  EXPECT_EQ(std::memcmp(got.vc.data(), want.vc.data(), want.vc.size() * 4), 0)
      << what.str() << ": v cache differs";
}

// Off sm_90 (no wgmma form) the switch must leave the ops unfused, with the same bits.
TEST(CudaFlashPrefill, RopeInsideTheWgmmaFormsEqualsTheOpsOneByOne) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, true); }
  rope_flash_case(28, 4, {{0, 1024}}, 16, 301);  // the 7B's heads, a prompt chunk
  rope_flash_case(28, 4, {{0, 37}, {200, 311}, {0, 1}, {3000, 541}}, 16,
                  302);                                   // varlen, continued, far positions
  rope_flash_case(32, 8, {{0, 263}, {17, 500}}, 7, 303);  // G = 4, a block size of 7
}

// VV_CUDA_FLASH_QV=wgfl: wgf with the block size divided by multiply and shift (FastDiv), 2^x from
// one ex2.approx.ftz and no causal mask on tiles that end before the block's first query. Block
// sizes that do not divide the tile and continued chunks (tiles past the first query) in the shapes.
TEST(CudaFlashPrefill, LeanWarpgroupMmaFormOnHopper) {
  check_hopper_form("wgfl", "flashwgfl");
  if (HasFatalFailure()) return;
  FlashFormEnv env("wgfl");
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 300}, {123, 211}}, 3);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 700}, {50, 90}}, 24);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{2000, 517}}, 96);
}

// Block sizes that do not divide the 64-key tile, and one larger than it: the tile's block-table
// entries (read a tile ahead into shared memory) cover a partial block at either end.
TEST(CudaFlashPrefill, BlockSizesThatDoNotDivideTheKeyTile) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 300}, {123, 211}}, 3);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 700}, {50, 90}}, 24);
  check_flash(*gpu, 28, 4, 128, DType::kBF16, {{0, 517}}, 96);
}

}  // namespace
}  // namespace vv::test::flashprefill
