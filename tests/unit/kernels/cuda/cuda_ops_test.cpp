// Every op of the CUDA backend against the CPU's scalar reference (kernels/cpu/reference_ops) over
// odd, prime and production shapes (3584 hidden, 28/4 heads of 128, 18944 ffn, 152064 vocab), each
// weight dtype, strided and overlapping views. Outputs are poisoned with NaN first, so an element
// the kernel never writes fails. Labelled gpu: skipped with the reason where no GPU is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "kernels/cpu/reference_ops.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

// Round every element of an F32 host matrix to a 16-bit type (what the bf16 GEMM path does to its
// activation operand), so the reference sees the same operands.
HostMatrix rounded(const HostMatrix& a, DType to) {
  HostMatrix r = a;
  float* p = r.f32();
  for (int64_t i = 0; i < r.rows * r.stride; ++i) {
    p[i] = to == DType::kF16 ? f16_to_f32(cpu::f32_to_f16(p[i])) : bf16_to_f32(f32_to_bf16(p[i]));
    r.f[i] = p[i];
  }
  return r;
}

struct GemmCase {
  int64_t M, N, K;
  DType wt;
  Epilogue ep;
  bool bias;
};

// One GEMM on the GPU and on the reference (the CPU backend's AVX2 path for the big ones, which is
// itself tested against the scalar reference).
void check_gemm(Backend& gpu, const GemmCase& c, bool bf16_compute, int64_t a_stride = -1, int64_t out_stride = -1,
                uint32_t seed = 1) {
  const int64_t lda = a_stride < 0 ? c.K : a_stride;
  // Overlapping rows (lda < K) need rows·lda + K elements of storage.
  const int64_t a_rows_storage = lda >= c.K ? c.M : (c.M * lda + c.K + lda - 1) / lda;
  HostMatrix a = random_matrix(a_rows_storage, lda, DType::kF32, seed);
  HostMatrix w = random_matrix(c.N, c.K, c.wt, seed + 1, 1.0f / std::sqrt(static_cast<float>(c.K)));
  HostMatrix b = random_matrix(1, c.N, DType::kF32, seed + 2, 0.1f);
  const int64_t ldo = out_stride < 0 ? c.N : out_stride;
  HostMatrix o = random_matrix(c.M, ldo, DType::kF32, seed + 3);  // the residual being added to

  // The bf16 path (cuBLASLt on 16-bit operands) takes every GEMM of 2 rows or more.
  const bool lt_path = bf16_compute && c.M > 1 && c.wt != DType::kF32;
  HostMatrix ar = lt_path ? rounded(a, c.wt) : a;
  Tensor arv = Tensor::matrix(ar.bytes.data(), DType::kF32, c.M, c.K, lda);
  HostMatrix want = o;
  Tensor wantv = Tensor::matrix(want.bytes.data(), DType::kF32, c.M, c.N, ldo);
  Tensor bv = Tensor::vector(b.bytes.data(), DType::kF32, c.N);
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  if (c.M * c.N * c.K > (int64_t{1} << 28)) {
    cpu->gemm(arv, w.view(), c.bias ? &bv : nullptr, wantv, c.ep);
  } else {
    ref::gemm(arv, w.view(), c.bias ? &bv : nullptr, wantv, c.ep);
  }

  DeviceMatrix da = to_device(gpu, a), dw = to_device(gpu, w), db = to_device(gpu, b);
  DeviceMatrix dout = to_device(gpu, o);
  if (c.ep != Epilogue::kAddResidual) dout = poisoned(gpu, c.M, c.N, ldo);
  Tensor dav = Tensor::matrix(da.buf.data(), DType::kF32, c.M, c.K, lda);
  Tensor dbv = Tensor::vector(db.buf.data(), DType::kF32, c.N);
  Tensor dov = Tensor::matrix(dout.buf.data(), DType::kF32, c.M, c.N, ldo);
  gpu.gemm(dav, dw.t, c.bias ? &dbv : nullptr, dov, c.ep);
  const std::string what = "gemm M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" +
                           std::to_string(c.K) + " " + dtype_name(c.wt) + " ep=" + std::to_string(int(c.ep)) +
                           (c.bias ? " bias" : "") + " lda=" + std::to_string(lda) + " ldo=" + std::to_string(ldo) +
                           (bf16_compute ? " bf16-compute" : " f32-compute");
  expect_close(download_f32(gpu, dov), host_rows(wantv), 2e-5 * std::sqrt(static_cast<double>(c.K)), what);
}

class CudaGemm : public ::testing::TestWithParam<bool> {};

