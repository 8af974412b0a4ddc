// Element conversions and the erf GELU shared by the CUDA kernels (device code, internal to
// kernels/cuda): a float from an f32/bf16/f16 element, an element from a float (round to nearest even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace vv::cuda {

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// GELU with erf (the model's), in f32.
__device__ __forceinline__ float gelu_erf(float x) {
  return x * 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
}

// The encoders' fused kernels and the cuBLASLt FFN's GELU pass, by default (VV_CUDA_FFN_FAST_ERF=0 gives erff
// back; so does the caller's exact_erf, in deterministic mode, where the op sequence's erff GELU may compute
// some of a row's launches): the same GELU with erf from
// Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7 on erf) instead of erff's ~30 instructions, which are most of
// the small widths' work (E hidden values per row against 2C·E multiply-adds on the tensor cores).
// 1 + erf(x/√2) is formed without cancellation: 2 − erfc(|x|/√2) for x ≥ 0 and erfc(|x|/√2) below, so
// negative inputs keep their relative accuracy. In instructions (14 a value): the 1/√2 and the ½ are
// folded into the coefficients (t's, and the polynomial's, which the ½ scales exactly), the exponent is
// x·(x·−log2(e)/2), and the reciprocal and the exp2 are the SFU's flush-to-zero forms. The plain
// __fdividef / __expf forms cost 24.5 instructions a value in the wgmma kernel's SASS (session 15): range
// fix-ups for subnormal operands and results, which here only arise past |x| ≈ 13 (where erfc underflows:
// the GELU is then x, or 0 where it would be a subnormal negative value).
__device__ __forceinline__ float rcp_approx_ftz(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float ex2_approx_ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float gelu_erf_fast(float x) {
  const float t = rcp_approx_ftz(fmaf(0.3275911f * 0.70710678118654752440f, fabsf(x), 1.0f));
  float p = fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f);
  p = fmaf(t, p, 0.5f * 1.421413741f);
  p = fmaf(t, p, 0.5f * -0.284496736f);
  p = fmaf(t, p, 0.5f * 0.254829592f);
  const float half_erfc = p * t * ex2_approx_ftz(x * (x * -0.72134752044448170368f));  // ½·erfc(|x|/√2)
  // x·Φ(x) = max(x, 0) − |x|·½erfc(|x|/√2): one FMNMX and one FFMA (the |x| a source modifier) instead of a
  // compare, a select, 1 − h and a product (16 → 14 instructions a value with the bias; session 39). x < 0
  // gives the same bits as x·h; x ≥ 0 rounds once instead of twice. ±0 give +0; +inf gives NaN (−inf did
  // before too); NaN stays NaN.
  return fmaf(-fabsf(x), half_erfc, fmaxf(x, 0.0f));
}

// The GELU form, a template argument of the encoders' kernels and the cuBLASLt FFN's GELU pass: 0 erff
// (kGeluExact), 1 the erf above (kGeluErfFast). (Session 34 measured a third, x·σ(x·q(x²)) with q a fitted
// cubic, 10 instructions a value: both encoders over 60 s 17.69 against 17.74 ms on an H100, no gain;
// removed, code at 05e28e8.)
constexpr int kGeluExact = 0;
constexpr int kGeluErfFast = 1;
template <int kGelu>
__device__ __forceinline__ float gelu_of(float x) {
  if constexpr (kGelu == kGeluErfFast) {
    return gelu_erf_fast(x);
  } else {
    return gelu_erf(x);
  }
}

}  // namespace vv::cuda
