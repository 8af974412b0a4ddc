// The encoders' fused ConvNeXt branches on the GPU (Backend::conv_ffn, Backend::conv_mixer) against
// host references, over odd and prime row counts and the production widths (32 .. 512 channels for
// the FFN, hidden 4× and other multiples of 64; 6 .. 2048 for the mixer), plus widths the fused kernels
// do not take (the op sequence runs instead).
//
// FFN tolerance (bf16 mode): the kernel rounds the normalised rows and the GELU outputs to bf16, as
// the unfused bf16 path rounds its GEMM operands; the reference rounds at the same two points. What
// is left is f32 summation order, plus the rare element whose f32 value lies so close to a bf16
// rounding boundary that the two round it apart (2^-8 relative on one operand of one product).
// The update x_out − x_in is compared within 5e-3 of its largest magnitude. From 256 channels the
// FFN runs on cuBLASLt (conv_ffn_lt), which also rounds the hidden rows to bf16 before the GELU (as
// the PyTorch reference's bf16 run does): one more rounding of 2^-9 relative per hidden value,
// averaging out over the E terms of the second GEMM, well inside the same bound.
// Mixer tolerance: f32 throughout on both sides (same taps, same order): 1e-5 of max|ref|. Of u only
// the last min(T, 6) rows are compared: the conv's reach, all that the encoder carries to the next
// segment, and all that the fused kernel writes (Backend::conv_mixer).
#include "kernels/cuda/encoder_ops.cuh"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/device/backend_factory.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test::encoderops {
namespace {

float round_bf16(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}
float gelu_ref(float x) {
  return x * 0.5f * (1.0f + std::erf(x * 0.70710678118654752440f));
}

bool device_is_sm90() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

// x (host F32 [T, C]) += gamma ⊙ (gelu(bf16(rms_norm(x))·w1ᵀ + b1) rounded to bf16 ·w2ᵀ + b2).
std::vector<float> ffn_reference(const HostMatrix& x, const HostMatrix& nw, float eps, const HostMatrix& w1,
                                 const HostMatrix& b1, const HostMatrix& w2, const HostMatrix& b2,
                                 const HostMatrix& gamma) {
  const int64_t T = x.rows, C = x.cols, E = w1.rows;
  std::vector<float> out(static_cast<size_t>(T * C));
  parallel_ranges(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> u(C), h(E);
    for (int64_t t = t0; t < t1; ++t) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x.at(t, c)) * x.at(t, c);
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / C) + eps);
      for (int64_t c = 0; c < C; ++c) u[c] = round_bf16(x.at(t, c) * inv * nw.at(0, c));
      for (int64_t j = 0; j < E; ++j) {
        double a = 0;
        for (int64_t c = 0; c < C; ++c) a += static_cast<double>(u[c]) * w1.at(j, c);
        h[j] = round_bf16(gelu_ref(static_cast<float>(a) + b1.at(0, j)));
      }
      for (int64_t c = 0; c < C; ++c) {
        double a = 0;
        for (int64_t j = 0; j < E; ++j) a += static_cast<double>(h[j]) * w2.at(c, j);
        out[t * C + c] = gamma.at(0, c) * (static_cast<float>(a) + b2.at(0, c));  // the update
      }
    }
  });
  return out;
}

// The FFN's operands for (T, C, E, seed): x, then the norm weight, w1, b1, w2, b2 and gamma.
struct FfnCase {
  HostMatrix x, nw, w1, b1, w2, b2, gamma;
  FfnCase(int64_t T, int64_t C, int64_t E, uint32_t seed)
      : x(random_matrix(T, C, DType::kF32, seed)),
        nw(random_matrix(1, C, DType::kF32, seed + 1, 1.5f)),
        w1(random_matrix(E, C, DType::kBF16, seed + 2, 1.0f / std::sqrt(static_cast<float>(C)))),
        b1(random_matrix(1, E, DType::kF32, seed + 3, 0.2f)),
        w2(random_matrix(C, E, DType::kBF16, seed + 4, 1.0f / std::sqrt(static_cast<float>(E)))),
        b2(random_matrix(1, C, DType::kF32, seed + 5, 0.2f)),
        gamma(random_matrix(1, C, DType::kF32, seed + 6)) {}
};
constexpr float kFfnEps = 1e-5f;

