// The decode-step fusions of the CUDA backend (kernels/cuda/decode_ops.cuh): a decoder layer's one-row
// op sequence (rms_norm → q/k/v GEMMs → rope q, rope k → kv_write; rms_norm → gate_up → silu_mul;
// a GEMM with residual), issued without a sync in between so the recorder fuses it, must give the
// same bits as the same ops launched one by one (VV_CUDA_GRAPHS=0), agree with the CPU's scalar
// reference, and really be fused (the profiler's table names the fused kernels). Odd, prime and
// production shapes; both norm-reduction orders (≤ 1024 and > 1024 columns); BF16/F32 weights and
// caches. Labelled gpu: skipped with the reason where no GPU is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "kernels/cpu/reference_ops.h"
#include "kernels/cuda/decode_ops.cuh"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

struct LayerCase {
  int64_t H, I;
  int heads, kv_heads, D;
  DType wt, cache_t;
  int32_t pos;
};

struct LayerData {
  HostMatrix x, g1, g2, wq, bq, wk, bk, wv, bv, wgu, wo, resid, kc, vc;
  HostMatrix att, wproj;  // the chain's sequence: an attention output [1, heads · D], o [H, heads · D]
  HostMatrix q0;          // and the query of its attention, where the sequence starts there
  std::vector<int32_t> table;
  int64_t slots = 0;
};

struct LayerOut {
  std::vector<float> a, q, k, v, a2, gu, m, resid, att;
  std::vector<uint8_t> kc, vc;
};

LayerData make_data(const LayerCase& c, uint32_t seed) {
  LayerData d;
  const int64_t qd = int64_t{c.heads} * c.D, kvd = int64_t{c.kv_heads} * c.D;
  const float ws = 1.0f / std::sqrt(static_cast<float>(c.H));
  d.x = random_matrix(1, c.H, DType::kF32, seed, 3.0f);
  d.g1 = random_matrix(1, c.H, DType::kF32, seed + 1, 2.0f);
  d.g2 = random_matrix(1, c.H, DType::kF32, seed + 2, 2.0f);
  d.wq = random_matrix(qd, c.H, c.wt, seed + 3, ws);
  d.bq = random_matrix(1, qd, DType::kF32, seed + 4, 0.1f);
  d.wk = random_matrix(kvd, c.H, c.wt, seed + 5, ws);
  d.bk = random_matrix(1, kvd, DType::kF32, seed + 6, 0.1f);
  d.wv = random_matrix(kvd, c.H, c.wt, seed + 7, ws);
  d.bv = random_matrix(1, kvd, DType::kF32, seed + 8, 0.1f);
  d.wgu = random_matrix(2 * c.I, c.H, c.wt, seed + 9, ws);
  d.wo = random_matrix(c.H, c.I, c.wt, seed + 10, 1.0f / std::sqrt(static_cast<float>(c.I)));
  d.resid = random_matrix(1, c.H, DType::kF32, seed + 11);
  const int bs = 16;
  const int nblocks = c.pos / bs + 1;
  d.table.resize(static_cast<size_t>(nblocks));
  std::iota(d.table.begin(), d.table.end(), 0);
  std::shuffle(d.table.begin(), d.table.end(), std::mt19937(seed));
  d.slots = int64_t{nblocks + 2} * bs;
  d.kc = random_matrix(d.slots, kvd, c.cache_t, seed + 12);
  d.vc = random_matrix(d.slots, kvd, c.cache_t, seed + 13);
  d.att = random_matrix(1, qd, DType::kF32, seed + 14);
  d.wproj = random_matrix(c.H, qd, c.wt, seed + 15, 1.0f / std::sqrt(static_cast<float>(qd)));
  d.q0 = random_matrix(1, qd, DType::kF32, seed + 16, 2.0f);
  return d;
}

// A layer's operands uploaded to `be` (the outputs poisoned), and its outputs read back.
struct LayerOnDevice {
  int64_t qd, kvd;
  DeviceMatrix x, g1, g2, wq, bq, wk, bk, wv, bv, wgu, wo, resid, kc, vc, att, wproj, q0, pos, seq, tab;
  DeviceMatrix a, q, k, v, a2, gu, m;
  Tensor g1v, g2v, bqv, bkv, bvv;
  AttentionRows rows;
  KvLayer cache;
  AttentionShape shape;
  // attention: att is the attention's output (poisoned), else the uploaded input d.att.
  LayerOnDevice(Backend& be, const LayerCase& c, LayerData& d, bool attention = false)
      : qd(int64_t{c.heads} * c.D),
        kvd(int64_t{c.kv_heads} * c.D),
        x(to_device(be, d.x)),
        g1(to_device(be, d.g1)),
        g2(to_device(be, d.g2)),
        wq(to_device(be, d.wq)),
        bq(to_device(be, d.bq)),
        wk(to_device(be, d.wk)),
        bk(to_device(be, d.bk)),
        wv(to_device(be, d.wv)),
        bv(to_device(be, d.bv)),
        wgu(to_device(be, d.wgu)),
        wo(to_device(be, d.wo)),
        resid(to_device(be, d.resid)),
        kc(to_device(be, d.kc)),
        vc(to_device(be, d.vc)),
        att(attention ? poisoned(be, 1, qd) : to_device(be, d.att)),
        wproj(to_device(be, d.wproj)),
        q0(to_device(be, d.q0)),
        pos(to_device_i32(be, {c.pos})),
        seq(to_device_i32(be, {0})),
        tab(to_device_i32(be, d.table)),
        a(poisoned(be, 1, c.H)),
        q(poisoned(be, 1, qd)),
        k(poisoned(be, 1, kvd)),
        v(poisoned(be, 1, kvd)),
        a2(poisoned(be, 1, c.H)),
        gu(poisoned(be, 1, 2 * c.I)),
        m(poisoned(be, 1, c.I)),
        g1v(Tensor::vector(g1.buf.data(), DType::kF32, c.H)),
        g2v(Tensor::vector(g2.buf.data(), DType::kF32, c.H)),
        bqv(Tensor::vector(bq.buf.data(), DType::kF32, qd)),
        bkv(Tensor::vector(bk.buf.data(), DType::kF32, kvd)),
        bvv(Tensor::vector(bv.buf.data(), DType::kF32, kvd)),
        cache{Tensor::matrix(kc.buf.data(), c.cache_t, d.slots, kvd),
              Tensor::matrix(vc.buf.data(), c.cache_t, d.slots, kvd)},
        shape{c.heads, c.kv_heads, c.D, 1.0f / std::sqrt(static_cast<float>(c.D))} {
    rows.row_seq = seq.t;
    rows.row_pos = pos.t;
    rows.block_tables = Tensor::matrix(tab.buf.data(), DType::kI32, 1, static_cast<int64_t>(d.table.size()));
    rows.block_size = 16;
    be.synchronize();
  }
  // norm(x) → q, k, v → rope q, rope k → kv_write, as Qwen2Decoder::run_layer issues them.
  void attention_block(Backend& be, const LayerCase& c, const Tensor& xin) {
    be.rms_norm(xin, g1v, 1e-6f, a.t);
    be.gemm(a.t, wq.t, &bqv, q.t, Epilogue::kNone);
    be.gemm(a.t, wk.t, &bkv, k.t, Epilogue::kNone);
    be.gemm(a.t, wv.t, &bvv, v.t, Epilogue::kNone);
    be.rope(q.t, pos.t, c.heads, c.D, 1e6f);
    be.rope(k.t, pos.t, c.kv_heads, c.D, 1e6f);
    be.kv_write(k.t, v.t, rows, cache, shape);
  }
  // norm(x) → gate_up → silu_mul → down, added into the residual rows.
  void mlp_block(Backend& be, const Tensor& xin) {
    be.rms_norm(xin, g2v, 1e-6f, a2.t);
    be.gemm(a2.t, wgu.t, nullptr, gu.t, Epilogue::kNone);
    be.silu_mul(gu.t, m.t);
    be.gemm(m.t, wo.t, nullptr, resid.t, Epilogue::kAddResidual);
  }
  LayerOut read(Backend& be, LayerData& d) {
    LayerOut o;
    o.a = download_f32(be, a.t);
    o.q = download_f32(be, q.t);
    o.k = download_f32(be, k.t);
    o.v = download_f32(be, v.t);
    o.a2 = download_f32(be, a2.t);
    o.gu = download_f32(be, gu.t);
    o.m = download_f32(be, m.t);
    o.resid = download_f32(be, resid.t);
    o.att = download_f32(be, att.t);
    o.kc.resize(d.kc.bytes.size());
    o.vc.resize(d.vc.bytes.size());
    be.download(o.kc.data(), kc.buf.data(), o.kc.size());
    be.download(o.vc.data(), vc.buf.data(), o.vc.size());
    return o;
  }
};