TEST_P(CudaGemm, OddAndPrimeShapesEveryDtypeAndEpilogue) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, GetParam());
  uint32_t seed = 10;
  for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 7, 13}, {1, 96, 64}, {3, 37, 29}, {5, 129, 67}, {8, 64, 256}, {17, 61, 33}, {31, 257, 72}, {70, 131, 97},
           {129, 200, 136}, {300, 48, 48}, {1, 37, 8200}, {3, 129, 4099}, {2, 520, 3584}})
    for (DType wt : {DType::kF32, DType::kBF16, DType::kF16})
      for (Epilogue ep : {Epilogue::kNone, Epilogue::kGelu, Epilogue::kAddResidual})
        check_gemm(*gpu, {M, N, K, wt, ep, (seed % 2) == 0}, GetParam(), -1, -1, seed++);
}

TEST_P(CudaGemm, StridedOutputAndOverlappingInputRows) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, GetParam());
  // A strided conv as a GEMM: rows of `a` start every stride·in elements but span kernel·in.
  for (int64_t M : {1, 9, 40, 133, 257})
    for (DType wt : {DType::kF32, DType::kBF16}) {
      check_gemm(*gpu, {M, 24, 7 * 4, wt, Epilogue::kNone, true}, GetParam(), 2 * 4, -1, 77);
      check_gemm(*gpu, {M, 64, 64, wt, Epilogue::kAddResidual, true}, GetParam(), 80, 100, 78);
    }
}

TEST_P(CudaGemm, ProductionShapes) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, GetParam());
  // q, k/v, o, gate+up, down of the 7B decoder at decode (1, 4 rows) and a prefill chunk (100 rows).
  for (int64_t M : {1, 4, 100, 300}) {  // 300: a prompt chunk
    check_gemm(*gpu, {M, 3584, 3584, DType::kBF16, Epilogue::kNone, true}, GetParam(), -1, -1, 200);
    check_gemm(*gpu, {M, 512, 3584, DType::kBF16, Epilogue::kNone, true}, GetParam(), -1, -1, 201);
    check_gemm(*gpu, {M, 3584, 3584, DType::kBF16, Epilogue::kAddResidual, false}, GetParam(), -1, -1, 202);
    check_gemm(*gpu, {M, 2 * 18944, 3584, DType::kBF16, Epilogue::kNone, false}, GetParam(), -1, -1, 203);
    check_gemm(*gpu, {M, 3584, 18944, DType::kBF16, Epilogue::kAddResidual, false}, GetParam(), -1, -1, 204);
  }
  check_gemm(*gpu, {1, 152064, 3584, DType::kBF16, Epilogue::kNone, false}, GetParam(), -1, -1, 205);  // LM head
  // f32 compute: more row tiles than gridDim.y holds (65,535 of 64 rows; the f32 encoders' stem over
  // more than ≈ 175 s of audio in one launch).
  if (!GetParam())
    check_gemm(*gpu, {65535 * 64 + 37, 3, 8, DType::kF32, Epilogue::kAddResidual, true}, false, -1, -1, 206);
}

// VV_CUDA_LT_TUNE=1: decode-sized bf16 GEMMs time their cuBLASLt candidates (split-K variants among
// them) with the L2 cleared and keep the fastest. Whatever wins, each product equals the reference's;
// a row count whose 16-row bucket was tuned reuses that choice (no second tuning line on stderr).
TEST(CudaGemmTuned, DecodeShapesAgainstTheReferenceAndOneTuningABucket) {
  VV_CUDA_BACKEND_OR_SKIP(any, true);  // (skips without a GPU; fails under VV_REQUIRE_GPU=1)
  auto be = cuda_backend_with({{"VV_CUDA_LT_TUNE", "1"}}, true);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  Backend& gpu = **be;
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  const std::vector<GemmCase> shapes = {{0, 4608, 3584, DType::kBF16, Epilogue::kNone, true},
                                        {0, 3584, 3584, DType::kBF16, Epilogue::kAddResidual, false},
                                        {0, 2 * 18944, 3584, DType::kBF16, Epilogue::kNone, false},
                                        {0, 3584, 18944, DType::kBF16, Epilogue::kAddResidual, false},
                                        {0, 1031, 1032, DType::kBF16, Epilogue::kNone, true}};
  uint32_t seed = 300;
  for (const int64_t M : {2, 17, 64, 127}) {
    ::testing::internal::CaptureStderr();
    for (GemmCase c : shapes) {
      c.M = M;
      check_gemm(gpu, c, true, -1, -1, seed++);
    }
    const std::string err = ::testing::internal::GetCapturedStderr();
    // The 7B shapes have many candidates, so each is timed once (the odd one may have a single one).
    for (const char* nk :
         {"N=4608 K=3584 (L2", "N=3584 K=3584 (L2", "N=37888 K=3584 (L2", "N=3584 K=18944 (L2"})
      EXPECT_EQ(count(err, "M=" + std::to_string(M) + " " + nk), 1u) << nk << " at M=" << M << ":\n" << err;
  }
  // 50 rows share 64's bucket (49..64), 113 rows 127's: checked, not tuned again.
  for (const int64_t M : {50, 113}) {
    ::testing::internal::CaptureStderr();
    for (GemmCase c : shapes) {
      c.M = M;
      check_gemm(gpu, c, true, -1, -1, seed++);
    }
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "cuBLASLt M="), 0u) << "M=" << M << ":\n" << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Compute, CudaGemm, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Bf16" : "F32"; });

