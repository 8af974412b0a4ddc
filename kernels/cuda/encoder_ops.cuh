// The encoders' fused ConvNeXt branches (Backend::conv_ffn on the tensor cores, the mixer's conv with
// its scaled residual); internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace vv::cuda {

// Whether conv_ffn_fused takes these operands: C ∈ {32, 64, 128, 256}, E a multiple of 64, BF16 weights
// (w1 [E, C], w2 [C, E], contiguous, 16-byte aligned), F32 norm_w/gamma/b1/b2, F32 x.
bool conv_ffn_fits(const Tensor& x, const Tensor& norm_w, const Tensor& w1, const Tensor& b1,
                   const Tensor& w2, const Tensor& b2, const Tensor& gamma);

// x += gamma ⊙ (gelu_erf(rms_norm(x)·w1ᵀ + b1)·w2ᵀ + b2) in one kernel: per warp tile of 16 rows the
// normalised rows (rounded to bf16, as the bf16 GEMM path rounds its operand) stay in shared memory,
// the hidden rows are made 64 columns at a time in registers (bias, GELU in f32, rounded to bf16)
// and multiplied straight into the f32 accumulators of the second GEMM.
// The GELU's erf: the fast form (VV_CUDA_FFN_FAST_ERF, on unless 0) unless `exact_erf`, then erff, as
// the op sequence's GELU passes compute it (deterministic mode: a row's bits must not depend on which
// path its launch takes). The same parameter on conv_ffn_wg and conv_block_fused.
void conv_ffn_fused(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                    const Tensor& w2, const Tensor& b2, const Tensor& gamma, bool exact_erf, cudaStream_t s);

// Backend::conv_mixer in two kernels with rms_norm's and dwconv_add's f32 arithmetic (the same bits):
// x += gamma ⊙ dwconv7(rms_norm(x), history). Writes only the last min(T, 6) rows of u (what the
// caller carries as the next segment's history); v is scratch (the normalised rows before each tile).
// C a multiple of 4 up to 1024, 16-byte aligned rows of x and u, F32 norm weight (conv_mixer_fits).
bool conv_mixer_fits(const Tensor& x, const Tensor& norm_w, const Tensor& history, const Tensor& w,
                     const Tensor& bias, const Tensor& gamma, const Tensor& u, const Tensor& v);
void conv_mixer_fused(Tensor& x, const Tensor& norm_w, float eps, const Tensor& history, const Tensor& w,
                      const Tensor& bias, const Tensor& gamma, Tensor& u, Tensor& v, cudaStream_t s);

// conv_ffn_fused's arithmetic on wgmma (sm_90a; the caller checks the device is sm_90): C = 128 or 256,
// E = 4C, the operands conv_ffn_fits takes, x's rows 16-byte aligned, 225 / 193 KB of shared memory a
// block. Not bitwise conv_ffn_fused (the tensor cores' summation order); at C = 256 the update is added
// into x by reductions in L2 (one more rounding).
bool conv_ffn_wg_fits(const Tensor& x, const Tensor& norm_w, const Tensor& w1, const Tensor& b1,
                      const Tensor& w2, const Tensor& b2, const Tensor& gamma);
void conv_ffn_wg(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                 const Tensor& w2, const Tensor& b2, const Tensor& gamma, bool exact_erf, cudaStream_t s);

// conv_mixer_fused's side pass for tiles of R rows: u (x normalised with norm_w, rms_norm's bits) of
// the 6 rows before every tile but the first into side[(tile − 1)·6 + j][C], from x as it is now.
void mixer_halo(const Tensor& x, const Tensor& norm_w, float eps, float* side, int R, cudaStream_t s);

// Backend::conv_block in one kernel (after mixer_halo's side pass into v), E = 4C:
//  - C ∈ {32, 64}: the operands conv_mixer_fused and conv_ffn_fused (resident form) both take, v room
//    for 6 rows of C per 64 rows after the first; x and u's last min(T, 6) rows get the bits of
//    conv_mixer_fused then conv_ffn_fused;
//  - C = 128 where `wgmma` (the caller's sm_90 and VV_CUDA_FFN_WG): the operands conv_mixer_fused and
//    conv_ffn_wg take, v room for 6 rows per 128 after the first; the bits of conv_mixer_fused then
//    conv_ffn_wg.
// The rest of u is not written.
bool conv_block_fits(const Tensor& x, const Tensor& history, const Backend::ConvBlockWeights& wt,
                     const Tensor& u, const Tensor& v, bool wgmma);
void conv_block_fused(Tensor& x, float eps, const Tensor& history, const Backend::ConvBlockWeights& wt,
                      Tensor& u, Tensor& v, bool exact_erf, cudaStream_t s);

// The fused kernels' GELU forms on the device, for tests: out[i] = GELU(x[i]) by form `form` (0: erff,
// 1: the fast erf, VV_CUDA_FFN_FAST_ERF's default), n ≥ 0 device floats each, on stream s.
void gelu_forms_eval(const float* x, float* out, int64_t n, int form, cudaStream_t s);
// Whether the fused kernels' GELU takes the fast erf (VV_CUDA_FFN_FAST_ERF unless 0, and not exact_erf):
// the cuBLASLt FFN's GELU pass follows it.
bool ffn_fast_erf(bool exact_erf);

// x[t,c] += gamma[c] · (bias[c] + Σ_k w[c,k] · u[t + k − 6, c]) with u's rows before 0 from history
// ([6, C], or zeros when history has no data): depthwise_conv1d_causal then add_scaled, in one pass
// and with the same f32 arithmetic. Kernel size 7 only, and a history of at least 6 f32 rows of C
// (dwconv_add_fits).
bool dwconv_add_fits(const Tensor& x, const Tensor& u, const Tensor& history, const Tensor& w,
                     const Tensor& bias, const Tensor& gamma);
void dwconv_add(Tensor& x, const Tensor& u, const Tensor& history, const Tensor& w, const Tensor& bias,
                const Tensor& gamma, cudaStream_t s);

}  // namespace vv::cuda