// The same operands on the host for the CPU's scalar reference (the cache and the residual in d).
struct LayerOnHost {
  int64_t qd, kvd;
  HostMatrix a, q, k, v, a2, gu, m;
  Tensor av, qv, kv, vv, a2v, guv, mv, rv, bq, bk, bv, posv;
  std::vector<int32_t> pos, seq;
  AttentionRows rows;
  KvLayer cache;
  AttentionShape shape;
  LayerOnHost(const LayerCase& c, LayerData& d)
      : qd(int64_t{c.heads} * c.D),
        kvd(int64_t{c.kv_heads} * c.D),
        a(scratch(1, c.H)),
        q(scratch(1, qd)),
        k(scratch(1, kvd)),
        v(scratch(1, kvd)),
        a2(scratch(1, c.H)),
        gu(scratch(1, 2 * c.I)),
        m(scratch(1, c.I)),
        av(a.view()),
        qv(q.view()),
        kv(k.view()),
        vv(v.view()),
        a2v(a2.view()),
        guv(gu.view()),
        mv(m.view()),
        rv(d.resid.view()),
        bq(Tensor::vector(d.bq.bytes.data(), DType::kF32, qd)),
        bk(Tensor::vector(d.bk.bytes.data(), DType::kF32, kvd)),
        bv(Tensor::vector(d.bv.bytes.data(), DType::kF32, kvd)),
        pos{c.pos},
        seq{0},
        cache{Tensor::matrix(d.kc.bytes.data(), c.cache_t, d.slots, kvd),
              Tensor::matrix(d.vc.bytes.data(), c.cache_t, d.slots, kvd)},
        shape{c.heads, c.kv_heads, c.D, 1.0f / std::sqrt(static_cast<float>(c.D))} {
    posv = Tensor::vector(pos.data(), DType::kI32, 1);
    rows.row_seq = Tensor::vector(seq.data(), DType::kI32, 1);
    rows.row_pos = posv;
    rows.block_tables = Tensor::matrix(d.table.data(), DType::kI32, 1, static_cast<int64_t>(d.table.size()));
    rows.block_size = 16;
  }
  static HostMatrix scratch(int64_t r, int64_t cols) { return random_matrix(r, cols, DType::kF32, 1); }
  // LayerOnDevice::attention_block and mlp_block on the CPU's scalar ops.
  void attention_block(const LayerCase& c, LayerData& d, const Tensor& xin) {
    ref::rms_norm(xin, Tensor::vector(d.g1.bytes.data(), DType::kF32, c.H), 1e-6f, av);
    ref::gemm(av, d.wq.view(), &bq, qv, Epilogue::kNone);
    ref::gemm(av, d.wk.view(), &bk, kv, Epilogue::kNone);
    ref::gemm(av, d.wv.view(), &bv, vv, Epilogue::kNone);
    ref::rope(qv, posv, c.heads, c.D, 1e6f);
    ref::rope(kv, posv, c.kv_heads, c.D, 1e6f);
    ref::kv_write(kv, vv, rows, cache, shape);
  }
  void mlp_block(const LayerCase& c, LayerData& d, const Tensor& xin) {
    ref::rms_norm(xin, Tensor::vector(d.g2.bytes.data(), DType::kF32, c.H), 1e-6f, a2v);
    ref::gemm(a2v, d.wgu.view(), nullptr, guv, Epilogue::kNone);
    ref::silu_mul(guv, mv);
    ref::gemm(mv, d.wo.view(), nullptr, rv, Epilogue::kAddResidual);
  }
  LayerOut read(LayerData& d) const {
    LayerOut o;
    o.a = host_rows(av), o.q = host_rows(qv), o.k = host_rows(kv), o.v = host_rows(vv), o.a2 = host_rows(a2v);
    o.gu = host_rows(guv), o.m = host_rows(mv), o.resid = host_rows(rv);
    o.att = host_rows(d.att.view());
    o.kc = d.kc.bytes;
    o.vc = d.vc.bytes;
    return o;
  }
};

// The layer's ops on `be`, issued back to back (one flush at the first download).
LayerOut run_ops(Backend& be, const LayerCase& c, LayerData& d) {
  LayerOnDevice L(be, c, d);
  L.attention_block(be, c, L.x.t);
  L.mlp_block(be, L.x.t);  // (norm of x, added into the separate residual rows)
  return L.read(be, d);
}

// The CPU's scalar reference of the same sequence.
LayerOut reference(const LayerCase& c, LayerData d) {
  LayerOnHost L(c, d);
  L.attention_block(c, d, d.x.view());
  L.mlp_block(c, d, d.x.view());
  return L.read(d);
}

std::vector<float> cache_f32(const std::vector<uint8_t>& b, DType t, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::kF32) {
      std::memcpy(&f[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      f[i] = t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return f;
}

std::string case_name(const LayerCase& c) {
  return "H=" + std::to_string(c.H) + " I=" + std::to_string(c.I) + " " + std::to_string(c.heads) + "/" +
         std::to_string(c.kv_heads) + "x" + std::to_string(c.D) + " " + dtype_name(c.wt) + " cache " +
         dtype_name(c.cache_t);
}

// Every output of o bitwise equal to want's (how: what the two runs are, for the message).
void expect_same_layer(const LayerOut& o, const LayerOut& want, const std::string& what,
                       const std::string& how) {
  auto eq = [&](const auto& x, const auto& y, const char* name) {
    ASSERT_EQ(x.size(), y.size()) << what << " " << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])), 0)
        << what << ": " << name << " differs (" << how << ")";
  };
  eq(o.att, want.att, "attention output");
  eq(o.a, want.a, "norm output");
  eq(o.q, want.q, "q");
  eq(o.k, want.k, "k");
  eq(o.v, want.v, "v");
  eq(o.a2, want.a2, "second norm output");
  eq(o.gu, want.gu, "gate_up");
  eq(o.m, want.m, "silu_mul");
  eq(o.resid, want.resid, "residual");
  eq(o.kc, want.kc, "K cache");
  eq(o.vc, want.vc, "V cache");
}

Result<std::unique_ptr<Backend>> backend_with(const char* var, const char* value) {
  return cuda_backend_with({{var, value}}, false);
}