// Backend::conv_ffn on the GPU over a case's operands; returns x after it.
std::vector<float> run_ffn(Backend& gpu, FfnCase& k) {
  const int64_t T = k.x.rows, C = k.x.cols, E = k.w1.rows;
  DeviceMatrix dx = to_device(gpu, k.x), dnw = to_device(gpu, k.nw), dw1 = to_device(gpu, k.w1),
               db1 = to_device(gpu, k.b1);
  DeviceMatrix dw2 = to_device(gpu, k.w2), db2 = to_device(gpu, k.b2), dg = to_device(gpu, k.gamma);
  DeviceMatrix du = poisoned(gpu, T, C), dv = poisoned(gpu, T, C);
  const int64_t tile = std::min<int64_t>(T, 1000);  // the unfused path's hidden rows per step
  DeviceMatrix dh = poisoned(gpu, tile, E);
  Tensor nwv = Tensor::vector(dnw.buf.data(), DType::kF32, C),
         b1v = Tensor::vector(db1.buf.data(), DType::kF32, E);
  Tensor b2v = Tensor::vector(db2.buf.data(), DType::kF32, C),
         gv = Tensor::vector(dg.buf.data(), DType::kF32, C);
  gpu.conv_ffn(dx.t, nwv, kFfnEps, dw1.t, b1v, dw2.t, b2v, gv, du.t, dv.t, dh.t);
  return download_f32(gpu, dx.t);
}

void check_ffn(Backend& gpu, int64_t T, int64_t C, int64_t E, uint32_t seed) {
  FfnCase k(T, C, E, seed);
  const std::vector<float> want = ffn_reference(k.x, k.nw, kFfnEps, k.w1, k.b1, k.w2, k.b2, k.gamma);
  std::vector<float> got = run_ffn(gpu, k);
  for (int64_t i = 0; i < T * C; ++i) got[i] -= k.x.f[i];
  expect_close(got, want, 5e-3,
               "conv_ffn T=" + std::to_string(T) + " C=" + std::to_string(C) + " E=" + std::to_string(E));
}

// Sets environment variables for the backends made in its scope (read once, at construction).
struct FfnEnv {
  std::vector<const char*> names;
  FfnEnv(std::initializer_list<std::pair<const char*, const char*>> kv) {
    for (const auto& [k, v] : kv) {
      ::setenv(k, v, 1);
      names.push_back(k);
    }
  }
  ~FfnEnv() {
    for (const char* k : names) ::unsetenv(k);
  }
};

