// Division by a run-time constant through one multiply and one shift (the round-up method of
// Granlund and Montgomery), for the kernels' block-table lookups (position / block size): a hardware
// integer division costs ~20 instructions. No CUDA headers: a host test
// (tests/unit/kernels/fast_div_test.cpp) checks the same code against / and %.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VV_FD_HD __host__ __device__
#else
#define VV_FD_HD
#endif

namespace vv::cuda {

// For a divisor d ≥ 1 and dividends n < 2^31: with l = ceil(log2 d), p = 31 + l and m = ceil(2^p / d)
// (m < 2^32), n / d = (n · m) >> p. Why: m·d = 2^p + e with 0 ≤ e < d ≤ 2^l, so for n = q·d + r,
// n·m / 2^p = q + r/d + n·e / (d·2^p), and n·e < 2^31 · 2^l = 2^p keeps the last two terms below 1.
struct FastDiv {
  uint32_t d = 1, m = 0x80000000u, p = 31;

  static constexpr FastDiv of(uint32_t divisor) {
    FastDiv f;
    f.d = divisor == 0 ? 1 : divisor;
    uint32_t l = 0;
    while ((uint64_t{1} << l) < f.d) ++l;
    f.p = 31 + l;
    f.m = static_cast<uint32_t>(((uint64_t{1} << f.p) + f.d - 1) / f.d);
    return f;
  }
  VV_FD_HD constexpr uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> p);
  }
  VV_FD_HD constexpr uint32_t mod(uint32_t n) const { return n - div(n) * d; }
};

}  // namespace vv::cuda

#undef VV_FD_HD