// switch: a VV_CUDA_* switch set to `value` for all three backends (nullptr: none).
void check_layer_fusion(const char* sw, const char* value = "1") {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  auto make = [&](const char* var, const char* v) {
    std::vector<std::pair<const char*, const char*>> env;
    if (sw) env.emplace_back(sw, value);
    if (var) env.emplace_back(var, v);
    return cuda_backend_with(env, false);
  };
  auto fused_be = make(nullptr, nullptr);
  ASSERT_TRUE(fused_be.is_ok()) << fused_be.status().to_string();
  Backend* fused = fused_be->get();
  auto eager = make("VV_CUDA_GRAPHS", "0");
  ASSERT_TRUE(eager.is_ok()) << eager.status().to_string();
  auto prof = make("VV_CUDA_PROFILE", "1");
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
  const bool bulk = sw != nullptr && std::string(sw) == "VV_CUDA_GEMV_BULK";
  const std::vector<LayerCase> cases = {
      {48, 128, 14, 2, 16, DType::kF32, DType::kF32, 5},             // the tiny model's decoder
      {136, 40, 3, 1, 8, DType::kBF16, DType::kBF16, 37},            // odd widths
      {1032, 264, 7, 7, 24, DType::kBF16, DType::kF32, 1000},        // > 1024: the block norm order
      {1024, 8, 2, 1, 6, DType::kF16, DType::kF16, 0},               // the warp order's last width
      {3584, 18944, 28, 4, 128, DType::kBF16, DType::kBF16, 4099}};  // Qwen2.5-7B
  uint32_t seed = 300;
  for (const LayerCase& c : cases) {
    const std::string what = case_name(c);
    LayerData d = make_data(c, seed);
    seed += 20;
    const LayerOut got = run_ops(*fused, c, d);
    const LayerOut unf = run_ops(**eager, c, d);
    (void)backend_profile_report(**prof);
    const LayerOut pr = run_ops(**prof, c, d);
    const std::string table = backend_profile_report(**prof);
    EXPECT_NE(table.find("decode_gemv.fused"), std::string::npos) << what << ": not fused\n" << table;
    EXPECT_NE(table.find("rope_kv_write"), std::string::npos) << what << ": rope/kv_write not fused\n"
                                                              << table;
    // VV_CUDA_GEMV_BULK streams 16-bit weights on sm_90 by the bulk kernel: at 1 it pairs gate/up rows
    // with the SwiGLU epilogue and the down projection streams alone; at 3 gate_up streams unpaired and
    // silu_mul becomes the down projection's prologue.
    // At 4 only the lone GEMVs of 8,192 columns or more (the 7B's down projection) take it; at 5, as at 1,
    // only the launches of 64 MiB of weights or more (here the 7B's gate_up and down; its q/k/v stay on the
    // default kernel).
    const std::string v = bulk ? value : "";
    const bool half = sm90 && c.wt != DType::kF32;
    const double mib = 1024.0 * 1024.0, es = c.wt == DType::kF32 ? 4.0 : 2.0;
    const bool big_gu = 2.0 * static_cast<double>(c.I * c.H) * es >= 64 * mib;
    const bool big_down = static_cast<double>(c.I * c.H) * es >= 64 * mib;
    const bool takes = half && (v == "1" || v == "3" || (v == "5" && big_gu));
    const bool silu_bulk = half && v == "3";
    const bool down_bulk = half && (v == "1" || (v == "4" && c.I >= 8192) || (v == "5" && big_down));
    EXPECT_EQ(table.find("silu_mul"), std::string::npos) << what << ": silu_mul not fused\n" << table;
    EXPECT_EQ(table.find("rms_norm"), std::string::npos) << what << ": rms_norm not fused\n" << table;
    if (bulk) {  // 16-bit weights, K a multiple of 8 up to 8,192 (all of them here): on sm_90 only
      EXPECT_EQ(table.find("decode_gemv.fused_bulk") != std::string::npos, takes) << what << "\n" << table;
      EXPECT_EQ(table.find("decode_gemv.bulk") != std::string::npos, down_bulk) << what << " (down)\n"
                                                                                << table;
      EXPECT_EQ(table.find("decode_gemv.silu_bulk") != std::string::npos, silu_bulk)
          << what << " (silu_mul + down)\n"
          << table;
    }
    expect_same_layer(got, unf, what, "fused against the ops one by one");
    expect_same_layer(pr, unf, what, "fused and profiled against the ops one by one");
    const LayerOut want = reference(c, d);
    const double gk = 2e-5 * std::sqrt(static_cast<double>(c.H));
    expect_close(got.a, want.a, 2e-6, what + " norm");
    expect_close(got.q, want.q, gk, what + " q");
    expect_close(got.k, want.k, gk, what + " k");
    expect_close(got.v, want.v, gk, what + " v");
    expect_close(got.gu, want.gu, gk, what + " gate_up");
    expect_close(got.m, want.m, 2 * gk, what + " silu_mul");
    expect_close(got.resid, want.resid, 2e-5 * std::sqrt(static_cast<double>(c.I)) + 2 * gk,
                 what + " residual");
    const int64_t n = d.slots * c.kv_heads * c.D;
    // 16-bit caches: a k/v within f32 rounding of the reference may round to the neighbouring value.
    const double ct = c.cache_t == DType::kF32 ? gk : (c.cache_t == DType::kBF16 ? 8e-3 : 1e-3);
    expect_close(cache_f32(got.kc, c.cache_t, n), cache_f32(want.kc, c.cache_t, n), ct, what + " K cache");
    expect_close(cache_f32(got.vc, c.cache_t, n), cache_f32(want.vc, c.cache_t, n), ct, what + " V cache");
  }
}

TEST(CudaDecodeFusion, LayerOpSequenceFusedEqualsUnfusedBitwiseAndTheReference) {
  check_layer_fusion(nullptr);
}

// VV_CUDA_GEMV_BULK=1 (sm_90): the fused norm + q/k/v, gate_up with its SwiGLU epilogue and the lone
// down projection stream their weights by cp.async.bulk. Fused and unfused (each GEMM alone on the
// bulk kernel) still agree bitwise, as a row's sum depends on K only, and both the reference.
TEST(CudaDecodeFusion, LayerOpSequenceWithBulkGemvsFusedEqualsUnfusedBitwise) {
  check_layer_fusion("VV_CUDA_GEMV_BULK");
}

// VV_CUDA_GEMV_BULK=3: the same, but gate_up streams without the SwiGLU pairing, so that its rows are
// those of the lone bulk GEMV an unfused step runs, and silu_mul is computed in the down projection's
// activation load (its output still written).
TEST(CudaDecodeFusion, LayerOpSequenceWithUnpairedBulkGemvsFusedEqualsUnfusedBitwise) {
  check_layer_fusion("VV_CUDA_GEMV_BULK", "3");
}

// VV_CUDA_GEMV_BULK=4: only the lone one-row GEMVs of 8,192 columns or more (the 7B's down projection)
// on the bulk kernel; the fused launches and the shorter lone ones keep the default kernel, so fused and
// unfused steps still agree bitwise (the down projection is lone in both).
TEST(CudaDecodeFusion, LayerOpSequenceWithLongRowsOnTheBulkGemvFusedEqualsUnfusedBitwise) {
  check_layer_fusion("VV_CUDA_GEMV_BULK", "4");
}

// VV_CUDA_GEMV_BULK=5: only the launches that stream 64 MiB of weights or more take the bulk kernel (of
// these cases the 7B's gate_up, paired with its SwiGLU epilogue, and down; its q/k/v, and every launch of
// the smaller cases, keep the default kernel). A launch's kernel follows from its own size, the same in
// fused and unfused steps, so the two still agree bitwise.
TEST(CudaDecodeFusion, LayerOpSequenceWithBigLaunchesOnTheBulkGemvFusedEqualsUnfusedBitwise) {
  check_layer_fusion("VV_CUDA_GEMV_BULK", "5");
}

// The layer sequence on `base`, and twice on `other`, whose launches may differ but not a row's sums:
// the residual, q, silu_mul and the K cache bitwise equal to base's each time. Returns base's outputs.
LayerOut same_layer_bits_twice(Backend& base, Backend& other, const LayerCase& c, LayerData& d,
                               const std::string& what) {
  const LayerOut want = run_ops(base, c, d);
  for (int rep = 0; rep < 2; ++rep) {
    const LayerOut got = run_ops(other, c, d);
    EXPECT_EQ(got.resid, want.resid) << what << ": the down projection's output differs";
    EXPECT_EQ(got.q, want.q) << what << ": q differs";
    EXPECT_EQ(got.m, want.m) << what << ": silu_mul differs";
    EXPECT_EQ(got.kc, want.kc) << what << ": K cache differs";
  }
  return want;
}

// Whether c's fused norm + q/k/v GEMV goes two rows a warp on device 0 (cuda::decode_gemv_pairs at
// the default's 3 blocks of 8 warps an SM): its rows (q heads + 2 × kv heads, each D wide), 16-bit
// weights, need a second round of the resident warps and fit one round paired.
bool qkv_rows_pair(const LayerCase& c) {
  cudaDeviceProp dp{};
  if (cudaGetDeviceProperties(&dp, 0) != cudaSuccess) return false;
  const int64_t rows = int64_t{c.heads + 2 * c.kv_heads} * c.D, warps = int64_t{dp.multiProcessorCount} * 24;
  return c.wt != DType::kF32 && rows > warps && rows / 2 <= warps;
}