// Back-to-back one-row GEMMs over the same input (q, k, v of a decode step) are launched as one
// fused kernel when the ops are recorded (the default): each output equals the reference's.
// Not a GPU test: a CUDA build finds cuBLASLt at run time (dlopen) on a machine with the toolkit,
// GPU or not, so bf16 GEMMs are available wherever the build is.
TEST(CudaLibraries, CublasLtLoadsAtRunTimeInACudaBuild) {
  std::string why;
  const int v = gpu_blas_version(&why);
  if (!cuda_backend_built()) {
    EXPECT_EQ(v, 0);
    GTEST_SKIP() << why;
  }
  EXPECT_GE(v, 120000) << why;
}

TEST(CudaOps, OneRowGemmsSharingTheirInputFuseCorrectly) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (int64_t K : {3584, 136, 29})
    for (DType wt : {DType::kBF16, DType::kF32}) {
      HostMatrix a = random_matrix(1, K, DType::kF32, 90);
      DeviceMatrix da = to_device(*gpu, a);
      const std::vector<int64_t> ns = {3584, 512, 37, 77};
      std::vector<HostMatrix> ws, bs, outs;
      std::vector<DeviceMatrix> dws, dbs, douts;
      std::vector<Tensor> dbv;
      for (size_t i = 0; i < ns.size(); ++i) {
        ws.push_back(random_matrix(ns[i], K, wt, 91 + i, 1.0f / std::sqrt(static_cast<float>(K))));
        bs.push_back(random_matrix(1, ns[i], DType::kF32, 95 + i, 0.1f));
        outs.push_back(random_matrix(1, ns[i], DType::kF32, 99 + i));
      }
      for (size_t i = 0; i < ns.size(); ++i) {
        dws.push_back(to_device(*gpu, ws[i]));
        dbs.push_back(to_device(*gpu, bs[i]));
        douts.push_back(i == 2 ? to_device(*gpu, outs[i]) : poisoned(*gpu, 1, ns[i]));
        dbv.push_back(Tensor::vector(dbs[i].buf.data(), DType::kF32, ns[i]));
      }
      for (size_t i = 0; i < ns.size(); ++i) {  // no sync in between: recorded together
        const Epilogue ep = i == 2 ? Epilogue::kAddResidual : Epilogue::kNone;
        gpu->gemm(da.t, dws[i].t, i == 1 ? nullptr : &dbv[i], douts[i].t, ep);
      }
      for (size_t i = 0; i < ns.size(); ++i) {
        HostMatrix want = outs[i];
        Tensor wv = want.view();
        Tensor bv = Tensor::vector(bs[i].bytes.data(), DType::kF32, ns[i]);
        ref::gemm(a.view(), ws[i].view(), i == 1 ? nullptr : &bv, wv, i == 2 ? Epilogue::kAddResidual : Epilogue::kNone);
        expect_close(download_f32(*gpu, douts[i].t), host_rows(wv), 2e-5 * std::sqrt(static_cast<double>(K)),
                     "fused one-row gemm " + std::to_string(i) + " K=" + std::to_string(K) + " " + dtype_name(wt));
      }
    }
}