// The fused kernels' GELU forms on the device (cuda::gelu_forms_eval: 0 erff, 1 the fast erf) against x·Φ(x)
// in double (Φ by erfc, no cancellation) over [−40, 40] in 800,001 steps, ±10^−30 .. ±10^38, ±3.4e38 and ±0:
//  - |error| ≤ 1e-6·max(1, |x|) (4.2e-7 by the fast erf's numpy check);
//  - where |GELU| > 1e-3, |error| ≤ 1e-3·|GELU|;
//  - NaN gives NaN.
TEST(CudaEncoderOps, GeluFormsWithinTheirBoundsOfTheExactGelu) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  std::vector<float> xs;
  constexpr int kSteps = 800000;
  for (int i = 0; i <= kSteps; ++i) xs.push_back(-40.0f + 80.0f * static_cast<float>(i) / kSteps);
  for (int e = -30; e <= 38; ++e) {
    const float v = static_cast<float>(std::pow(10.0, e));
    xs.push_back(v);
    xs.push_back(-v);
  }
  for (const float v : {3.4e38f, -3.4e38f, 0.0f, -0.0f, std::nanf("")}) xs.push_back(v);
  const auto n = static_cast<int64_t>(xs.size());
  HostMatrix hx;
  hx.rows = 1;
  hx.cols = hx.stride = n;
  hx.bytes.assign(static_cast<size_t>(n) * 4 + 64, 0);
  std::memcpy(hx.bytes.data(), xs.data(), static_cast<size_t>(n) * 4);
  hx.f = xs;
  DeviceMatrix dx = to_device(*gpu, hx);
  struct Form {
    int id;
    const char* name;
    double abs_bound, rel_bound;
  };
  for (const Form& form : {Form{0, "erff", 1e-6, 1e-3}, Form{1, "fast erf", 1e-6, 1e-3}}) {
    DeviceMatrix out = poisoned(*gpu, 1, n);
    gpu->synchronize();  // the uploads (on the backend's stream) before the kernel on the legacy stream
    cuda::gelu_forms_eval(static_cast<const float*>(dx.buf.data()), static_cast<float*>(out.buf.data()), n,
                          form.id, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << form.name;
    const std::vector<float> got = download_f32(*gpu, out.t);
    double worst_abs = 0, worst_rel = 0, at_abs = 0, at_rel = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = xs[i];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(got[i])) << form.name << ": GELU(NaN) = " << got[i];
        continue;
      }
      const double ref = x * 0.5 * std::erfc(-x / std::sqrt(2.0));
      const double err = std::fabs(static_cast<double>(got[i]) - ref);
      const double a = err / std::max(1.0, std::fabs(x));
      if (!(a <= form.abs_bound)) ++bad;
      if (!std::isnan(worst_abs) && !(a <= worst_abs)) worst_abs = a, at_abs = x;  // a NaN stays
      if (std::fabs(ref) > 1e-3) {
        const double r = err / std::fabs(ref);
        if (!(r <= form.rel_bound)) ++bad;
        if (!std::isnan(worst_rel) && !(r <= worst_rel)) worst_rel = r, at_rel = x;
      }
    }
    EXPECT_EQ(bad, 0) << form.name << ": worst |error|/max(1,|x|) " << worst_abs << " at x = " << at_abs
                      << " (bound " << form.abs_bound << "), worst relative " << worst_rel
                      << " at x = " << at_rel << " (bound " << form.rel_bound << ")";
  }
}

TEST(CudaEncoderOps, FusedFfnProductionWidthsOddAndPrimeRows) {
  // The mma.sync fused kernel at every width it takes (128, 256 and 512 too; not the wgmma form).
  FfnEnv env{{"VV_CUDA_FFN_LT", "0"}, {"VV_CUDA_FFN_WG", "0"}};
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_ffn(*gpu, 1, 32, 128, 1);
  check_ffn(*gpu, 20011, 32, 128, 2);
  check_ffn(*gpu, 4099, 64, 256, 3);
  check_ffn(*gpu, 997, 128, 512, 4);
  check_ffn(*gpu, 65, 128, 512, 5);
  check_ffn(*gpu, 1543, 256, 1024, 8);
  // Enough rows that the resident form's warps take several tiles each (its grid is the blocks that
  // fit at once, ~50 K rows at C = 32; ~34 K at C = 64); the 60 s stage shapes are larger still.
  check_ffn(*gpu, 100003, 32, 128, 9);
  check_ffn(*gpu, 40009, 64, 256, 10);
  // E other than 4C: the streamed form at the small widths.
  check_ffn(*gpu, 1031, 64, 192, 12);
  check_ffn(*gpu, 127, 32, 64, 13);
  // C = 512 (stage 4): the wide form, 64-row blocks, a partial last one, E ≠ 4C.
  check_ffn(*gpu, 1031, 512, 2048, 14);
  check_ffn(*gpu, 1, 512, 2048, 15);
  check_ffn(*gpu, 301, 512, 1024, 16);
}