// The balanced GEMV (the default; VV_CUDA_GEMV_BALANCE=0: off): the lone one-row GEMVs (the layer's down
// projection with its residual; o at the 7B) spread their rows over the resident blocks (7 rows a block at
// the 7B's 3,584), and so does the 7B's paired norm + q/k/v (6 pairs a block). A row's sum is the same:
// every output of the layer sequence must be the bits of the unbalanced backend's.
TEST(CudaDecodeFusion, BalancedGemvRowsChangeNoBit) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  // (The bulk GEMV, where set, would take the lone 16-bit launches before the balanced form.)
  auto plain_be = cuda_backend_with({{"VV_CUDA_GEMV_BALANCE", "0"}, {"VV_CUDA_GEMV_BULK", "0"}}, false);
  ASSERT_TRUE(plain_be.is_ok()) << plain_be.status().to_string();
  Backend* plain = plain_be->get();
  auto bal = cuda_backend_with({{"VV_CUDA_GEMV_BALANCE", "1"}, {"VV_CUDA_GEMV_BULK", "0"}}, false);
  ASSERT_TRUE(bal.is_ok()) << bal.status().to_string();
  auto prof = cuda_backend_with(
      {{"VV_CUDA_GEMV_BALANCE", "1"}, {"VV_CUDA_GEMV_BULK", "0"}, {"VV_CUDA_PROFILE", "1"}}, false);
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  const std::vector<LayerCase> cases = {
      {136, 40, 3, 1, 8, DType::kBF16, DType::kBF16, 37},            // fewer rows than blocks
      {1032, 264, 7, 7, 24, DType::kF16, DType::kF32, 1000},         // f16 weights
      {520, 3000, 5, 1, 104, DType::kF32, DType::kF32, 9},           // f32 weights
      {3584, 18944, 28, 4, 128, DType::kBF16, DType::kBF16, 4099}};  // Qwen2.5-7B: 3,584-row down
  uint32_t seed = 700;
  for (const LayerCase& c : cases) {
    const std::string what =
        "H=" + std::to_string(c.H) + " I=" + std::to_string(c.I) + " " + dtype_name(c.wt);
    LayerData d = make_data(c, seed);
    seed += 20;
    const LayerOut want = same_layer_bits_twice(*plain, **bal, c, d, what);
    (void)backend_profile_report(**prof);
    const LayerOut pr = run_ops(**prof, c, d);
    EXPECT_EQ(pr.resid, want.resid) << what << ": the down projection's output differs (profiled)";
    const std::string table = backend_profile_report(**prof);
    EXPECT_NE(table.find("decode_gemv.balanced"), std::string::npos) << what << ": not balanced\n" << table;
    // The fused norm + q/k/v balanced too where its rows go two a warp (the 7B's 4,608).
    if (qkv_rows_pair(c)) {
      EXPECT_NE(table.find("decode_gemv.fused_paired_balanced"), std::string::npos)
          << what << ": the paired q/k/v not balanced\n"
          << table;
    }
    const LayerOut ref = reference(c, d);
    expect_close(want.resid, ref.resid,
                 2e-5 * std::sqrt(static_cast<double>(c.I)) + 4e-5 * std::sqrt(static_cast<double>(c.H)),
                 what + " residual");
  }
}

// The fused norm + q/k/v GEMV, whose rows need a second round of the resident warps (the 7B's 4,608
// against 3,168 on 132 SMs), computes two rows a warp (n and N/2 + n of each job) in one round (the
// default; VV_CUDA_GEMV_PAIR=0: a row a warp). A row's sum keeps its order: every output of the layer
// sequence must be the bits of the unpaired backend's, and the paired launch is seen in the profile at
// the 7B's shape (smaller shapes fit one round unpaired and keep the one-row launch).
TEST(CudaDecodeFusion, PairedGemvRowsChangeNoBit) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  auto plain_be = cuda_backend_with({{"VV_CUDA_GEMV_PAIR", "0"}, {"VV_CUDA_GEMV_BULK", "0"}}, false);
  ASSERT_TRUE(plain_be.is_ok()) << plain_be.status().to_string();
  Backend* plain = plain_be->get();
  auto paired = backend_with("VV_CUDA_GEMV_BULK", "0");
  ASSERT_TRUE(paired.is_ok()) << paired.status().to_string();
  auto prof = cuda_backend_with({{"VV_CUDA_GEMV_BULK", "0"}, {"VV_CUDA_PROFILE", "1"}}, false);
  ASSERT_TRUE(prof.is_ok()) << prof.status().to_string();
  const std::vector<LayerCase> cases = {
      {1032, 264, 7, 7, 24, DType::kF16, DType::kF32, 1000},         // fits one round: not paired
      {3584, 18944, 28, 4, 128, DType::kBF16, DType::kBF16, 4099}};  // Qwen2.5-7B
  uint32_t seed = 760;
  for (const LayerCase& c : cases) {
    const std::string what =
        "H=" + std::to_string(c.H) + " I=" + std::to_string(c.I) + " " + dtype_name(c.wt);
    LayerData d = make_data(c, seed);
    seed += 20;
    const LayerOut want = same_layer_bits_twice(*plain, **paired, c, d, what);
    (void)backend_profile_report(**prof);
    const LayerOut pr = run_ops(**prof, c, d);
    EXPECT_EQ(pr.q, want.q) << what << ": q differs (profiled)";
    const std::string table = backend_profile_report(**prof);
    if (qkv_rows_pair(c)) {
      EXPECT_NE(table.find("decode_gemv.fused_paired"), std::string::npos) << what << ": not paired\n"
                                                                           << table;
    } else {
      EXPECT_EQ(table.find("decode_gemv.fused_paired"), std::string::npos) << what << ": paired\n" << table;
    }
  }
}

// A decode step from one layer's o projection (or, with `attention`, its attention) to the next layer's
// kv_write, as Qwen2Decoder::run_layer issues it: [attention,] o (+ residual), norm, gate_up, silu_mul,
// down (+ residual), norm, q/k/v, rope, kv_write. VV_CUDA_DECODE_CHAIN=1 runs it as one decode_chain
// launch on sm_90 (16-bit weights; the attention too with VV_CUDA_CHAIN_ATTN=1 and a 16-bit cache).
LayerOut run_chain_ops(Backend& be, const LayerCase& c, LayerData& d, bool attention) {
  LayerOnDevice L(be, c, d, attention);
  if (attention) be.paged_attention(L.q0.t, L.rows, L.cache, L.shape, L.att.t);
  be.gemm(L.att.t, L.wproj.t, nullptr, L.resid.t, Epilogue::kAddResidual);
  L.mlp_block(be, L.resid.t);
  L.attention_block(be, c, L.resid.t);
  return L.read(be, d);
}

// The CPU's scalar reference of run_chain_ops.
LayerOut chain_reference(const LayerCase& c, LayerData d, bool attention) {
  LayerOnHost L(c, d);
  if (attention) {
    Tensor att = d.att.view();
    ref::paged_attention(d.q0.view(), L.rows, L.cache, L.shape, att);
  }
  ref::gemm(d.att.view(), d.wproj.view(), nullptr, L.rv, Epilogue::kAddResidual);
  L.mlp_block(c, d, L.rv);
  L.attention_block(c, d, L.rv);
  return L.read(d);
}