// VV_CUDA_GEMV_BULK=1 (sm_90): lone one-row GEMMs with bf16/f16 weights of contiguous rows stream them
// through shared memory by cp.async.bulk. Against the reference, bitwise the same on a second run,
// the bulk kernel seen in the profile where it applies (sm_90, K a multiple of 8 up to 24,576) and
// not elsewhere: the 7B's o, down and a gate_up-sized matrix, tiles of 1 to 8 rows, a last tile
// shorter than the rest, bias and residual.
TEST(CudaOps, BulkStreamedOneRowGemvMatchesTheReferenceAndRepeatsBitwise) {
  { VV_CUDA_BACKEND_OR_SKIP(probe, false); }
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
  auto made = cuda_backend_with({{"VV_CUDA_GEMV_BULK", "1"}, {"VV_CUDA_PROFILE", "1"}}, false);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  Backend& gpu = **made;
  struct Case {
    int64_t K, N;
    DType wt;
    bool bias, residual;
  };
  const std::vector<Case> cases = {
      {3584, 3584, DType::kBF16, false, true},   // the 7B's o projection
      {18944, 3584, DType::kBF16, false, true},  // its down projection: one row a tile
      {3584, 37888, DType::kBF16, true, false},  // gate_up-sized
      {8, 1, DType::kF16, true, false},          // one chunk, one row
      {136, 37, DType::kF16, false, false},      // 17 chunks, a prime row count
      {1032, 1001, DType::kBF16, true, true},    // > 1,024 columns, a short last tile
      {24576, 129, DType::kBF16, false, false},  // the widest it takes
      {24584, 5, DType::kBF16, false, false}};   // one chunk wider: the other GEMV
  uint32_t seed = 1200;
  for (const Case& c : cases) {
    const std::string what =
        "K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) + " " + dtype_name(c.wt);
    HostMatrix a = random_matrix(1, c.K, DType::kF32, seed);
    HostMatrix w = random_matrix(c.N, c.K, c.wt, seed + 1, 1.0f / std::sqrt(static_cast<float>(c.K)));
    HostMatrix b = random_matrix(1, c.N, DType::kF32, seed + 2, 0.1f);
    HostMatrix o = random_matrix(1, c.N, DType::kF32, seed + 3);
    seed += 10;
    DeviceMatrix da = to_device(gpu, a), dw = to_device(gpu, w), db = to_device(gpu, b);
    const Tensor bv = Tensor::vector(db.buf.data(), DType::kF32, c.N);
    const Epilogue ep = c.residual ? Epilogue::kAddResidual : Epilogue::kNone;
    std::vector<std::vector<float>> got;
    (void)backend_profile_report(gpu);
    for (int rep = 0; rep < 2; ++rep) {
      DeviceMatrix dout = c.residual ? to_device(gpu, o) : poisoned(gpu, 1, c.N);
      gpu.gemm(da.t, dw.t, c.bias ? &bv : nullptr, dout.t, ep);
      got.push_back(download_f32(gpu, dout.t));
    }
    const std::string table = backend_profile_report(gpu);
    const bool bulk = sm90 && c.K <= 24576;
    EXPECT_EQ(table.find("decode_gemv.bulk") != std::string::npos, bulk) << what << "\n" << table;
    EXPECT_EQ(got[0], got[1]) << what << ": the second run differs";
    HostMatrix want = o;
    Tensor wv = want.view();
    Tensor hb = Tensor::vector(b.bytes.data(), DType::kF32, c.N);
    ref::gemm(a.view(), w.view(), c.bias ? &hb : nullptr, wv, ep);
    expect_close(got[0], host_rows(wv), 2e-5 * std::sqrt(static_cast<double>(c.K)), what);
  }
}

TEST(CudaOps, RmsNormOddAndProductionWidthsAndInPlace) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{1, 48}, {7, 37}, {13, 3584}, {3, 1031}, {64, 128}})
    for (DType wt : {DType::kF32, DType::kBF16})
      for (bool in_place : {false, true}) {
        HostMatrix x = random_matrix(R, C, DType::kF32, 5 + R, 3.0f, C + 3);
        HostMatrix w = random_matrix(1, C, wt, 6);
        HostMatrix want = random_matrix(R, C, DType::kF32, 7);
        Tensor wv = Tensor::vector(w.bytes.data(), wt, C);
        Tensor want_t = want.view();
        ref::rms_norm(x.view(), wv, 1e-6f, want_t);
        DeviceMatrix dx = to_device(gpu.operator*(), x), dw = to_device(*gpu, w);
        DeviceMatrix dout = poisoned(*gpu, R, C);
        Tensor out = in_place ? dx.t : dout.t;
        gpu->rms_norm(dx.t, Tensor::vector(dw.buf.data(), wt, C), 1e-6f, out);
        expect_close(download_f32(*gpu, out), host_rows(want_t), 2e-6,
                     "rms_norm " + std::to_string(R) + "x" + std::to_string(C) + (in_place ? " in place" : ""));
      }
}

TEST(CudaOps, DepthwiseConvWithAndWithoutHistory) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (int64_t T : {1, 3, 5, 33, 257})
    for (int64_t C : {37, 128})
      for (bool hist : {false, true})
        for (DType wt : {DType::kF32, DType::kBF16}) {
          const int64_t K = 7;
          HostMatrix x = random_matrix(T, C, DType::kF32, 11 + T, 1.0f, C + 1);
          HostMatrix h = random_matrix(K - 1, C, DType::kF32, 12);
          HostMatrix w = random_matrix(C, K, wt, 13);
          HostMatrix b = random_matrix(1, C, DType::kF32, 14);
          HostMatrix want = random_matrix(T, C, DType::kF32, 15);
          Tensor hv = hist ? h.view() : Tensor{};
          Tensor bv = Tensor::vector(b.bytes.data(), DType::kF32, C);
          Tensor want_t = want.view();
          ref::depthwise_conv1d_causal(x.view(), hv, w.view(), bv, want_t);
          DeviceMatrix dx = to_device(*gpu, x), dh = to_device(*gpu, h), dw = to_device(*gpu, w),
                       db = to_device(*gpu, b);
          DeviceMatrix dout = poisoned(*gpu, T, C);
          Tensor dhv = hist ? dh.t : Tensor{};
          gpu->depthwise_conv1d_causal(dx.t, dhv, dw.t, Tensor::vector(db.buf.data(), DType::kF32, C), dout.t);
          expect_close(download_f32(*gpu, dout.t), host_rows(want_t), 1e-6,
                       "dwconv T=" + std::to_string(T) + " C=" + std::to_string(C) + (hist ? " history" : ""));
        }
}