// From 256 channels (bf16 weights, C and E multiples of 8) the FFN runs on cuBLASLt in row tiles of
// twice h's rows (check_ffn's h: 1,000 rows, so 2,000-row tiles and a partial last one).
TEST(CudaEncoderOps, FfnOnCublasLtFromWidth256InRowTiles) {
  FfnEnv env{{"VV_CUDA_PROFILE", "1"}, {"VV_CUDA_FFN_WG", "0"}};  // 128 and 256 otherwise on wgmma
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  (void)backend_profile_report(*gpu);
  check_ffn(*gpu, 5003, 256, 1024, 21);  // three tiles, the last partial
  check_ffn(*gpu, 1031, 512, 2048, 22);
  check_ffn(*gpu, 129, 1024, 4096, 23);  // stage 5's width
  check_ffn(*gpu, 37, 2048, 8192, 24);   // stage 6's width
  check_ffn(*gpu, 301, 264, 1056, 25);   // not a power of two
  check_ffn(*gpu, 1, 256, 1024, 26);
  const std::string table = backend_profile_report(*gpu);
  for (const char* label :
       {"conv_ffn.lt.c256", "conv_ffn.lt.c512", "conv_ffn.lt.c1024", "conv_ffn.lt.c2048", "conv_ffn.lt.c264"})
    EXPECT_NE(table.find(label), std::string::npos) << label << " not run\n" << table;
  // Below the width, or C % 8 != 0: not on it.
  check_ffn(*gpu, 999, 128, 512, 27);
  check_ffn(*gpu, 203, 260, 1040, 28);
  const std::string rest = backend_profile_report(*gpu);
  EXPECT_EQ(rest.find("conv_ffn.lt"), std::string::npos) << rest;
  EXPECT_NE(rest.find("conv_ffn.fused.c128"), std::string::npos) << rest;
}