// VV_CUDA_DECODE_CHAIN=1 (sm_90, 16-bit weights): the sequence from one layer's o projection to the
// next layer's kv_write runs as one persistent kernel (four GEMV phases and rope_kv_write, grid
// barriers between them, one weight ring across them). Every output must be the bits of the same ops
// launched one by one (VV_CUDA_GRAPHS=0, each GEMM alone on the bulk kernel) and of the fused step
// without the chain (VV_CUDA_GEMV_BULK=3), run after run (the barrier's counters persist between
// launches), and near the CPU reference. Shapes: fewer tiles than blocks, the block norm order
// (K > 1024), 8 chunks a thread (K = 12,000), f16, and the 7B's.
// `attention`: the sequence starts at the attention and VV_CUDA_CHAIN_ATTN=1 chains it too; `extra`: a
// switch set for every backend (VV_CUDA_ATTN_LEAN).
void check_chain(bool attention, const char* extra = nullptr) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
  auto make = [&](std::vector<std::pair<const char*, const char*>> env, bool chained) {
    if (chained) env.emplace_back("VV_CUDA_DECODE_CHAIN", "1");
    if (chained && attention) env.emplace_back("VV_CUDA_CHAIN_ATTN", "1");
    if (extra) env.emplace_back(extra, "1");
    return cuda_backend_with(env, false);
  };
  auto chain = make({{"VV_CUDA_CHAIN_TRACE", "1"}}, true);  // traced: the report's last lines
  auto eager = make({{"VV_CUDA_GRAPHS", "0"}}, true);
  auto bulk3 = make({{"VV_CUDA_GEMV_BULK", "3"}}, false);
  auto prof = make({{"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(chain.is_ok() && eager.is_ok() && bulk3.is_ok() && prof.is_ok());
  const std::vector<LayerCase> cases = {
      {136, 40, 3, 1, 8, DType::kBF16, DType::kBF16, 37},            // fewer tiles than blocks
      {1032, 264, 7, 7, 24, DType::kBF16, DType::kF32, 1000},        // > 1024: the block norm order
      {520, 12000, 5, 1, 104, DType::kBF16, DType::kBF16, 9},        // down: 8 chunks a thread
      {1024, 8, 2, 1, 6, DType::kF16, DType::kF16, 0},               // f16
      {48, 128, 14, 2, 16, DType::kF32, DType::kF32, 5},             // f32 weights: no chain
      {3584, 18944, 28, 4, 128, DType::kBF16, DType::kBF16, 4099}};  // Qwen2.5-7B
  uint32_t seed = 1300;
  for (const LayerCase& c : cases) {
    const std::string what = case_name(c);
    LayerData d = make_data(c, seed);
    seed += 20;
    const LayerOut unf = run_chain_ops(**eager, c, d, attention);
    const LayerOut b3 = run_chain_ops(**bulk3, c, d, attention);
    (void)backend_profile_report(**prof);
    const LayerOut pr = run_chain_ops(**prof, c, d, attention);
    const std::string table = backend_profile_report(**prof);
    const bool takes = sm90 && c.wt != DType::kF32;
    // The chain's attention phase is the SIMT decode attention's block, whose plan takes head dims that
    // are multiples of 4 only (the f16 case's 6 runs its attention as a kernel before the chain).
    const bool takes_attn = takes && attention && c.cache_t != DType::kF32 && c.D % 4 == 0;
    EXPECT_EQ(table.find("decode_chain") != std::string::npos, takes) << what << "\n" << table;
    EXPECT_EQ(table.find("decode_chain.attn") != std::string::npos, takes_attn) << what << "\n" << table;
    if (takes_attn) {
      EXPECT_EQ(table.find("paged_attention"), std::string::npos) << what << ": attention outside the chain\n"
                                                                  << table;
    }
    if (takes) {
      EXPECT_EQ(table.find("decode_gemv"), std::string::npos) << what << ": a GEMV outside the chain\n"
                                                              << table;
      EXPECT_EQ(table.find("rope_kv_write"), std::string::npos) << what << ": rope outside the chain\n"
                                                                << table;
    }
    expect_same_layer(b3, unf, what, "the fused step without the chain against the ops one by one");
    expect_same_layer(pr, unf, what, "chained, profiled");
    (void)backend_profile_report(**chain);
    for (int rep = 0; rep < 3; ++rep)
      expect_same_layer(run_chain_ops(**chain, c, d, attention), unf, what,
                        "chained and traced, run " + std::to_string(rep));
    const std::string trace = backend_profile_report(**chain);
    EXPECT_EQ(trace.find("decode chain trace") != std::string::npos, takes) << what << "\n" << trace;
    const LayerOut want = chain_reference(c, d, attention);
    const double gk = 2e-5 * std::sqrt(static_cast<double>(c.H));
    const double rk = 2e-5 * std::sqrt(static_cast<double>(c.I)) + 4 * gk;
    if (attention) expect_close(unf.att, want.att, 1e-4, what + " attention");
    expect_close(unf.a2, want.a2, 4e-6, what + " second norm");
    expect_close(unf.gu, want.gu, 2 * gk, what + " gate_up");
    expect_close(unf.m, want.m, 4 * gk, what + " silu_mul");
    expect_close(unf.resid, want.resid, rk, what + " residual");
    expect_close(unf.a, want.a, 4e-6 + 2 * rk, what + " norm");
    expect_close(unf.q, want.q, 4 * rk, what + " q");
    expect_close(unf.k, want.k, 4 * rk, what + " k");
    expect_close(unf.v, want.v, 4 * rk, what + " v");
  }
}

TEST(CudaDecodeFusion, ChainedLayerGivesTheBitsOfItsLaunchesOneByOne) {
  check_chain(false);
}

// VV_CUDA_CHAIN_ATTN=1: the chain starts at the one-row SIMT decode attention (its blocks spread over the
// chain's grid, the last block of each kv head merging the splits as the kernel's does), so the whole
// layer is one launch. Every output, the attention's included, keeps the bits of the ops one by one
// (16-bit caches; the f32 cache's attention stays a kernel of its own), with and without the lean form.
TEST(CudaDecodeFusion, ChainedLayerWithItsAttentionGivesTheBitsOfItsLaunchesOneByOne) {
  check_chain(true);
  check_chain(true, "VV_CUDA_ATTN_LEAN");
}

// One decode row's attention, discard(q), then the o projection with the residual, as
// Qwen2Decoder::run_layer issues them; returns (attention output, x).
struct AttnCase {
  int heads, kv_heads, D;
  int32_t pos;
};
std::pair<std::vector<float>, std::vector<float>> attn_then_o(Backend& be, const AttnCase& c, uint32_t seed,
                                                              bool reference) {
  const int64_t qd = int64_t{c.heads} * c.D, kvd = int64_t{c.kv_heads} * c.D, H = qd;
  const int bs = 16;
  const int nblocks = c.pos / bs + 1;
  std::vector<int32_t> table(static_cast<size_t>(nblocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  const int64_t slots = int64_t{nblocks + 1} * bs;
  HostMatrix q = random_matrix(1, qd, DType::kF32, seed + 1, 2.0f);
  HostMatrix kc = random_matrix(slots, kvd, DType::kBF16, seed + 2),
             vc = random_matrix(slots, kvd, DType::kBF16, seed + 3);
  HostMatrix wo = random_matrix(H, qd, DType::kBF16, seed + 4, 1.0f / std::sqrt(static_cast<float>(qd)));
  HostMatrix x = random_matrix(1, H, DType::kF32, seed + 5);
  const AttentionShape shape{c.heads, c.kv_heads, c.D, 1.0f / std::sqrt(static_cast<float>(c.D))};
  std::vector<int32_t> pos = {c.pos}, seq = {0};
  if (reference) {
    HostMatrix attn = random_matrix(1, qd, DType::kF32, 1);
    AttentionRows rows;
    rows.row_seq = Tensor::vector(seq.data(), DType::kI32, 1);
    rows.row_pos = Tensor::vector(pos.data(), DType::kI32, 1);
    rows.block_tables = Tensor::matrix(table.data(), DType::kI32, 1, nblocks);
    rows.block_size = bs;
    const KvLayer cache{kc.view(), vc.view()};
    Tensor av = attn.view(), xv = x.view();
    ref::paged_attention(q.view(), rows, cache, shape, av);
    ref::gemm(av, wo.view(), nullptr, xv, Epilogue::kAddResidual);
    return {host_rows(av), host_rows(xv)};
  }
  DeviceMatrix qd_ = to_device(be, q), kd = to_device(be, kc), vd = to_device(be, vc), wd = to_device(be, wo),
               xd = to_device(be, x);
  DeviceMatrix pd = to_device_i32(be, pos), sd = to_device_i32(be, seq), td = to_device_i32(be, table);
  DeviceMatrix attn = poisoned(be, 1, qd);
  AttentionRows rows;
  rows.row_seq = sd.t;
  rows.row_pos = pd.t;
  rows.block_tables = Tensor::matrix(td.buf.data(), DType::kI32, 1, nblocks);
  rows.block_size = bs;
  const KvLayer cache{kd.t, vd.t};
  be.synchronize();
  be.paged_attention(qd_.t, rows, cache, shape, attn.t);
  be.discard(qd_.t);
  be.gemm(attn.t, wd.t, nullptr, xd.t, Epilogue::kAddResidual);
  std::vector<float> a = download_f32(be, attn.t);
  return {a, download_f32(be, xd.t)};
}

// VV_CUDA_L2_PREFETCH=1 and =2 (sm_90): the o projection's weights prefetched into L2 by a kernel
// before the decode attention. A hint: the attention output and x must be the bits of the run without
// it (and near the reference); on sm_90 the profile must show the prefetch (the 7B's o, 25.7 MB, is
// under half the H200's L2), elsewhere no prefetch.
TEST(CudaDecodeFusion, L2PrefetchOfTheOProjectionChangesNoBit) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
  auto with = [](const char* mode, bool profile) {
    std::vector<std::pair<const char*, const char*>> env = {{"VV_CUDA_L2_PREFETCH", mode}};
    if (profile) env.emplace_back("VV_CUDA_PROFILE", "1");
    return cuda_backend_with(env, true);
  };
  auto after = with("1", false), before = with("2", false), prof = with("1", true);
  ASSERT_TRUE(after.is_ok() && before.is_ok() && prof.is_ok());
  const std::vector<AttnCase> cases = {
      {28, 4, 128, 1030}, {28, 4, 128, 5}, {14, 2, 64, 37}, {12, 3, 128, 300}};
  uint32_t seed = 900;
  for (const AttnCase& c : cases) {
    const std::string what = std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + "x" +
                             std::to_string(c.D) + " pos " + std::to_string(c.pos);
    const auto want = attn_then_o(*plain, c, seed, true);
    const auto base = attn_then_o(*plain, c, seed, false);
    for (Backend* be : {after->get(), before->get(), prof->get()}) {
      for (int rep = 0; rep < 2; ++rep) {  // twice: the L2 holds the weights the second time
        const auto got = attn_then_o(*be, c, seed, false);
        EXPECT_EQ(got.first, base.first) << what << ": attention output differs with the prefetch";
        EXPECT_EQ(got.second, base.second) << what << ": x differs with the prefetch";
      }
    }
    expect_close(base.first, want.first, 1e-4, what + " attention");
    expect_close(base.second, want.second, 2e-5 * std::sqrt(static_cast<double>(c.heads * c.D)) + 1e-4,
                 what + " x");
    const std::string table = backend_profile_report(**prof);
    EXPECT_EQ(table.find("l2_prefetch") != std::string::npos, sm90) << what << "\n" << table;
    seed += 10;
  }
}

// A batched decode step's attention (one row per sequence, the decode kernel's key splits and their
// merge): many sequences of unequal lengths over a shuffled paged cache, against the reference.
TEST(CudaDecodeFusion, BatchedDecodeAttentionOverUnequalContexts) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  struct Shape {
    int heads, kv_heads, D;
    DType cache_t;
    int S, max_len;
  };
  for (const Shape& sh : std::vector<Shape>{{28, 4, 128, DType::kBF16, 64, 700},
                                            {28, 4, 128, DType::kF32, 3, 3000},
                                            {14, 2, 16, DType::kF32, 17, 90},
                                            {8, 1, 32, DType::kF16, 5, 300},
                                            {6, 6, 4, DType::kBF16, 2, 40}}) {
    const int bs = 16;
    std::mt19937 rng(static_cast<uint32_t>(sh.S * 31 + sh.D));
    std::vector<int> lens(static_cast<size_t>(sh.S));
    for (int& L : lens) L = 1 + static_cast<int>(rng() % static_cast<unsigned>(sh.max_len));
    lens[0] = sh.max_len;  // the widest table
    int max_blocks = 0, total = 0;
    for (int L : lens) {
      max_blocks = std::max(max_blocks, (L + bs) / bs);
      total += (L + bs) / bs;
    }
    std::vector<int32_t> perm(static_cast<size_t>(total));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables(static_cast<size_t>(sh.S) * max_blocks, 0), row_seq, row_pos;
    int used = 0;
    for (int s = 0; s < sh.S; ++s) {
      for (int b = 0; b < (lens[s] + bs) / bs; ++b) tables[s * max_blocks + b] = perm[used++];
      row_seq.push_back(s);
      row_pos.push_back(lens[s]);
    }
    const int64_t width = int64_t{sh.kv_heads} * sh.D, qw = int64_t{sh.heads} * sh.D,
                  slots = int64_t{total} * bs;
    HostMatrix kc = random_matrix(slots, width, sh.cache_t, 81),
               vc = random_matrix(slots, width, sh.cache_t, 82);
    HostMatrix q = random_matrix(sh.S, qw, DType::kF32, 83, 2.0f);
    AttentionRows rows;
    rows.row_seq = Tensor::vector(row_seq.data(), DType::kI32, sh.S);
    rows.row_pos = Tensor::vector(row_pos.data(), DType::kI32, sh.S);
    rows.block_tables = Tensor::matrix(tables.data(), DType::kI32, sh.S, max_blocks);
    rows.block_size = bs;
    const AttentionShape shape{sh.heads, sh.kv_heads, sh.D, 1.0f / std::sqrt(static_cast<float>(sh.D))};
    KvLayer hc{Tensor::matrix(kc.bytes.data(), sh.cache_t, slots, width),
               Tensor::matrix(vc.bytes.data(), sh.cache_t, slots, width)};
    HostMatrix want = random_matrix(sh.S, qw, DType::kF32, 84);
    Tensor want_t = want.view();
    ref::paged_attention(q.view(), rows, hc, shape, want_t);
    DeviceMatrix dkc = to_device(*gpu, kc), dvc = to_device(*gpu, vc), dq = to_device(*gpu, q);
    DeviceMatrix dtab = to_device_i32(*gpu, tables), ds = to_device_i32(*gpu, row_seq),
                 dp = to_device_i32(*gpu, row_pos);
    AttentionRows drows = rows;
    drows.row_seq = ds.t;
    drows.row_pos = dp.t;
    drows.block_tables = Tensor::matrix(dtab.buf.data(), DType::kI32, sh.S, max_blocks);
    KvLayer dcache{Tensor::matrix(dkc.buf.data(), sh.cache_t, slots, width),
                   Tensor::matrix(dvc.buf.data(), sh.cache_t, slots, width)};
    const std::string what = "decode attention " + std::to_string(sh.S) + " rows " +
                             std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + "x" +
                             std::to_string(sh.D) + " " + dtype_name(sh.cache_t);
    for (int rep = 0; rep < 3; ++rep) {  // the split counters must be left ready for the next launch
      DeviceMatrix dout = poisoned(*gpu, sh.S, qw);
      gpu->paged_attention(dq.t, drows, dcache, shape, dout.t);
      expect_close(download_f32(*gpu, dout.t), host_rows(want_t), 2e-6,
                   what + " launch " + std::to_string(rep), 1.0);
    }
  }
}

// A one-row rms_norm (x, g) and one GEMM of its output by w (N × K): the decoder's final norm and LM head.
struct NormGemmCase {
  int64_t K, N;
  HostMatrix x, g, w;
  NormGemmCase(int64_t k, int64_t n, DType wt, uint32_t seed)
      : K(k),
        N(n),
        x(random_matrix(1, k, DType::kF32, seed, 3.0f)),
        g(random_matrix(1, k, DType::kF32, seed + 1, 1.0f)),
        w(random_matrix(n, k, wt, seed + 2, 1.0f / std::sqrt(static_cast<float>(k)))) {}
  // The two ops on be (one flush at the first download): the GEMM's output, the norm's in *normed.
  std::vector<float> run(Backend& be, std::vector<float>& normed) {
    DeviceMatrix dx = to_device(be, x), dg = to_device(be, g), dw = to_device(be, w);
    HostMatrix zero_a = random_matrix(1, K, DType::kF32, 1), zero_o = random_matrix(1, N, DType::kF32, 1);
    DeviceMatrix da = to_device(be, zero_a), dout = to_device(be, zero_o);
    be.rms_norm(dx.t, Tensor::vector(dg.t.data, DType::kF32, K), 1e-6f, da.t);
    be.gemm(da.t, dw.t, nullptr, dout.t, Epilogue::kNone);
    normed = download_f32(be, da.t);
    return download_f32(be, dout.t);
  }
  // The ops on `plain` (VV_CUDA_GRAPHS=0) and on `fused` (VV_CUDA_PROFILE=1: fused, its table in
  // *table): one GEMV launch with the norm prologue, bitwise the two launches (both outputs).
  struct Runs {
    std::vector<float> want, got, a_plain, a_fused;
    std::string table;
  };
  Runs fused_against_plain(Backend& plain, Backend& fused, const std::string& what) {
    Runs r;
    r.want = run(plain, r.a_plain);
    (void)backend_profile_report(fused);
    r.got = run(fused, r.a_fused);
    r.table = backend_profile_report(fused);
    EXPECT_NE(r.table.find("decode_gemv.fused"), std::string::npos) << what << ": not fused\n" << r.table;
    EXPECT_EQ(std::memcmp(r.got.data(), r.want.data(), r.want.size() * 4), 0)
        << what << ": the GEMM's output differs";
    EXPECT_EQ(std::memcmp(r.a_fused.data(), r.a_plain.data(), r.a_plain.size() * 4), 0)
        << what << ": the norm's output differs";
    return r;
  }
  // Both outputs against the CPU reference.
  void expect_reference(const std::vector<float>& normed, const std::vector<float>& out,
                        const std::string& what) {
    std::vector<float> ra(static_cast<size_t>(K)), ro(static_cast<size_t>(N));
    Tensor rav = Tensor::matrix(ra.data(), DType::kF32, 1, K),
           rov = Tensor::matrix(ro.data(), DType::kF32, 1, N);
    ref::rms_norm(x.view(), Tensor::vector(g.bytes.data(), DType::kF32, K), 1e-6f, rav);
    ref::gemm(rav, w.view(), nullptr, rov, Epilogue::kNone);
    expect_close(normed, ra, 1e-6, what + " norm");
    expect_close(out, ro, 2e-5 * std::sqrt(static_cast<double>(K)), what + " GEMM");
  }
};

// A one-row norm and one GEMM of its output alone (the decoder's final norm and LM head) run as one GEMV
// launch with the norm prologue, whose bits are those of the two launches one by one (VV_CUDA_GRAPHS=0;
// the norm's output too), within the CPU reference's tolerance; the 7B's LM head, a prime N, f16
// weights, the smallest K. VV_CUDA_GEMV_NORM_LONE=0 keeps the norm's own launch, =1 takes the prologue's
// instance of 3 blocks an SM, =4 (the default) the one of 4: the same bits.
TEST(CudaDecodeFusion, NormIntoALoneGemvGivesTheBitsOfTheTwoLaunches) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  auto plain_be = backend_with("VV_CUDA_GRAPHS", "0");
  ASSERT_TRUE(plain_be.is_ok()) << plain_be.status().to_string();
  auto fused_be = backend_with("VV_CUDA_PROFILE", "1");
  ASSERT_TRUE(fused_be.is_ok()) << fused_be.status().to_string();
  auto apart_be = cuda_backend_with({{"VV_CUDA_GEMV_NORM_LONE", "0"}, {"VV_CUDA_PROFILE", "1"}}, false);
  ASSERT_TRUE(apart_be.is_ok()) << apart_be.status().to_string();
  auto four_be = backend_with("VV_CUDA_GEMV_NORM_LONE", "4");
  ASSERT_TRUE(four_be.is_ok()) << four_be.status().to_string();
  auto three_be = backend_with("VV_CUDA_GEMV_NORM_LONE", "1");
  ASSERT_TRUE(three_be.is_ok()) << three_be.status().to_string();
  struct Case {
    int64_t K, N;
    DType wt;
  };
  uint32_t seed = 900;
  for (const Case& c : std::vector<Case>{{3584, 152064, DType::kBF16},
                                         {3584, 10007, DType::kBF16},
                                         {1032, 4099, DType::kF16},
                                         {8, 1, DType::kBF16}}) {
    const std::string what =
        "K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " " + dtype_name(c.wt);
    NormGemmCase ng(c.K, c.N, c.wt, seed);
    seed += 10;
    const NormGemmCase::Runs r = ng.fused_against_plain(**plain_be, **fused_be, what);
    const std::vector<float>& want = r.want;
    std::vector<float> a_apart;
    (void)backend_profile_report(**apart_be);
    const std::vector<float> apart = ng.run(**apart_be, a_apart);
    const std::string apart_table = backend_profile_report(**apart_be);
    EXPECT_NE(apart_table.find("rms_norm"), std::string::npos) << what << ": fused with the switch off\n"
                                                               << apart_table;
    EXPECT_EQ(std::memcmp(apart.data(), want.data(), want.size() * 4), 0)
        << what << ": differs with the switch off";
    for (const auto& [be, blocks] : {std::pair{four_be->get(), 4}, std::pair{three_be->get(), 3}}) {
      std::vector<float> a_inst;
      const std::vector<float> inst = ng.run(*be, a_inst);
      EXPECT_EQ(std::memcmp(inst.data(), want.data(), want.size() * 4), 0)
          << what << ": differs at " << blocks << " blocks an SM";
      EXPECT_EQ(std::memcmp(a_inst.data(), r.a_plain.data(), r.a_plain.size() * 4), 0)
          << what << ": the norm differs at " << blocks;
    }
    ng.expect_reference(r.a_fused, r.got, what);
  }
}

// VV_CUDA_GEMV_BULK=5 (sm_90): a norm and one GEMM of its output (the final norm and the LM head) whose
// weights are 64 MiB or more stream on the bulk kernel with the norm prologue (a smaller one keeps the
// default kernel's fused launch); the unfused step (the norm, then the GEMM alone, on the bulk kernel by
// its size) gives the same bits, and both the reference's values. Elsewhere the switch changes nothing.
TEST(CudaDecodeFusion, BigNormedGemvOnTheBulkGemvGivesTheBitsOfTheTwoLaunches) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  auto fused_be = cuda_backend_with({{"VV_CUDA_GEMV_BULK", "5"}, {"VV_CUDA_PROFILE", "1"}}, false);
  ASSERT_TRUE(fused_be.is_ok()) << fused_be.status().to_string();
  auto plain_be = cuda_backend_with({{"VV_CUDA_GEMV_BULK", "5"}, {"VV_CUDA_GRAPHS", "0"}}, false);
  ASSERT_TRUE(plain_be.is_ok()) << plain_be.status().to_string();
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
  struct Case {
    int64_t K, N;
    DType wt;
    bool big;
  };
  uint32_t seed = 950;
  for (const Case& c : std::vector<Case>{{3584, 152064, DType::kBF16, true},  // the 7B's LM head: 1.09 GB
                                         {4104, 8191, DType::kF16, true},     // 64.1 MiB, odd rows
                                         {1032, 4099, DType::kBF16, false}}) {
    const std::string what =
        "K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " " + dtype_name(c.wt);
    NormGemmCase ng(c.K, c.N, c.wt, seed);
    seed += 10;
    const NormGemmCase::Runs r = ng.fused_against_plain(**plain_be, **fused_be, what);
    EXPECT_EQ(r.table.find("decode_gemv.fused_bulk") != std::string::npos, sm90 && c.big) << what << "\n"
                                                                                          << r.table;
    ng.expect_reference(r.a_fused, r.got, what);
  }
}