// add_scaled on rows the four-column kernel takes (C and both row strides multiples of 4, aligned) gives the
// bits of the one-column kernel (the same rows at an odd row stride), and the reference's within 1e-6;
// f32 and bf16 scales.
TEST(CudaOps, AddScaledFourColumnsGivesTheOneColumnBits) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {129, 512}, {7, 2048}, {3, 3584}}) {
    for (DType st : {DType::kF32, DType::kBF16}) {
      const uint32_t seed = static_cast<uint32_t>(R + C) + (st == DType::kBF16 ? 1000 : 0);
      // x and y, and the same values at odd row strides (C + 1, C + 3).
      const auto restride = [](const HostMatrix& m, int64_t stride) {
        HostMatrix o = random_matrix(m.rows, m.cols, DType::kF32, 0, 1.0f, stride);
        for (int64_t r = 0; r < m.rows; ++r)
          for (int64_t c = 0; c < m.cols; ++c) {
            o.f[r * stride + c] = m.at(r, c);
            std::memcpy(o.bytes.data() + 4 * (r * stride + c), &o.f[r * stride + c], 4);
          }
        return o;
      };
      HostMatrix x = random_matrix(R, C, DType::kF32, seed);
      HostMatrix y = random_matrix(R, C, DType::kF32, seed + 1);
      HostMatrix x_odd = restride(x, C + 1), y_odd = restride(y, C + 3);
      HostMatrix sc = random_matrix(1, C, st, seed + 2);
      HostMatrix want = x;
      Tensor wv = want.view();
      ref::add_scaled(wv, Tensor::vector(sc.bytes.data(), st, C), y.view());
      DeviceMatrix dx = to_device(*gpu, x), dy = to_device(*gpu, y), ds = to_device(*gpu, sc);
      DeviceMatrix dxo = to_device(*gpu, x_odd), dyo = to_device(*gpu, y_odd);
      const Tensor sv = Tensor::vector(ds.buf.data(), st, C);
      gpu->add_scaled(dx.t, sv, dy.t);
      gpu->add_scaled(dxo.t, sv, dyo.t);
      const std::vector<float> four = download_f32(*gpu, dx.t), one = download_f32(*gpu, dxo.t);
      const std::string what = "add_scaled R=" + std::to_string(R) + " C=" + std::to_string(C);
      ASSERT_EQ(four.size(), one.size()) << what;
      size_t differ = 0;
      for (size_t i = 0; i < four.size(); ++i) differ += std::memcmp(&four[i], &one[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << what << ": four-column and one-column kernels differ";
      expect_close(four, host_rows(wv), 1e-6, what);
    }
  }
}

TEST(CudaOps, ElementwiseOpsOnStridedRows) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{1, 3584}, {5, 37}, {129, 64}}) {
    HostMatrix x = random_matrix(R, C, DType::kF32, 21, 1.0f, C + 5);
    HostMatrix y = random_matrix(R, C, DType::kF32, 22, 1.0f, C + 2);
    HostMatrix s = random_matrix(1, C, DType::kBF16, 23);
    // add_scaled
    HostMatrix want = x;
    Tensor wv = want.view();
    ref::add_scaled(wv, Tensor::vector(s.bytes.data(), DType::kBF16, C), y.view());
    DeviceMatrix dx = to_device(*gpu, x), dy = to_device(*gpu, y), ds = to_device(*gpu, s);
    gpu->add_scaled(dx.t, Tensor::vector(ds.buf.data(), DType::kBF16, C), dy.t);
    expect_close(download_f32(*gpu, dx.t), host_rows(wv), 1e-6, "add_scaled");
    // add, into a third buffer and in place
    HostMatrix sum = random_matrix(R, C, DType::kF32, 24);
    Tensor sv = sum.view();
    ref::add(x.view(), y.view(), sv);
    DeviceMatrix dx2 = to_device(*gpu, x), dsum = poisoned(*gpu, R, C);
    gpu->add(dx2.t, dy.t, dsum.t);
    expect_close(download_f32(*gpu, dsum.t), host_rows(sv), 1e-7, "add");
    gpu->add(dx2.t, dy.t, dx2.t);
    expect_close(download_f32(*gpu, dx2.t), host_rows(sv), 1e-7, "add in place");
    // silu_mul: gate_up [R, 2C] → [R, C]
    HostMatrix gu = random_matrix(R, 2 * C, DType::kF32, 25, 4.0f, 2 * C + 1);
    HostMatrix m = random_matrix(R, C, DType::kF32, 26);
    Tensor mv = m.view();
    ref::silu_mul(gu.view(), mv);
    DeviceMatrix dgu = to_device(*gpu, gu), dm = poisoned(*gpu, R, C, C + 3);
    gpu->silu_mul(dgu.t, dm.t);
    expect_close(download_f32(*gpu, dm.t), host_rows(mv), 1e-6, "silu_mul");
    // copy between different row strides
    DeviceMatrix dc = poisoned(*gpu, R, C, C + 7);
    gpu->copy(dy.t, dc.t);
    expect_close(download_f32(*gpu, dc.t), host_rows(y.view()), 0, "copy");
  }
}

