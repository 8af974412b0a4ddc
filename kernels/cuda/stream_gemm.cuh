// A weight-streaming tensor-core GEMM for few rows (1..128: the decode steps of a batch), built to
// read the weights at HBM speed: out (=|+=) a · wᵀ + bias, bf16 operands, f32 accumulation
// (kernels/cuda/stream_gemm.cu). The hypothesis it tests: cuBLASLt's tiles are M-sized, so a narrow
// weight (N = 3,584) gives it too few blocks and a wide one a partial last wave. Measured on the H200
// (kernels/cuda/NOTES.md, session 8): faster than cuBLASLt only at one row on the widest weights
// (the LM head: 4.18 TB/s); from 2 rows up cuBLASLt wins, so it is opt-in (VV_CUDA_STREAM_GEMM).
//
// Work is cut stream-K style: the (weight tile × 64-deep K step) units, tile by tile, are divided
// evenly over a persistent grid (one or two blocks per SM), so every SM streams the same number of
// weight bytes whatever N and K. A tile that falls to several blocks is summed with f32 atomics into
// `out` (after a plain store by one of them, or a zeroing, when not accumulating), so the bits of a
// row can depend on the timing: deterministic mode keeps the skinny GEMM (skinny_gemm.cuh). Launched
// with programmatic dependent launch: a block loads its first weight stages before waiting for the
// previous kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vv::cuda {

constexpr int64_t kStreamGemmMaxRows = 128;

// Whether the kernel takes these operands: 1 ≤ M ≤ kStreamGemmMaxRows, K % 8 == 0, a packed bf16
// [M, K] and w bf16 [N, K] with ldw % 8 == 0, ldw ≥ K and 16-byte aligned bases.
bool stream_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw);

// The compute of a unit: mma.sync from ldmatrix fragments (cp.async loads; any sm_80+), or the Hopper
// form: TMA loads into 128-byte-swizzled stages and wgmma (sm_90a only; the caller checks the device).
// kWarpSpec: the Hopper form with a producer warp, full/empty barrier pairs and partial sums added in
// a fixed order (no atomics: the bits depend only on the shape and the SM count).
enum class StreamGemmKind { kMma, kWgmma, kWarpSpec };

// Device memory the Hopper forms use between blocks. `counts`: `count_ints` ints, zero when first
// handed over (the warp-specialised form leaves them zero after each call; the one-barrier form
// zeroes what it uses itself). `ws`: the warp-specialised form's partial sums,
// stream_gemm_ws_bytes(sms) bytes (8 × SMs × 64 KiB; its calls fall back to kWgmma without it).
struct StreamGemmScratch {
  int* counts = nullptr;
  size_t count_ints = 0;
  float* ws = nullptr;
  size_t ws_bytes = 0;
  // The warp-specialised form's cluster: 1 = every block loads a's rows itself (the default: faster on
  // the H100, session 22), 2 = pairs of blocks share each stage's rows of a (each loads half and
  // multicasts it to both), 4 = fours do (from 17 rows; 2 below).
  int ws_cluster = 1;
  // The warp-specialised form's least units (64-deep steps of one tile) a run: fewer runs than SMs when
  // a shape has few units, so that the partial sums of shared tiles (M × 256 floats a segment) stay
  // small against the weight bytes a run streams. 1: a run an SM whatever the shape.
  int ws_min_units = 1;
  // The warp-specialised form's most segments a tile (its runs over the grid cut a tile into at most this
  // many; 0: no bound): the grid shrinks to tiles × this on shapes with few tiles (the k/v projection's
  // 2 tiles were cut 56 ways, then summed by one block slot after slot). Independent of the row count.
  int ws_max_split = 8;
  // Row-invariant (deterministic mode): the split over the grid and the cluster do not depend on the
  // row count (no clamp to the clusters resident at once; clusters of 4 taken as 2), so a row's bits
  // depend on its own values, the shape and the SM count only, provided wgmma's sums for one output do
  // not depend on the instruction's N (the 16·NT padded rows; the gpu test checks it). pad128: every
  // launch in the 128-row form (N = 128), which does not rely on that.
  bool row_invariant = false;
  bool pad128 = false;
};
size_t stream_gemm_ws_bytes(int sms);

// The MLP's gate_up and SwiGLU in one launch of the warp-specialised form (sm_90a only; the caller
// checks the device and stream_gemm_fits): w is gate_up [2I, K] (gate rows, then up rows), and
// out[m, j] = bf16(silu(g) · u) for j < I, with g = bf16(a[m] · w[j]) and u = bf16(a[m] · w[I + j]) (the
// reference's bf16 rounding of gate_up), out bf16 with row stride ldo: the down projection's operand.
// The sums of a shared tile are added in a fixed order, as in the ws form. False (nothing launched)
// without the scratch it needs or a tensor-map entry point.
// The warp-specialised form alone (sm_90a; 1 ≤ M ≤ kStreamGemmMaxRows; stream_gemm_fits): the
// contract of stream_gemm, and false (nothing launched) where it cannot run (its scratch, registers, a
// tensor-map entry point) instead of another form.
bool stream_gemm_ws(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                    const float* bias, bool accumulate, float* out, int64_t ldo, int sms,
                    const StreamGemmScratch& scratch, cudaStream_t s);

bool stream_gemm_swiglu(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t I, void* out,
                        int64_t ldo, int sms, const StreamGemmScratch& scratch, cudaStream_t s);

// The MLP's two GEMMs in one launch of the warp-specialised form (sm_90a; VV_CUDA_STREAM_WS_MLP=1):
// stream_gemm_swiglu(a, M, K, w1, ldw1, I, h, I, …) and then out += h · w2ᵀ (w2: down [K, I], out f32
// [M, K] with row stride ldo), with the bits of those two launches one after the other (each GEMM keeps
// its own split of the units over the grid). Down's first weight stages load while gate_up finishes;
// its rows of h wait for a grid-wide count of gate_up's finished tiles, so every block of the grid
// (at most one an SM) must be resident at once. False (nothing launched) where it cannot run: clusters
// other than one, row-invariant scratch, too little scratch, the registers, a tensor-map entry point.
bool stream_gemm_mlp(const void* a, int64_t M, int64_t K, const void* w1, int64_t ldw1, int64_t I, void* h,
                     const void* w2, int64_t ldw2, float* out, int64_t ldo, int sms,
                     const StreamGemmScratch& scratch, cudaStream_t s);

// out[m, n] = (accumulate ? out[m, n] : 0) + Σ_k a[m, k] · w[n, k] + bias[n]; bias may be null.
// `sms`: the device's SM count. `scratch`: as above (the one-barrier Hopper form uses its counts as
// per-tile flags instead of zeroing `out` when it does not accumulate). Returns the form that ran
// (kMma when a Hopper form was asked for but the driver has no tensor-map entry point; kWgmma when
// kWarpSpec was asked for without the scratch it needs, or compiled to other than 168 registers).
StreamGemmKind stream_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                           const float* bias, bool accumulate, float* out, int64_t ldo, int sms,
                           StreamGemmKind kind, const StreamGemmScratch& scratch, cudaStream_t s);

}  // namespace vv::cuda