// The argmax tests' rows: f32 and bf16 (whose maxima often tie, and ties go to the lowest index); lengths
// of 1, odd, prime (65,537) and the 7B's vocabulary; 1 to 128 rows (1 to 256 slices a row); rows at the
// start of their storage and one column in (a view whose start and stride rule out 16-byte loads).
// fn(host rows, device rows, what) for each, the rows random (seeded by salt·V + R + shift) and `edit`
// applied to the host copy (HostMatrix, ld, shift) before the upload.
template <typename Edit, typename Fn>
void for_each_argmax_case(Backend& gpu, int64_t salt, Edit edit, Fn fn) {
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int64_t V : {1, 7, 1000, 65537, 152064})
      for (int64_t R : {1, 3, 64, 128})
        for (int64_t shift : {0, 1}) {
          const int64_t ld = V + shift, eb = dt == DType::kF32 ? 4 : 2;
          HostMatrix l = random_matrix(R, ld, dt, static_cast<uint32_t>(salt * V + R + shift), 5.0f);
          edit(l, ld, shift);
          Tensor hv = Tensor::matrix(l.bytes.data() + shift * eb, dt, R, V, ld);
          DeviceMatrix dl = to_device(gpu, l);
          Tensor dv = Tensor::matrix(static_cast<char*>(dl.t.data) + shift * eb, dt, R, V, ld);
          fn(hv, dv,
             std::string(dtype_name(dt)) + " V=" + std::to_string(V) + " rows=" + std::to_string(R) +
                 " shift=" + std::to_string(shift));
        }
}