TEST(CudaOps, EmbeddingGatherIncludingOutOfRangeIds) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t V = 1009, H = 37;
    HostMatrix table = random_matrix(V, H, dt, 31);
    std::vector<int32_t> ids = {0, 5, 1008, -1, 1009, 77, 77, 3};
    HostMatrix want = random_matrix(static_cast<int64_t>(ids.size()), H, DType::kF32, 32);
    Tensor want_t = want.view();
    ref::embedding(table.view(), Tensor::vector(ids.data(), DType::kI32, static_cast<int64_t>(ids.size())), want_t);
    DeviceMatrix dt_ = to_device(*gpu, table), di = to_device_i32(*gpu, ids);
    DeviceMatrix dout = poisoned(*gpu, static_cast<int64_t>(ids.size()), H, H + 1);
    gpu->embedding(dt_.t, di.t, dout.t);
    expect_close(download_f32(*gpu, dout.t), host_rows(want_t), 0, std::string("embedding ") + dtype_name(dt));
  }
}

TEST(CudaOps, RopeAtLargePositions) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (auto [heads, hd] : std::vector<std::pair<int, int>>{{28, 128}, {4, 128}, {14, 16}, {3, 6}}) {
    const int64_t R = 9;
    std::vector<int32_t> pos = {0, 1, 2, 17, 255, 1024, 4097, 30000, 131071};
    HostMatrix x = random_matrix(R, static_cast<int64_t>(heads) * hd, DType::kF32, 41, 1.0f, heads * hd + 4);
    HostMatrix want = x;
    Tensor wv = want.view();
    ref::rope(wv, Tensor::vector(pos.data(), DType::kI32, R), heads, hd, 1e6f);
    DeviceMatrix dx = to_device(*gpu, x), dp = to_device_i32(*gpu, pos);
    gpu->rope(dx.t, dp.t, heads, hd, 1e6f);
    // sin/cos of phases up to ~1.3e5 rad: both sides are correctly rounded f32 functions, so
    // they agree to a few ulp of the phase's own rounding.
    expect_close(download_f32(*gpu, dx.t), host_rows(wv), 2e-5,
                 "rope " + std::to_string(heads) + "x" + std::to_string(hd));
  }
}

