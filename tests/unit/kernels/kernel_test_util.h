// Helpers shared by the kernel tests: seeded random host tensors in each dtype and comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/f16_convert.h"

namespace vv::test {

// Host storage for one matrix in a given dtype (values also kept as the f32 they round to).
struct HostMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> f;  // exact f32 value of each stored element, [rows*stride]

  Tensor view() { return Tensor::matrix(bytes.data(), dtype, rows, cols, stride); }
  float at(int64_t r, int64_t c) const { return f[r * stride + c]; }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
};

inline HostMatrix random_matrix(int64_t rows, int64_t cols, DType dt, uint32_t seed, float scale = 1.0f,
                                int64_t stride = -1) {
  HostMatrix m;
  m.dtype = dt;
  m.rows = rows;
  m.cols = cols;
  m.stride = stride < 0 ? cols : stride;
  const int64_t n = std::max<int64_t>(rows * m.stride, 1);
  m.bytes.assign(n * dtype_size(dt) + 64, 0);
  m.f.assign(n, 0.0f);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (dt == DType::kBF16) {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(m.bytes.data() + 2 * i, &h, 2);
      m.f[i] = bf16_to_f32(h);
    } else if (dt == DType::kF16) {
      const uint16_t h = cpu::f32_to_f16(v);
      std::memcpy(m.bytes.data() + 2 * i, &h, 2);
      m.f[i] = f16_to_f32(h);
    } else {
      std::memcpy(m.bytes.data() + 4 * i, &v, 4);
      m.f[i] = v;
    }
  }
  return m;
}

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(std::max<int64_t>(n, 1));
  for (auto& x : v) x = dist(rng);
  return v;
}

// |got − want| ≤ atol + rtol·|want|
inline bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// The value stored at element i of m (row-major over its stride), as f32.
inline float stored_value(const HostMatrix& m, int64_t i) {
  uint16_t h;
  switch (m.dtype) {
    case DType::kBF16:
      std::memcpy(&h, m.bytes.data() + 2 * i, 2);
      return bf16_to_f32(h);
    case DType::kF16:
      std::memcpy(&h, m.bytes.data() + 2 * i, 2);
      return f16_to_f32(h);
    default: {
      float f;
      std::memcpy(&f, m.bytes.data() + 4 * i, 4);
      return f;
    }
  }
}

// An F32 copy of m's stored values, each rounded to bf16 (what the tensor-core kernels compute with).
inline HostMatrix bf16_rounded_f32(const HostMatrix& m) {
  HostMatrix r;
  r.dtype = DType::kF32;
  r.rows = m.rows;
  r.cols = m.cols;
  r.stride = m.stride;
  const int64_t n = m.rows * m.stride > 1 ? m.rows * m.stride : 1;
  r.bytes.assign(static_cast<size_t>(n) * 4 + 64, 0);
  r.f.assign(static_cast<size_t>(n), 0.f);
  for (int64_t i = 0; i < m.rows * m.stride; ++i) {
    const float v = bf16_to_f32(f32_to_bf16(stored_value(m, i)));
    std::memcpy(r.bytes.data() + 4 * i, &v, 4);
    r.f[i] = v;
  }
  return r;
}

}  // namespace vv::test