// The argmax over random rows (for_each_argmax_case) against the reference.
TEST(CudaDecodeFusion, ArgmaxOverManyBlocksMatchesTheReferenceOnRandomRows) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for_each_argmax_case(
      *gpu, 1, [](HostMatrix&, int64_t, int64_t) {},
      [&](const Tensor& hv, const Tensor& dv, const std::string& what) {
        const int64_t R = hv.rows();
        std::vector<int32_t> want(static_cast<size_t>(R));
        Tensor wt = Tensor::vector(want.data(), DType::kI32, R);
        ref::argmax(hv, wt);
        DeviceMatrix dout = to_device_i32(*gpu, std::vector<int32_t>(R, -7));
        gpu->argmax(dv, dout.t);
        std::vector<int32_t> got(static_cast<size_t>(R));
        gpu->synchronize();
        gpu->download(got.data(), dout.buf.data(), R * 4);
        EXPECT_EQ(got, want) << "argmax " << what;
      });
}

// argmax_logprob against the reference (ref::argmax, ref::logprob_at: sums in double) over the same rows,
// with a −inf entry in the second f32 row: ids equal argmax's, logprobs within f32 summation error (a
// slice's sum of up to 1,024 exps in f32, rescaled as its max rises: 1e-5 relative); and a row's value is
// the same bits in a launch of one row as in a launch of many (its slices do not follow the row count).
TEST(CudaDecodeFusion, ArgmaxLogprobMatchesTheReferenceAndIsTheSameBitsAlone) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for_each_argmax_case(
      *gpu, 3,
      [](HostMatrix& l, int64_t ld, int64_t shift) {
        if (l.dtype == DType::kF32 && l.rows > 1 && ld - shift > 3) l.f32()[1 * ld + shift + 2] = -INFINITY;
      },
      [&](const Tensor& hv, const Tensor& dv, const std::string& what) {
        const int64_t R = hv.rows();
        std::vector<int32_t> want(static_cast<size_t>(R));
        std::vector<float> want_lp(static_cast<size_t>(R));
        Tensor wt = Tensor::vector(want.data(), DType::kI32, R),
               wl = Tensor::vector(want_lp.data(), DType::kF32, R);
        ref::argmax(hv, wt);
        ref::logprob_at(hv, wt, wl);
        DeviceMatrix dout = to_device_i32(*gpu, std::vector<int32_t>(2 * R, -7));
        Tensor di = Tensor::vector(dout.buf.data(), DType::kI32, R);
        Tensor dlp = Tensor::vector(static_cast<int32_t*>(dout.buf.data()) + R, DType::kF32, R);
        gpu->argmax_logprob(dv, di, dlp);
        std::vector<int32_t> got(static_cast<size_t>(2 * R));
        gpu->synchronize();
        gpu->download(got.data(), dout.buf.data(), 2 * R * 4);
        EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + R), want) << what;
        std::vector<float> lp(static_cast<size_t>(R));
        std::memcpy(lp.data(), got.data() + R, R * 4);
        for (int64_t r = 0; r < R; ++r) {
          EXPECT_NEAR(lp[r], want_lp[r], 1e-5 * (1.0 + std::fabs(want_lp[r]))) << what << " row " << r;
          EXPECT_LE(lp[r], 0.0f) << what << " row " << r;
        }
        // The last row alone: the same id and the same bits.
        const int64_t r = R - 1;
        DeviceMatrix d1 = to_device_i32(*gpu, std::vector<int32_t>(2, -7));
        Tensor i1 = Tensor::vector(d1.buf.data(), DType::kI32, 1);
        Tensor l1 = Tensor::vector(static_cast<int32_t*>(d1.buf.data()) + 1, DType::kF32, 1);
        gpu->argmax_logprob(dv.row_slice(r, 1), i1, l1);
        std::vector<int32_t> one(2);
        gpu->synchronize();
        gpu->download(one.data(), d1.buf.data(), 8);
        EXPECT_EQ(one[0], want[r]) << what << ": the last row alone";
        EXPECT_EQ(one[1], got[R + r]) << what << ": the last row's logprob alone (bits)";
      });
}