// A paged cache with shuffled blocks: sequences of various lengths prefilled in one call (varlen),
// then one decode row each; both write their k/v first, as the model does.
// decode_only: the cache holds random k/v for the earlier positions (no prefill; the scalar
// reference of a 4k-row prefill would take minutes).
// Returns the last phase's output.
std::vector<float> check_attention(Backend& gpu, int heads, int kv_heads, int D, DType kv_dtype,
                                   std::vector<int> lens, int bs, bool decode_only = false) {
  const int S = static_cast<int>(lens.size());
  int max_blocks = 0, total_blocks = 0;
  for (int L : lens) {
    max_blocks = std::max(max_blocks, (L + 1 + bs - 1) / bs);
    total_blocks += (L + 1 + bs - 1) / bs;
  }
  std::vector<int32_t> perm(total_blocks + 3);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, 0);
  int used = 0;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < (lens[s] + 1 + bs - 1) / bs; ++b) tables[s * max_blocks + b] = perm[used++];
  const int64_t width = static_cast<int64_t>(kv_heads) * D, qw = static_cast<int64_t>(heads) * D;
  const int64_t slots = static_cast<int64_t>(total_blocks + 3) * bs;
  HostMatrix kc = random_matrix(slots, width, kv_dtype, 51), vc = random_matrix(slots, width, kv_dtype, 52);
  DeviceMatrix dkc = to_device(gpu, kc), dvc = to_device(gpu, vc);
  DeviceMatrix dtab = to_device_i32(gpu, tables);
  std::vector<float> last;
  for (int phase = decode_only ? 1 : 0; phase < 2; ++phase) {  // 0: prefill every prompt, 1: one decode row each
    std::vector<int32_t> row_seq, row_pos;
    for (int s = 0; s < S; ++s) {
      if (phase == 0) {
        for (int p = 0; p < lens[s]; ++p) row_seq.push_back(s), row_pos.push_back(p);
      } else {
        row_seq.push_back(s), row_pos.push_back(lens[s]);
      }
    }
    const int64_t n = static_cast<int64_t>(row_seq.size());
    HostMatrix q = random_matrix(n, qw, DType::kF32, 60 + phase, 2.0f);
    HostMatrix k = random_matrix(n, width, DType::kF32, 62 + phase), v = random_matrix(n, width, DType::kF32, 64 + phase);
    AttentionRows rows;
    rows.row_seq = Tensor::vector(row_seq.data(), DType::kI32, n);
    rows.row_pos = Tensor::vector(row_pos.data(), DType::kI32, n);
    rows.block_tables = Tensor::matrix(tables.data(), DType::kI32, S, max_blocks);
    rows.block_size = bs;
    AttentionShape shape{heads, kv_heads, D, 1.0f / std::sqrt(static_cast<float>(D))};
    KvLayer host_cache{Tensor::matrix(kc.bytes.data(), kv_dtype, slots, width),
                       Tensor::matrix(vc.bytes.data(), kv_dtype, slots, width)};
    ref::kv_write(k.view(), v.view(), rows, host_cache, shape);
    HostMatrix want = random_matrix(n, qw, DType::kF32, 66);
    Tensor want_t = want.view();
    ref::paged_attention(q.view(), rows, host_cache, shape, want_t);

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
    const std::string what = "attention " + std::to_string(heads) + "/" + std::to_string(kv_heads) + "x" +
                             std::to_string(D) + " " + dtype_name(kv_dtype) + (phase ? " decode" : " prefill");
    // The cache written by the GPU equals the reference's, bit for bit.
    std::vector<uint8_t> got_k(kc.bytes.size());
    gpu.synchronize();
    gpu.download(got_k.data(), dkc.buf.data(), got_k.size());
    EXPECT_EQ(std::memcmp(got_k.data(), kc.bytes.data(), static_cast<size_t>(slots * width) * dtype_size(kv_dtype)), 0)
        << what << ": K cache";
    std::vector<uint8_t> got_v(vc.bytes.size());
    gpu.download(got_v.data(), dvc.buf.data(), got_v.size());
    EXPECT_EQ(std::memcmp(got_v.data(), vc.bytes.data(), static_cast<size_t>(slots * width) * dtype_size(kv_dtype)), 0)
        << what << ": V cache";
    // Outputs are convex combinations of V rows (|v| ≤ 1): rounding is judged against that scale.
    last = download_f32(gpu, dout.t);
    expect_close(last, host_rows(want_t), 2e-6, what, 1.0);
  }
  return last;
}

TEST(CudaOps, PagedAttentionVarlenPrefillAndDecode) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  check_attention(*gpu, 14, 2, 16, DType::kF32, {1, 5, 83}, 16);
  check_attention(*gpu, 28, 4, 128, DType::kF32, {37, 300, 129}, 16);
  check_attention(*gpu, 28, 4, 128, DType::kBF16, {3, 257}, 16);
  check_attention(*gpu, 6, 3, 6, DType::kF16, {13, 1}, 4);
  // Heads wider than the SIMT decode kernel's 128 dims (four a lane): the tiled kernel takes them.
  check_attention(*gpu, 4, 2, 160, DType::kF32, {5, 70}, 16);
  check_attention(*gpu, 2, 1, 256, DType::kBF16, {33, 2}, 16);
}

TEST(CudaOps, PagedAttentionLongContextDecode) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  check_attention(*gpu, 28, 4, 128, DType::kF32, {4099, 1, 16384}, 32, true);
  check_attention(*gpu, 28, 4, 128, DType::kBF16, {8191}, 16, true);
}

