// A weight-streaming tensor-core GEMM for few rows (1..128: the decode steps of a batch), built to
// read the weights at HBM speed: out (=|+=) a · wᵀ + bias, bf16 operands, f32 accumulation
// (kernels/cuda/stream_gemm.cu). Where cuBLASLt loses bandwidth at these shapes: its tiles are
// M-sized, so a narrow weight (N = 3,584) gives too few blocks, and a wide one a partial last wave.
//
// Work is cut stream-K style: the (128-row weight tile × 64-deep K step) units, tile by tile, are
// divided evenly over a persistent grid of two blocks per SM, so every SM streams the same number of
// weight bytes whatever N and K. A tile that falls to several blocks is summed with f32 atomics into
// `out` (zeroed first by the launcher when not accumulating), so the bits of a row can depend on the
// timing: deterministic mode keeps the skinny GEMM (skinny_gemm.cuh). Launched with programmatic
// dependent launch: a block loads its first weight stages before waiting for the previous kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace vv::cuda {

constexpr int64_t kStreamGemmMaxRows = 128;

// Whether the kernel takes these operands: 1 ≤ M ≤ kStreamGemmMaxRows, K % 8 == 0, a packed bf16
// [M, K] and w bf16 [N, K] with ldw % 8 == 0, ldw ≥ K and 16-byte aligned bases.
bool stream_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw);

// The compute of a unit: mma.sync from ldmatrix fragments (cp.async loads; any sm_80+), or the Hopper
// form: TMA loads into 128-byte-swizzled stages and wgmma (sm_90a only; the caller checks the device).
enum class StreamGemmKind { kMma, kWgmma };

// out[m, n] = (accumulate ? out[m, n] : 0) + Σ_k a[m, k] · w[n, k] + bias[n]; bias may be null.
// `sms`: the device's SM count (the grid is two blocks per SM). Returns the form that ran (kMma when
// kWgmma was asked for but the driver has no tensor-map entry point).
StreamGemmKind stream_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                           const float* bias, bool accumulate, float* out, int64_t ldo, int sms,
                           StreamGemmKind kind, cudaStream_t s);

// How many of the launch's block boundaries fall inside an output tile for an [N, K] weight (0: every
// tile is one block's, and no atomics or zeroing are needed).
int stream_gemm_split_tiles(int64_t N, int64_t K, int sms);

}  // namespace vv::cuda