// The argmax's slices (host only): every element in exactly one slice, none empty, 16-byte loads only where
// the start and the stride allow them, about four blocks an SM, at most 256 slices a row.
TEST(CudaArgmaxPlan, SlicesCoverTheRowsWithWideLoadsWhereTheyFit) {
  struct Case {
    int64_t rows, V, eb, ld;
    bool aligned;
    int sms, parts, vec;
  };
  for (const Case& c : std::vector<Case>{{128, 152064, 4, 152064, true, 132, 5, 4},
                                         {64, 152064, 4, 152064, true, 132, 9, 4},
                                         {1, 152064, 4, 152064, true, 132, 149, 4},
                                         {1, 152064, 2, 152064, true, 132, 149, 8},
                                         {1, 152064, 2, 152068, true, 132, 149, 1},
                                         {3, 65537, 4, 65537, true, 132, 65, 1},
                                         {3, 65537, 4, 65540, false, 132, 65, 1},
                                         {1, 1000000, 4, 1000000, true, 132, 256, 4},
                                         {1000, 152064, 4, 152064, true, 132, 1, 4},
                                         {2, 7, 2, 8, true, 132, 1, 8},
                                         {1, 1, 4, 1, true, 0, 1, 1}}) {
    const std::string what = std::to_string(c.rows) + " rows of " + std::to_string(c.V) + " (" +
                             std::to_string(c.eb) + " bytes, stride " + std::to_string(c.ld) + ")";
    const cuda::ArgmaxPlan p = cuda::plan_argmax(c.rows, c.V, c.eb, c.ld, c.aligned, c.sms);
    EXPECT_EQ(p.parts, c.parts) << what;
    EXPECT_EQ(p.vec, c.vec) << what;
    EXPECT_EQ(p.len % p.vec, 0) << what;
    EXPECT_GE(p.len * p.parts, c.V) << what << ": every element in a slice";
    EXPECT_LT(p.len * (p.parts - 1), c.V) << what << ": no empty slice";
    EXPECT_LE(p.parts, 256) << what;
  }
  EXPECT_EQ(cuda::plan_argmax(0, 100, 4, 100, true, 132).parts, 0);
  EXPECT_EQ(cuda::plan_argmax(4, 0, 4, 0, true, 132).parts, 0);
}

}  // namespace
}  // namespace vv::test
