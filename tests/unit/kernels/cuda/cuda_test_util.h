// Helpers of the GPU tests: the CUDA backend (or a skip with the reason, or a failure where
// VV_REQUIRE_GPU=1 says a GPU must be there), device copies of host matrices, and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/device/backend_factory.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace vv::test {

inline bool gpu_required() {
  const char* v = std::getenv("VV_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

// At the top of a gpu test: without a usable GPU, skip with the reason (fail under VV_REQUIRE_GPU=1).
#define VV_GPU_OR_SKIP()                                                                              \
  if (::vv::usable_gpu_count() == 0) {                                                                \
    if (::vv::test::gpu_required()) FAIL() << "VV_REQUIRE_GPU=1: " << ::vv::gpu_unavailable_reason(); \
    GTEST_SKIP() << "no usable GPU: " << ::vv::gpu_unavailable_reason();                              \
  }

// The CUDA backend on device 0, or nullptr after GTEST_SKIP/FAIL (check with `if (!be) return;`).
#define VV_CUDA_BACKEND_OR_SKIP(var, bf16)                                                      \
  std::unique_ptr<::vv::Backend> var;                                                           \
  {                                                                                             \
    ::vv::BackendOptions vv_opt_;                                                               \
    vv_opt_.gpu_bf16_gemm = (bf16);                                                             \
    auto vv_be_ = ::vv::usable_gpu_count() > 0                                                  \
                      ? ::vv::make_backend("cuda:0", vv_opt_)                                   \
                      : ::vv::Result<std::unique_ptr<::vv::Backend>>(                           \
                            ::vv::unsupported(::vv::gpu_unavailable_reason()));                 \
    if (!vv_be_.is_ok()) {                                                                      \
      if (::vv::test::gpu_required()) FAIL() << "VV_REQUIRE_GPU=1: " << vv_be_.status().message(); \
      GTEST_SKIP() << "no usable GPU: " << vv_be_.status().message();                           \
    }                                                                                           \
    var = std::move(*vv_be_);                                                                   \
  }

// make_backend("cuda:0") with the environment variables `env` set while it is created (the backend
// reads its VV_CUDA_* switches there), then unset again.
inline Result<std::unique_ptr<Backend>> cuda_backend_with(
    const std::vector<std::pair<const char*, const char*>>& env, bool bf16) {
  for (const auto& [k, v] : env) ::setenv(k, v, 1);
  BackendOptions opt;
  opt.gpu_bf16_gemm = bf16;
  auto be = make_backend("cuda:0", opt);
  for (const auto& [k, v] : env) ::unsetenv(k);
  return be;
}

// fn(begin, end) over [0, n) in contiguous ranges, one thread each, as many as the machine has cores:
// for the GPU tests' CPU references (the device host has 16 cores). Each range computes its own
// outputs with the same code, so the results do not depend on the split.
template <typename Fn>
void parallel_ranges(int64_t n, Fn fn) {
  const int64_t threads =
      std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1, 64);
  const int64_t per = std::max<int64_t>(1, (n + threads - 1) / threads);
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < n; b += per) pool.emplace_back([&fn, b, e = std::min(n, b + per)] { fn(b, e); });
  for (std::thread& t : pool) t.join();
}

// A device copy of a host matrix (same bytes, same strides).
struct DeviceMatrix {
  Buffer buf;
  Tensor t;
};

inline DeviceMatrix to_device(Backend& be, HostMatrix& m) {
  DeviceMatrix d;
  d.buf = be.allocate(m.bytes.size());
  be.upload(d.buf.data(), m.bytes.data(), m.bytes.size());
  d.t = m.view();
  d.t.data = d.buf.data();
  return d;
}
inline DeviceMatrix to_device_i32(Backend& be, const std::vector<int32_t>& v) {
  DeviceMatrix d;
  d.buf = be.allocate(std::max<size_t>(v.size(), 1) * 4);
  be.upload(d.buf.data(), v.data(), v.size() * 4);
  d.t = Tensor::vector(d.buf.data(), DType::kI32, static_cast<int64_t>(v.size()));
  return d;
}
// Device F32 [rows, cols] (row stride `stride`) filled with NaN, so unwritten outputs show.
inline DeviceMatrix poisoned(Backend& be, int64_t rows, int64_t cols, int64_t stride = -1) {
  if (stride < 0) stride = cols;
  DeviceMatrix d;
  std::vector<float> nan(static_cast<size_t>(std::max<int64_t>(rows * stride, 1)), NAN);
  d.buf = be.allocate(nan.size() * 4);
  be.upload(d.buf.data(), nan.data(), nan.size() * 4);
  d.t = Tensor::matrix(d.buf.data(), DType::kF32, rows, cols, stride);
  return d;
}
inline std::vector<float> download_f32(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows() * t.cols()));
  be.synchronize();
  for (int64_t r = 0; r < t.rows(); ++r) {
    be.download(out.data() + r * t.cols(), static_cast<const float*>(t.data) + r * t.row_stride(),
                static_cast<size_t>(t.cols()) * 4);
  }
  return out;
}
inline std::vector<float> host_rows(const Tensor& t) {  // a host F32 view, packed
  std::vector<float> out(static_cast<size_t>(t.rows() * t.cols()));
  for (int64_t r = 0; r < t.rows(); ++r)
    for (int64_t c = 0; c < t.cols(); ++c) out[r * t.cols() + c] = t.ptr<const float>()[r * t.row_stride() + c];
  return out;
}

// max|got − want| ≤ rel · max(max|want|, scale_floor), no NaN anywhere. scale_floor: the size of
// the inputs where the output is an average of them (attention), so rounding is judged against it.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         const std::string& what, double scale_floor = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double mx = 0, err = 0;
  size_t worst = 0, nan = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(want[i])));
    if (std::isnan(got[i]) != std::isnan(want[i])) ++nan;
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > err) {
      err = e;
      worst = i;
    }
  }
  EXPECT_EQ(nan, 0u) << what << ": NaN (unwritten or wrong) elements";
  EXPECT_LE(err, rel * std::max(mx, scale_floor)) << what << ": worst at " << worst << " got " << got[worst] << " want "
                                           << want[worst] << " (max|ref| " << mx << ")";
}

}  // namespace vv::test