// VV_CUDA_ATTN_LEAN=1: the SIMT decode attention with empty splits leaving early, V loaded with K and
// the merge's loads issued together gives the default's bits (f32 mode: the SIMT kernel for every row
// count; bf16 mode: for one-row steps), and the reference's values: rows of length 1 and 4,099 beside
// 16,384 in one table (most of their splits empty), a one-row step, and short rows.
TEST(CudaOps, LeanDecodeAttentionGivesTheSameBits) {
  VV_CUDA_BACKEND_OR_SKIP(plain, false);
  auto lean = cuda_backend_with({{"VV_CUDA_ATTN_LEAN", "1"}}, false);
  ASSERT_TRUE(lean.is_ok()) << lean.status().to_string();
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": lean differs";
  };
  same(check_attention(**lean, 28, 4, 128, DType::kF32, {4099, 1, 16384}, 32, true),
       check_attention(*plain, 28, 4, 128, DType::kF32, {4099, 1, 16384}, 32, true), "f32, wide table");
  same(check_attention(**lean, 14, 2, 16, DType::kF32, {1, 5, 83}, 16),
       check_attention(*plain, 14, 2, 16, DType::kF32, {1, 5, 83}, 16), "f32, short rows");
  auto plain16 = cuda_backend_with({}, true);
  auto lean16 = cuda_backend_with({{"VV_CUDA_ATTN_LEAN", "1"}}, true);
  ASSERT_TRUE(plain16.is_ok() && lean16.is_ok());
  same(check_attention(**lean16, 28, 4, 128, DType::kBF16, {8191}, 16, true),
       check_attention(**plain16, 28, 4, 128, DType::kBF16, {8191}, 16, true), "bf16, one row");
  same(check_attention(**lean16, 28, 4, 128, DType::kBF16, {1031}, 16, true),
       check_attention(**plain16, 28, 4, 128, DType::kBF16, {1031}, 16, true), "bf16, one row of 1,031");
}

TEST(CudaOps, ArgmaxTiesGoToTheLowestIdAndNanWins) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t V = 152064, R = 5;
    HostMatrix l = random_matrix(R, V, dt, 71, 4.0f);
    auto set = [&](int64_t r, int64_t i, float v) {
      if (dt == DType::kF32) {
        l.f32()[r * V + i] = v;
      } else {
        const uint16_t h = f32_to_bf16(v);
        std::memcpy(l.bytes.data() + 2 * (r * V + i), &h, 2);
      }
    };
    set(1, 100, 9.0f), set(1, 50000, 9.0f), set(1, 151000, 9.0f);  // a three-way tie
    set(2, 0, 9.0f), set(2, V - 1, 9.0f);
    set(3, 700, NAN), set(3, 90000, NAN), set(3, 5, 100.0f);
    set(4, V - 1, 50.0f);
    std::vector<int32_t> want(R);
    Tensor wt = Tensor::vector(want.data(), DType::kI32, R);
    ref::argmax(l.view(), wt);
    EXPECT_EQ(want[1], 100);
    EXPECT_EQ(want[3], 700);
    DeviceMatrix dl = to_device(*gpu, l), dout = to_device_i32(*gpu, std::vector<int32_t>(R, -7));
    gpu->argmax(dl.t, dout.t);
    std::vector<int32_t> got(R);
    gpu->synchronize();
    gpu->download(got.data(), dout.buf.data(), R * 4);
    EXPECT_EQ(got, want) << dtype_name(dt);
    // argmax_logprob: the same ids; the NaN row (whose id holds a NaN) −inf, the others the reference's.
    std::vector<float> want_lp(R);
    Tensor wl = Tensor::vector(want_lp.data(), DType::kF32, R);
    ref::logprob_at(l.view(), wt, wl);
    DeviceMatrix lout = to_device_i32(*gpu, std::vector<int32_t>(2 * R, -7));
    Tensor li = Tensor::vector(lout.buf.data(), DType::kI32, R);
    Tensor lp = Tensor::vector(static_cast<int32_t*>(lout.buf.data()) + R, DType::kF32, R);
    gpu->argmax_logprob(dl.t, li, lp);
    std::vector<int32_t> both(2 * R);
    gpu->synchronize();
    gpu->download(both.data(), lout.buf.data(), 2 * R * 4);
    EXPECT_EQ(std::vector<int32_t>(both.begin(), both.begin() + R), want) << dtype_name(dt);
    for (int64_t r = 0; r < R; ++r) {
      float v;
      std::memcpy(&v, &both[R + r], 4);
      if (r == 3) {
        EXPECT_EQ(v, -INFINITY) << dtype_name(dt) << ": a NaN won the row";
      } else {
        EXPECT_NEAR(v, want_lp[r], 1e-5 * (1.0 + std::fabs(want_lp[r]))) << dtype_name(dt) << " row " << r;
      }
    }
  }
}

TEST(CudaOps, AllocateZeroFillsAndNamesTheDevice) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, false);
  Buffer b = gpu->allocate(1 << 20);
  ASSERT_NE(b.data(), nullptr);
  std::vector<uint8_t> host(1 << 20, 0xff);
  gpu->download(host.data(), b.data(), host.size());
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t v) { return v == 0; }));
  EXPECT_EQ(gpu->name().rfind("cuda:0", 0), 0u) << gpu->name();
}

}  // namespace
}  // namespace vv::test