// VV_CUDA_FFN_WG=1: the 128- and 256-channel FFNs on wgmma (sm_90 only; elsewhere the backend keeps the
// mma.sync kernel and cuBLASLt, and the labels must not appear). Same reference and bound as the fused
// kernel's: one row, a partial 128-row tile, exactly one tile and one past it, odd and prime counts, and
// enough rows that the persistent blocks take several tiles each (the next tile's x and first weight chunk
// copied during the current one). Other widths keep their kernels.
TEST(CudaEncoderOps, WgmmaFfnAt128And256ChannelsOnHopper) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  auto wg = cuda_backend_with({{"VV_CUDA_FFN_WG", "1"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(wg.is_ok()) << wg.status().to_string();
  Backend& be = **wg;
  (void)backend_profile_report(be);
  check_ffn(be, 1, 128, 512, 31);
  check_ffn(be, 65, 128, 512, 32);
  check_ffn(be, 128, 128, 512, 33);
  check_ffn(be, 129, 128, 512, 34);
  check_ffn(be, 997, 128, 512, 35);
  check_ffn(be, 40009, 128, 512, 36);
  // C = 256 (stage 3; x not staged: the norm reads global memory, the epilogue adds by reductions).
  check_ffn(be, 1, 256, 1024, 41);
  check_ffn(be, 129, 256, 1024, 42);
  check_ffn(be, 1543, 256, 1024, 43);
  check_ffn(be, 20011, 256, 1024, 44);
  const bool sm90 = device_is_sm90();
  const std::string table = backend_profile_report(be);
  EXPECT_EQ(table.find("conv_ffn.wg.c128") != std::string::npos, sm90) << table;
  EXPECT_EQ(table.find("conv_ffn.wg.c256") != std::string::npos, sm90) << table;
  EXPECT_EQ(table.find("conv_ffn.fused.c128") == std::string::npos, sm90) << table;
  check_ffn(be, 4099, 64, 256, 37);   // other widths: their own kernels
  check_ffn(be, 1031, 128, 384, 38);  // E ≠ 4C: the streamed mma.sync form
}

TEST(CudaEncoderOps, FfnWidthsTheFusedKernelDoesNotTakeRunTheOpSequence) {
  FfnEnv env{{"VV_CUDA_FFN_LT", "0"}, {"VV_CUDA_FFN_WG", "0"}};
  VV_CUDA_BACKEND_OR_SKIP(gpu, true);
  check_ffn(*gpu, 1031, 48, 192, 6);    // C not in {32, 64, 128, 256, 512}
  check_ffn(*gpu, 129, 1024, 4096, 7);  // a later stage's width
}

// Mixer: the CUDA op against the CPU backend's op sequence (both f32).
void check_mixer(Backend& gpu, int64_t T, int64_t C, bool with_history, DType wt, uint32_t seed) {
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  HostMatrix x = random_matrix(T, C, DType::kF32, seed);
  HostMatrix nw = random_matrix(1, C, DType::kF32, seed + 1, 1.5f);
  HostMatrix hist = random_matrix(6, C, DType::kF32, seed + 2);
  HostMatrix w = random_matrix(C, 7, wt, seed + 3, 0.5f);
  HostMatrix b = random_matrix(1, C, DType::kF32, seed + 4, 0.2f);
  HostMatrix gamma = random_matrix(1, C, DType::kF32, seed + 5);
  HostMatrix u = random_matrix(T, C, DType::kF32, seed + 6), v = random_matrix(T, C, DType::kF32, seed + 7);
  const float eps = 1e-6f;
  HostMatrix want_x = x;
  Tensor wxv = want_x.view(), uv = u.view(), vv = v.view();
  const Tensor hv = with_history ? hist.view() : Tensor::matrix(nullptr, DType::kF32, 6, C);
  const Tensor nwv = Tensor::vector(nw.bytes.data(), DType::kF32, C),
               bv = Tensor::vector(b.bytes.data(), DType::kF32, C);
  const Tensor gv = Tensor::vector(gamma.bytes.data(), DType::kF32, C);
  cpu->conv_mixer(wxv, nwv, eps, hv, w.view(), bv, gv, uv, vv);

  DeviceMatrix dx = to_device(gpu, x), dnw = to_device(gpu, nw), dh = to_device(gpu, hist),
               dw = to_device(gpu, w);
  DeviceMatrix db = to_device(gpu, b), dg = to_device(gpu, gamma);
  DeviceMatrix du = poisoned(gpu, T, C), dv = poisoned(gpu, T, C);
  const Tensor dhv = with_history ? dh.t : Tensor::matrix(nullptr, DType::kF32, 6, C);
  gpu.conv_mixer(dx.t, Tensor::vector(dnw.buf.data(), DType::kF32, C), eps, dhv, dw.t,
                 Tensor::vector(db.buf.data(), DType::kF32, C), Tensor::vector(dg.buf.data(), DType::kF32, C),
                 du.t, dv.t);
  const std::string what = "conv_mixer T=" + std::to_string(T) + " C=" + std::to_string(C) + " " +
                           dtype_name(wt) + (with_history ? " history" : " zeros");
  expect_close(download_f32(gpu, dx.t), host_rows(wxv), 1e-5, what + ": x");
  const int64_t keep = std::min<int64_t>(T, 6);
  const std::vector<float> gu = download_f32(gpu, du.t), wu = host_rows(uv);
  expect_close(std::vector<float>(gu.end() - keep * C, gu.end()),
               std::vector<float>(wu.end() - keep * C, wu.end()), 1e-5, what + ": u (last rows)");
}

// Odd, prime and production shapes of the fused mixer (and widths it does not take).
void check_mixer_shapes(Backend& gpu) {
  check_mixer(gpu, 1, 32, true, DType::kF32, 11);
  check_mixer(gpu, 5, 64, true, DType::kF32, 12);  // fewer rows than the conv's reach
  check_mixer(gpu, 100003, 32, true, DType::kF32, 13);
  check_mixer(gpu, 997, 128, false, DType::kBF16, 14);
  check_mixer(gpu, 450, 2048, true, DType::kF32, 15);
  check_mixer(gpu, 3001, 256, false, DType::kF32, 17);
  check_mixer(gpu, 90001, 64, true, DType::kF32, 18);
  check_mixer(gpu, 33, 6, true, DType::kF16, 16);
  // The two-pass form's tiles (8192 / C rows): one partial tile, several with a partial last one,
  // a width that does not divide 8192, its widest width and one past it (the fallback).
  check_mixer(gpu, 200, 64, true, DType::kF32, 19);
  check_mixer(gpu, 1441, 128, true, DType::kBF16, 20);
  check_mixer(gpu, 2003, 36, false, DType::kF32, 21);
  check_mixer(gpu, 18001, 512, true, DType::kF32, 22);
  check_mixer(gpu, 3607, 1024, true, DType::kF32, 23);
  check_mixer(gpu, 9, 1024, true, DType::kF32, 24);
  check_mixer(gpu, 300007, 32, true, DType::kF32, 25);
}

TEST(CudaEncoderOps, FusedMixerOddPrimeAndProductionShapes) {
  for (const bool bf16 : {false, true}) {
    VV_CUDA_BACKEND_OR_SKIP(gpu, bf16);
    check_mixer_shapes(*gpu);
  }
}

// Backend::conv_block (VV_CUDA_ENC_BLOCK=1): the whole block in one kernel at C ∈ {32, 64}. It computes
// every value as conv_mixer then conv_ffn compute it on the same GPU, so x and u's last rows are
// compared with those two ops' bitwise (the default backend, which declines conv_block); where the CPU
// reference is affordable, also against it with the mixer's and the FFN's own tolerances (the mixed
// rows from the CPU backend's conv_mixer, the FFN update within 5e-3 as check_ffn).
size_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

void check_block(Backend& blk, Backend& ops, int64_t T, int64_t C, bool with_history, DType taps,
                 uint32_t seed, bool cpu_reference) {
  const int64_t E = 4 * C;
  HostMatrix x = random_matrix(T, C, DType::kF32, seed);
  HostMatrix hist = random_matrix(6, C, DType::kF32, seed + 1);
  HostMatrix nw = random_matrix(1, C, DType::kF32, seed + 2, 1.5f);
  HostMatrix w = random_matrix(C, 7, taps, seed + 3, 0.5f);
  HostMatrix b = random_matrix(1, C, DType::kF32, seed + 4, 0.2f);
  HostMatrix gamma = random_matrix(1, C, DType::kF32, seed + 5);
  HostMatrix nw2 = random_matrix(1, C, DType::kF32, seed + 6, 1.5f);
  HostMatrix w1 = random_matrix(E, C, DType::kBF16, seed + 7, 1.0f / std::sqrt(static_cast<float>(C)));
  HostMatrix b1 = random_matrix(1, E, DType::kF32, seed + 8, 0.2f);
  HostMatrix w2 = random_matrix(C, E, DType::kBF16, seed + 9, 1.0f / std::sqrt(static_cast<float>(E)));
  HostMatrix b2 = random_matrix(1, C, DType::kF32, seed + 10, 0.2f);
  HostMatrix g2 = random_matrix(1, C, DType::kF32, seed + 11);
  const float eps = 1e-5f;
  const std::string what = "conv_block T=" + std::to_string(T) + " C=" + std::to_string(C) + " " +
                           dtype_name(taps) + (with_history ? " history" : " zeros");
  const int64_t keep = std::min<int64_t>(T, 6);

  // Runs the block on `be`, through conv_block or as conv_mixer then conv_ffn; returns x and u's
  // last rows (u read between the two ops on the op path: the FFN may use u as scratch).
  const auto run = [&](Backend& be, bool block, std::vector<float>& gx, std::vector<float>& gu) {
    DeviceMatrix dx = to_device(be, x), dh = to_device(be, hist), dnw = to_device(be, nw),
                 dw = to_device(be, w);
    DeviceMatrix db = to_device(be, b), dg = to_device(be, gamma), dnw2 = to_device(be, nw2);
    DeviceMatrix dw1 = to_device(be, w1), db1 = to_device(be, b1), dw2 = to_device(be, w2),
                 db2 = to_device(be, b2);
    DeviceMatrix dg2 = to_device(be, g2);
    DeviceMatrix du = poisoned(be, T, C), dv = poisoned(be, T, C),
                 dhh = poisoned(be, std::min<int64_t>(T, 1000), E);
    const auto vec = [](DeviceMatrix& m, int64_t n) { return Tensor::vector(m.buf.data(), DType::kF32, n); };
    const Tensor hv = with_history ? dh.t : Tensor::matrix(nullptr, DType::kF32, 6, C);
    Backend::ConvBlockWeights wt{vec(dnw, C), dw.t,        vec(db, C), vec(dg, C),  vec(dnw2, C),
                                 dw1.t,       vec(db1, E), dw2.t,      vec(db2, C), vec(dg2, C)};
    if (block) {
      ASSERT_TRUE(be.conv_block(dx.t, eps, hv, wt, du.t, dv.t, dhh.t)) << what << ": not taken";
      const std::vector<float> all = download_f32(be, du.t);
      gu.assign(all.end() - keep * C, all.end());
    } else {
      be.conv_mixer(dx.t, wt.norm_w, eps, hv, wt.mixer_w, wt.mixer_b, wt.gamma, du.t, dv.t);
      const std::vector<float> all = download_f32(be, du.t);
      gu.assign(all.end() - keep * C, all.end());
      be.conv_ffn(dx.t, wt.ffn_norm_w, eps, wt.w1, wt.b1, wt.w2, wt.b2, wt.ffn_gamma, du.t, dv.t, dhh.t);
    }
    gx = download_f32(be, dx.t);
  };
  std::vector<float> bx, bu, ox, ou;
  run(blk, true, bx, bu);
  run(ops, false, ox, ou);
  EXPECT_EQ(first_bit_difference(bx, ox), bx.size())
      << what << ": x differs from conv_mixer + conv_ffn at element " << first_bit_difference(bx, ox);
  EXPECT_EQ(first_bit_difference(bu, ou), bu.size())
      << what << ": u's last rows differ at element " << first_bit_difference(bu, ou);
  if (!cpu_reference) return;
  static std::unique_ptr<Backend> cpu = make_cpu_backend();
  HostMatrix mixed = x, u = random_matrix(T, C, DType::kF32, seed + 12),
             v = random_matrix(T, C, DType::kF32, seed + 13);
  Tensor mv = mixed.view(), uv = u.view(), vv = v.view();
  const Tensor hv = with_history ? hist.view() : Tensor::matrix(nullptr, DType::kF32, 6, C);
  cpu->conv_mixer(mv, Tensor::vector(nw.bytes.data(), DType::kF32, C), eps, hv, w.view(),
                  Tensor::vector(b.bytes.data(), DType::kF32, C),
                  Tensor::vector(gamma.bytes.data(), DType::kF32, C), uv, vv);
  const std::vector<float> wu = host_rows(uv);
  expect_close(bu, std::vector<float>(wu.end() - keep * C, wu.end()), 1e-5, what + ": u (last rows) vs cpu");
  // The CPU mixer wrote its output through the view into mixed's bytes; its f (what at() reads, and so
  // what ffn_reference sees) still holds x until it is refreshed from them.
  const std::vector<float> m = host_rows(mv);
  mixed.f = m;
  const std::vector<float> want = ffn_reference(mixed, nw2, eps, w1, b1, w2, b2, g2);
  std::vector<float> got = bx;
  for (size_t i = 0; i < got.size(); ++i) got[i] -= m[i];
  expect_close(got, want, 5e-3, what + ": FFN update vs cpu");
}

// Both backends with VV_CUDA_FFN_WG=1 (the default), so that at C = 128 (sm_90) the op sequence's FFN
// is the wgmma kernel the block form runs; at 32 and 64 channels the switch changes nothing. The op
// sequence's backend has VV_CUDA_ENC_BLOCK=0.
TEST(CudaEncoderOps, WholeBlockInOneKernelEqualsMixerThenFfnBitwise) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  auto opsr = cuda_backend_with({{"VV_CUDA_FFN_WG", "1"}, {"VV_CUDA_ENC_BLOCK", "0"}}, true);
  auto blk = cuda_backend_with(
      {{"VV_CUDA_ENC_BLOCK", "1"}, {"VV_CUDA_FFN_WG", "1"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(blk.is_ok() && opsr.is_ok());
  Backend& be = **blk;
  std::unique_ptr<Backend>& ops = *opsr;
  // Rows: one, fewer than the conv's reach, one 16-row step, a run (64) and one past it, odd and prime
  // counts with partial last steps; the taps as F32, BF16 and F16; with and without history.
  check_block(be, *ops, 1, 32, true, DType::kF32, 101, true);
  check_block(be, *ops, 5, 64, true, DType::kF32, 102, true);
  check_block(be, *ops, 16, 32, false, DType::kBF16, 103, true);
  check_block(be, *ops, 63, 32, true, DType::kF16, 104, true);
  check_block(be, *ops, 64, 64, true, DType::kF32, 105, true);
  check_block(be, *ops, 65, 32, true, DType::kBF16, 106, true);
  check_block(be, *ops, 129, 64, false, DType::kF32, 107, true);
  check_block(be, *ops, 1031, 32, true, DType::kF32, 108, true);
  check_block(be, *ops, 4099, 64, true, DType::kBF16, 109, true);
  check_block(be, *ops, 20011, 32, true, DType::kF32, 110, true);
  // More runs than the grid's warps (C = 32: 2 blocks × 8 warps an SM; C = 64: 12 warps an SM; 64
  // rows a run), so each warp takes several runs and prefetches across them; a 60 s stage-0 clip is
  // 1.44 M rows.
  check_block(be, *ops, 300007, 32, true, DType::kF32, 111, false);
  check_block(be, *ops, 250007, 64, true, DType::kF32, 112, false);
  std::vector<const char*> labels = {"conv_block.fused.c32", "conv_block.fused.c64"};
  if (device_is_sm90()) {
    // C = 128 on the wgmma kernel with the mixer in front: one partial tile, one and a bit, odd and
    // prime counts, and more tiles than blocks (the side pass's rows at every tile after the first).
    check_block(be, *ops, 5, 128, true, DType::kF32, 113, true);
    check_block(be, *ops, 129, 128, false, DType::kBF16, 114, true);
    check_block(be, *ops, 997, 128, true, DType::kF16, 115, true);
    check_block(be, *ops, 40009, 128, true, DType::kF32, 116, false);
    check_block(be, *ops, 4099, 128, true, DType::kF32, 117, true);
    labels.push_back("conv_block.fused.c128");
  }
  const std::string table = backend_profile_report(be);
  for (const char* label : labels)
    EXPECT_NE(table.find(label), std::string::npos) << label << " not run\n" << table;
}

// conv_block declines (returns false, runs nothing) with VV_CUDA_ENC_BLOCK=0, in f32 mode, at other
// widths, at 128 channels without the wgmma FFN and where E ≠ 4C: the encoder then runs conv_mixer and
// conv_ffn.
TEST(CudaEncoderOps, WholeBlockKernelDeclinesWhatItDoesNotTake) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  auto off = cuda_backend_with({{"VV_CUDA_ENC_BLOCK", "0"}}, true);
  auto blk = cuda_backend_with({{"VV_CUDA_ENC_BLOCK", "1"}, {"VV_CUDA_FFN_WG", "0"}}, true);
  auto f32 = cuda_backend_with({{"VV_CUDA_ENC_BLOCK", "1"}}, false);
  ASSERT_TRUE(off.is_ok() && blk.is_ok() && f32.is_ok());
  const auto declines = [](Backend& be, int64_t T, int64_t C, int64_t E) {
    HostMatrix x = random_matrix(T, C, DType::kF32, 7);
    HostMatrix f = random_matrix(1, std::max(C, E), DType::kF32, 8);
    HostMatrix w = random_matrix(C, 7, DType::kF32, 9), w1 = random_matrix(E, C, DType::kBF16, 10),
               w2 = random_matrix(C, E, DType::kBF16, 11);
    DeviceMatrix dx = to_device(be, x), df = to_device(be, f), dw = to_device(be, w), dw1 = to_device(be, w1),
                 dw2 = to_device(be, w2);
    DeviceMatrix du = poisoned(be, T, C), dv = poisoned(be, T, C), dh = poisoned(be, T, E);
    const Tensor vc = Tensor::vector(df.buf.data(), DType::kF32, C),
                 ve = Tensor::vector(df.buf.data(), DType::kF32, E);
    Backend::ConvBlockWeights wt{vc, dw.t, vc, vc, vc, dw1.t, ve, dw2.t, vc, vc};
    const bool taken =
        be.conv_block(dx.t, 1e-5f, Tensor::matrix(nullptr, DType::kF32, 6, C), wt, du.t, dv.t, dh.t);
    EXPECT_EQ(download_f32(be, dx.t), host_rows(x.view())) << "x changed, C=" << C << " E=" << E;
    return !taken;
  };
  EXPECT_TRUE(declines(**off, 100, 32, 128)) << "taken with VV_CUDA_ENC_BLOCK=0";
  EXPECT_TRUE(declines(**f32, 100, 32, 128)) << "taken in f32 mode";
  EXPECT_TRUE(declines(**blk, 100, 128, 512)) << "taken at C = 128 with VV_CUDA_FFN_WG=0";
  EXPECT_TRUE(declines(**blk, 100, 48, 192)) << "taken at C = 48";
  EXPECT_TRUE(declines(**blk, 100, 32, 64)) << "taken with E = 2C";
}

}  // namespace
}  // namespace vv::test::encoderops
