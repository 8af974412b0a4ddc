// Device pieces shared by the decode kernels of decode_ops.cu and the decode chain (decode_chain.cu):
// the warp sums, SiLU, weight unpacking, the RMSNorm's inverse, the arithmetic of the bulk one-row GEMV
// (its activation load with the norm or SwiGLU prologue, and one tile's row sums), rope_kv_write's item
// and the SIMT decode attention's block. Each kernel that takes them computes the same values in the
// same order, so their outputs agree bitwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vv::cuda::dec {

// An activation load: `kCg` goes to L2 (ld.global.cg), so that a kernel reading values that other
// blocks of the same grid wrote (the chain, after its grid barrier) never sees a stale L1 line.
template <bool kCg>
__device__ __forceinline__ float ld_act(const float* p) {
  if constexpr (kCg) {
    return __ldcg(p);
  } else {
    return *p;
  }
}
template <bool kCg>
__device__ __forceinline__ float4 ld_act4(const float* p) {
  if constexpr (kCg) {
    return __ldcg(reinterpret_cast<const float4*>(p));
  } else {
    return *reinterpret_cast<const float4*>(p);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

// Eight weights of a chunk as f32 (V = 1 uint4 for 16-bit types, 2 for f32).
__device__ __forceinline__ void unpack8(const uint4* u, __nv_bfloat16*, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4* u, __half*, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4* u, float*, float* f) {
  f[0] = __uint_as_float(u[0].x), f[1] = __uint_as_float(u[0].y), f[2] = __uint_as_float(u[0].z);
  f[3] = __uint_as_float(u[0].w), f[4] = __uint_as_float(u[1].x), f[5] = __uint_as_float(u[1].y);
  f[6] = __uint_as_float(u[1].z), f[7] = __uint_as_float(u[1].w);
}

// 1/sqrt(mean(x²) + eps) with the sums of cuda::rms_norm: its one-warp kernel (C ≤ 1024: lanes over
// c ≡ lane mod 32) or its 512-thread kernel (thread t over c ≡ t mod 512, warp sums, then the 16
// warp sums in a second warp tree). 256 threads play the 512: thread t also takes t + 256.
template <bool kCg = false>
__device__ float rms_inv(const float* __restrict__ x, int64_t C, float eps, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float ss = 0.f;
  if (C <= 1024) {
    for (int64_t c = lane; c < C; c += 32) {
      const float v = ld_act<kCg>(x + c);
      ss = fmaf(v, v, ss);
    }
    ss = warp_sum(ss);
  } else {
    float s0 = 0.f, s1 = 0.f;
    for (int64_t c = threadIdx.x; c < C; c += 512) {
      const float v = ld_act<kCg>(x + c);
      s0 = fmaf(v, v, s0);
    }
    for (int64_t c = threadIdx.x + 256; c < C; c += 512) {
      const float v = ld_act<kCg>(x + c);
      s1 = fmaf(v, v, s1);
    }
    s0 = warp_sum(s0);
    s1 = warp_sum(s1);
    if (lane == 0) {
      red[warp] = s0;
      red[warp + 8] = s1;
    }
    __syncthreads();
    ss = warp_sum(lane < 16 ? red[lane] : 0.f);
  }
  return 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
}

// ---- The bulk one-row GEMV's arithmetic (VV_CUDA_GEMV_BULK; the chain) -----------------------------
inline constexpr int kBulkThreads = 256;
inline constexpr int kBulkMaxRows = 8;     // weight rows a stage
inline constexpr int kBulkMaxXc = 12;      // activation chunks a thread: K <= 256 * 8 * 12 = 24,576
inline constexpr int kBulkFusedMaxXc = 4;  // with the norm prologue or the SwiGLU pairing: K <= 8,192
// dispatch_bulk_xc (decode_ops.cu) and chain_form (decode_chain.cu) instantiate the norm and pairing
// forms for 1, 2 and 4 chunks a thread only: a larger bound would reach no kernel there.
static_assert(kBulkFusedMaxXc <= 4, "the norm and pairing forms exist up to 4 chunks a thread");
inline constexpr int kBulkMaxStages = 16;

// Job rows (row pairs with kPair) a tile for XC chunks a thread: a stage holds about 16,384 weights.
__host__ __device__ constexpr int bulk_tile_rows(int xc, bool pair) {
  return xc >= kBulkMaxRows ? 1
         : pair             ? (kBulkMaxRows / xc > 1 ? kBulkMaxRows / xc / 2 : 1)
                            : kBulkMaxRows / xc;
}

// Activation chunks a thread for K: 1, 2, 4, 8 or 12 (the bulk kernels' instantiations).
__host__ __device__ constexpr int bulk_xc(int64_t K) {
  const int64_t xc = (K / 8 + kBulkThreads - 1) / kBulkThreads;
  return xc <= 1 ? 1 : xc <= 2 ? 2 : xc <= 4 ? 4 : xc <= 8 ? 8 : 12;
}

// Thread t's activation chunks t, t + 256, ... (8 floats each; zero past K): x, or with kNorm
// (x · inv) · norm_w rounded as the other GEMV rounds it, or with kSilu silu_mul's arithmetic on the
// gate and up halves of swiglu_in, whose result the blocks also write to swiglu_act between them
// (chunk c by block c mod grid).
template <int XC, bool kNorm, bool kSilu, bool kCg>
__device__ __forceinline__ void bulk_load_act(const DecodeGemv& g, float inv, float (&xr)[XC][8]) {
  const int tid = threadIdx.x;
  const int64_t K = g.K, nchunk = K >> 3;
#pragma unroll
  for (int i = 0; i < XC; ++i) {
    const int64_t c = tid + static_cast<int64_t>(i) * kBulkThreads;
    if (c < nchunk) {
      if constexpr (kSilu) {
        const float4 g0 = ld_act4<kCg>(g.swiglu_in + c * 8), g1 = ld_act4<kCg>(g.swiglu_in + c * 8 + 4);
        const float4 u0 = ld_act4<kCg>(g.swiglu_in + K + c * 8),
                     u1 = ld_act4<kCg>(g.swiglu_in + K + c * 8 + 4);
        const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        const float uv[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) xr[i][e] = silu(gv[e]) * uv[e];
        if (c % static_cast<int64_t>(gridDim.x) == static_cast<int64_t>(blockIdx.x)) {
          float4* ap = reinterpret_cast<float4*>(g.swiglu_act + c * 8);
          ap[0] = make_float4(xr[i][0], xr[i][1], xr[i][2], xr[i][3]);
          ap[1] = make_float4(xr[i][4], xr[i][5], xr[i][6], xr[i][7]);
        }
      } else {
        const float4 a = ld_act4<kCg>(g.x + c * 8), b = ld_act4<kCg>(g.x + c * 8 + 4);
        xr[i][0] = a.x, xr[i][1] = a.y, xr[i][2] = a.z, xr[i][3] = a.w;
        xr[i][4] = b.x, xr[i][5] = b.y, xr[i][6] = b.z, xr[i][7] = b.w;
      }
      if constexpr (kNorm) {
        const float4* gp = reinterpret_cast<const float4*>(g.norm_w + c * 8);
        const float4 g0 = gp[0], g1 = gp[1];
        const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) xr[i][e] = __fmul_rn(__fmul_rn(xr[i][e], inv), gw[e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) xr[i][e] = 0.f;
    }
  }
}

// One tile's partial sums: acc[r] = Σ over thread t's chunks (in chunk order) of w·act for stage row r
// (SR rows of K weights at sw; rows past `rows` of each TR-row half read its last row again and are
// discarded), then each warp's xor tree, the rows interleaved so that their chains overlap.
template <typename WT, int XC, int SR, int TR>
__device__ __forceinline__ void bulk_tile_sums(const WT* sw, int64_t K, int rows, const float (&xr)[XC][8],
                                               float (&acc)[SR]) {
  const int tid = threadIdx.x;
  const int64_t nchunk = K >> 3;
#pragma unroll
  for (int r = 0; r < SR; ++r) acc[r] = 0.f;
#pragma unroll
  for (int c8 = 0; c8 < XC; ++c8) {
    const int64_t c = tid + static_cast<int64_t>(c8) * kBulkThreads;
    if (c < nchunk) {
      float wf[SR][8];
#pragma unroll
      for (int r = 0; r < SR; ++r) {
        const int rr = r % TR < rows ? r : r - r % TR + rows - 1;
        const uint4 u = *reinterpret_cast<const uint4*>(sw + rr * K + c * 8);
        unpack8(&u, static_cast<WT*>(nullptr), wf[r]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
#pragma unroll
        for (int r = 0; r < SR; ++r) acc[r] = fmaf(xr[c8][e], wf[r][e], acc[r]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)  // warp_sum's tree, the rows interleaved
#pragma unroll
    for (int r = 0; r < SR; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
}

// Row r's total from the 8 warps' sums in rb ([warp][kBulkMaxRows]), in warp order.
__device__ __forceinline__ float bulk_row_total(const float* rb, int r) {
  float v = 0.f;
#pragma unroll
  for (int q = 0; q < 8; ++q) v += rb[q * kBulkMaxRows + r];
  return v;
}

// Lane 0 of each warp leaves the warp's SR row sums in rb ([warp][kBulkMaxRows]).
template <int SR>
__device__ __forceinline__ void bulk_store_sums(float* rb, const float (&acc)[SR]) {
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < SR; ++r) rb[(threadIdx.x >> 5) * kBulkMaxRows + r] = acc[r];
  }
}

// Row n0 + r of job J, its total the r-th row of rb: bias, then the residual add or the store; with
// kPair row r + TR of rb is up row n0 + r, and the SwiGLU epilogue writes silu(gate) · up to silu_out.
// kCg: the residual is read through L2 (other blocks of the grid may have written its line).
template <bool kPair, bool kCg>
__device__ __forceinline__ void bulk_finish_row(const DecodeGemvJob& J, float* silu_out, int64_t n0,
                                                const float* rb, int r, int TR) {
  const int64_t n = n0 + r;
  float v = bulk_row_total(rb, r);
  if constexpr (kPair) {
    const float u = bulk_row_total(rb, TR + r);
    const int64_t I = J.N / 2;
    const float gv = v + (J.bias ? J.bias[n] : 0.f);
    const float uv = u + (J.bias ? J.bias[n + I] : 0.f);
    J.out[n] = gv;
    J.out[n + I] = uv;
    silu_out[n] = silu(gv) * uv;
  } else {
    v += J.bias ? J.bias[n] : 0.f;
    if (J.ep == static_cast<int>(Epilogue::kAddResidual)) {
      J.out[n] = ld_act<kCg>(J.out + n) + v;
    } else {
      J.out[n] = v;
    }
  }
}

// rope_kv_write's item i (< R · (qh + kh) · D/2): (row, head, frequency) over the q heads then the k
// heads; a k item also writes its two rotated k values and the two v values at the same columns into
// the paged cache.
template <typename CT, bool kCg>
__device__ __forceinline__ void rope_kv_item(const RopeKvArgs& a, int64_t i) {
  const int half = a.D / 2;
  const int64_t per_row = static_cast<int64_t>(a.qh + a.kh) * half;
  const int64_t r = i / per_row;
  const int rem = static_cast<int>(i - r * per_row);
  const int h = rem / half, f = rem % half;
  const float phi = static_cast<float>(a.pos[r]) * a.inv_freq[f];
  const float c = cosf(phi), s = sinf(phi);
  if (h < a.qh) {
    float* x = a.q + r * a.ldq + static_cast<int64_t>(h) * a.D;
    float y1, y2;
    rope_rotate(ld_act<kCg>(x + f), ld_act<kCg>(x + f + half), c, s, y1, y2);
    x[f] = y1;
    x[f + half] = y2;
    return;
  }
  const int hk = h - a.qh;
  float* x = a.k + r * a.ldk + static_cast<int64_t>(hk) * a.D;
  float y1, y2;
  rope_rotate(ld_act<kCg>(x + f), ld_act<kCg>(x + f + half), c, s, y1, y2);
  x[f] = y1;
  x[f + half] = y2;
  const int32_t p = a.pos[r];
  const PagedKv& kv = a.kv;
  const int64_t slot =
      static_cast<int64_t>(kv.tables[kv.row_seq[r] * kv.ldt + p / kv.bs]) * kv.bs + p % kv.bs;
  const int64_t col = static_cast<int64_t>(hk) * a.D + f;
  CT* kc = static_cast<CT*>(kv.kc);
  CT* vc = static_cast<CT*>(kv.vc);
  kc[slot * kv.ldc + col] = from_f32<CT>(y1);
  kc[slot * kv.ldc + col + half] = from_f32<CT>(y2);
  const float* vr = a.v + r * a.ldv + col;
  vc[slot * kv.ldc + col] = from_f32<CT>(ld_act<kCg>(vr));
  vc[slot * kv.ldc + col + half] = from_f32<CT>(ld_act<kCg>(vr + half));
}

// DecodeRope's cache write: threads first, first + stride, ... (within one warp or one block) rotate row
// r's new k of kv head kvh at position p (in place in rp.k) and write it and v into the cache slot of p,
// with rope_kv_item's arithmetic. tab: the row's block table.
// With `cs` (DecodeRope::trig_pre): the cosine and sine of frequency `first` came with the call (taken
// before the PDL wait), `slot` is p's cache slot, and the values as the cache holds them also go to fwd[f]
// (k) and fwd[D + f] (v) in shared memory, for the block's own scores.
template <typename CT>
__device__ __forceinline__ void rope_kv_row(const DecodeRope& rp, int64_t r, int kvh, int p,
                                            const int32_t* tab, int bs, int64_t ldc, int D, int first,
                                            int stride, bool cs = false, float c0 = 0.f, float s0 = 0.f,
                                            int64_t slot = 0, float* fwd = nullptr) {
  const int half = D / 2;
  float* kr = rp.k + r * rp.ldk + static_cast<int64_t>(kvh) * D;
  const float* vr = rp.v + r * rp.ldv + static_cast<int64_t>(kvh) * D;
  const int64_t off =
      (cs ? slot : static_cast<int64_t>(tab[p / bs]) * bs + p % bs) * ldc + static_cast<int64_t>(kvh) * D;
  CT* kc = static_cast<CT*>(rp.kc) + off;
  CT* vc = static_cast<CT*>(rp.vc) + off;
  for (int f = first; f < half; f += stride) {
    float c, s;
    if (cs && f == first) {
      c = c0, s = s0;
    } else {
      const float phi = static_cast<float>(p) * rp.inv_freq[f];
      c = cosf(phi), s = sinf(phi);
    }
    float y1, y2;
    rope_rotate(kr[f], kr[f + half], c, s, y1, y2);
    kr[f] = y1;
    kr[f + half] = y2;
    const CT k1 = from_f32<CT>(y1), k2 = from_f32<CT>(y2);
    const CT v1 = from_f32<CT>(vr[f]), v2 = from_f32<CT>(vr[f + half]);
    kc[f] = k1;
    kc[f + half] = k2;
    vc[f] = v1;
    vc[f + half] = v2;
    if (fwd) {
      fwd[f] = to_f32(k1);
      fwd[f + half] = to_f32(k2);
      fwd[D + f] = to_f32(v1);
      fwd[D + f + half] = to_f32(v2);
    }
  }
}

// ---- The SIMT decode attention's block (decode_attn_kernel; the chain's attention phase) ----------
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Four consecutive cache values as f32 (d0 + 4 <= D, D % 4 == 0: one 8- or 16-byte load).
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float* f) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}
__device__ __forceinline__ void load4(const __half* p, float* f) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}
__device__ __forceinline__ void load4(const float* p, float* f) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
}

// load4 through L2 only (kCg) or as it is.
template <bool kCg, typename CT>
__device__ __forceinline__ void load4c(const CT* p, float* f) {
  if constexpr (!kCg) {
    load4(p, f);
  } else if constexpr (sizeof(CT) == 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(p));
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  } else {
    const uint2 u = __ldcg(reinterpret_cast<const uint2*>(p));
    load4(reinterpret_cast<const CT*>(&u), f);
  }
}

constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnMaxHeadDim = 4 * 32;  // decode_attn_block: four dims a lane of one warp
constexpr int kAttnMaxG = 8;
constexpr int kAttnKeysPerWarp = 8;  // a warp's keys per round: their loads are in flight together
constexpr int kAttnRound = kAttnWarps * kAttnKeysPerWarp;

// Decode attention: block (key split s, kv head, row r) takes the split's keys in rounds of 64: warp w
// loads the K slices of its 8 keys (lanes over 4-dim slices) and scores them for the G query heads
// of the kv head (warp sums); after the split's softmax, the same warp accumulates p·V of its keys
// and the warps' sums are added in warp order. With one split it writes the output; otherwise it
// leaves (acc, max, sum) in ws and the last block of (r, kv head) to finish (a counter per pair,
// reset by that block) merges the splits in split order, so the result does not depend on which
// block finishes last.
// Block (key split `split`, kv head kvh, row r) of the decode attention (decode_attn_kernel's body; the
// chain's attention phase runs it too). sm: a.smem bytes of shared memory; mls and last: the block's
// shared scalars. kCg: q and the cache are read through L2 only (they may have been written by other
// blocks of the same grid, or by this one). kRope: A.rope's rotation of q as it is loaded, and the split
// holding key L − 1 writes that key's k and v first (with kCg: the barrier after orders those stores
// before every load of the cache in the block).
// kPre (with kRope; the caller has not waited for the kernel before): the block's reads of what that
// kernel cannot have written — the row's position and sequence, its block table, the K and V rows of its
// first round but for the new key L − 1 (written by this launch) — go before the PDL wait (pdl_wait and
// pdl_trigger are called here). The same values, so the same bits.
// kStamp (with kPre): thread 0 stamps the block's stages (DecodeRope's stamp sink; AttnStamp says which).
template <bool kOn>
struct AttnStageClock {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void merge_mark(int) {}
  __device__ __forceinline__ void finish(const DecodeRope&, int, int, bool) {}
};
template <>
struct AttnStageClock<true> {
  long long c0 = 0;
  unsigned long long g0 = 0;
  uint32_t clk[8] = {};
  uint32_t mclk[3] = {};
  __device__ __forceinline__ static unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ __forceinline__ void start() {
    if (threadIdx.x == 0) {
      c0 = clock64();
      g0 = global_ns();
    }
  }
  __device__ __forceinline__ void mark(int i) {
    if (threadIdx.x == 0) clk[i] = static_cast<uint32_t>(clock64() - c0);
  }
  __device__ __forceinline__ void merge_mark(int i) {
    if (threadIdx.x == 0) mclk[i] = static_cast<uint32_t>(clock64() - c0);
  }
  __device__ __forceinline__ void finish(const DecodeRope& rp, int split, int kvh, bool merged) {
    if (threadIdx.x != 0 || !rp.stamp_recs) return;
    clk[7] = static_cast<uint32_t>(clock64() - c0);
    const unsigned long long g1 = global_ns();
    AttnStamp& o = rp.stamp_recs[atomicAdd(rp.stamp_count, 1u) % rp.stamp_cap];
    o.gt_start = g0;
    o.gt_end = g1;
#pragma unroll
    for (int i = 0; i < 8; ++i) o.clk[i] = clk[i];
#pragma unroll
    for (int i = 0; i < 3; ++i) o.mclk[i] = mclk[i];
    o.split = static_cast<uint32_t>(split);
    o.kv_head = static_cast<uint32_t>(kvh);
    o.merged = merged ? 1u : 0u;
  }
};

// One step of the scores' transposing butterfly (kXpose): 2·kKeep values a lane to kKeep, at xor distance
// kDist; a lane keeps the upper half where its bit of that distance is set and adds its partner's copies
// of them to its own (own value first, as warp_sum).
template <int kKeep, int kDist, int N>
__device__ __forceinline__ void xpose_stage(float (&x)[N], int lane) {
  static_assert(2 * kKeep <= N, "the values of the step");
  const bool up = (lane & kDist) != 0;
#pragma unroll
  for (int i = 0; i < kKeep; ++i)
    x[i] = (up ? x[i + kKeep] : x[i]) + __shfl_xor_sync(0xffffffffu, up ? x[i] : x[i + kKeep], kDist);
}

// A hint: the `bytes` at p (16-byte aligned; the rest below 16 left out) to L2 (sm_90: one bulk prefetch;
// before it, nothing).
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bytes &= ~15u;
  if (bytes != 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// kXpose (with kPre; VV_CUDA_ATTN_XPOSE=1): the scores summed over the lanes by a transposing butterfly, and
// the merging block's split maxima and sums loaded in one trip.
// kEarly (with kXpose; the default, VV_CUDA_ATTN_MERGE_EARLY=0: off): the merging block issues its loads of
// the first 32 splits' maxima and sums and then of the first kAttnEarlySplits splits' partials (a thread's
// four consecutive outputs of a split in one 16-byte load), before the split weights are known, so a merge of
// up to that many splits makes one trip to L2 where the wide merge makes one for the weights and one for
// every 8 splits. Each output's sum in split order from zero, as the other merges: the same bits.
inline constexpr int kAttnEarlySplits = 24;  // 96 registers: no spill under the cap of 160 (32: spills)
// kPipe (with kXpose, a 16-bit cache; VV_CUDA_ATTN_PIPE=1): a split of several rounds issues the next
// round's K loads (raw, 8 bytes a key and lane) before it scores the round it holds, and the next round's V
// loads before it accumulates P·V of the one it holds, so a round no longer waits on memory after the one
// before it (the one-wave plan's splits past 2,112 keys on 132 SMs). The same values: the same bits.
template <typename CT, bool kCg, bool kRope = false, bool kPre = false, bool kStamp = false,
          bool kXpose = false, bool kEarly = false, bool kPipe = false>
__device__ __forceinline__ void decode_attn_block(const DecodeAttnArgs& A, int split, int kvh, int64_t r,
                                                  float* sm, float (&mls)[2][kAttnMaxG], int& last) {
  static_assert(!kPre || kRope, "the early loads are the fused step's");
  static_assert(!kStamp || kPre, "the stamps are the fused step's");
  static_assert(!kXpose || kPre, "the butterfly is the fused step's");
  static_assert(!kEarly || kXpose, "the early merge loads are the butterfly kernel's");
  static_assert(!kPipe || (kXpose && kCg && sizeof(CT) == 2),
                "the pipelined rounds: the butterfly's, 16-bit");
  AttnStageClock<kStamp> clk;
  clk.start();
  const float* __restrict__ q = A.q;
  const int64_t ldq = A.ldq;
  const int32_t* __restrict__ row_seq = A.kv.row_seq;
  const int32_t* __restrict__ row_pos = A.row_pos;
  const int32_t* __restrict__ tables = A.kv.tables;
  const int64_t ldt = A.kv.ldt, ldc = A.kv.ldc, n = A.n, ldo = A.ldo;
  const int bs = A.kv.bs, heads = A.heads, kv_heads = A.kv_heads, D = A.D, chunk = A.chunk,
            pstride = A.pstride;
  const CT* __restrict__ kc = static_cast<const CT*>(A.kv.kc);
  const CT* __restrict__ vc = static_cast<const CT*>(A.kv.vc);
  const float scale = A.scale;
  float* __restrict__ out = A.out;
  float* ws = A.ws;
  unsigned* counters = A.counters;
  const bool lean = A.lean;
  const int nsplit = A.splits;
  const int G = heads / kv_heads;
  float* Qs = sm;                                                 // [G][D]
  float* red = Qs + G * D;                                        // [warps][G][D]
  float* Ps = red + kAttnWarps * G * D;                           // [G][pstride]
  int64_t* slots = reinterpret_cast<int64_t*>(Ps + G * pstride);  // [chunk]; the offset is even
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t seq = row_seq[r];
  const int L = row_pos[r] + 1;
  const int k0 = split * chunk;
  const int nk = max(min(L, k0 + chunk) - k0, 0);
  // The splits holding keys (the table's width may reach past the row's length): the others leave at
  // once and take no part in the merge.
  const int nse = lean ? min(nsplit, (L + chunk - 1) / chunk) : nsplit;
  if (lean && nk == 0) return;
  const float* qr = q + r * ldq + static_cast<int64_t>(kvh) * G * D;
  const int d0 = lane * 4;
  const bool dl = d0 < D;
  const int64_t hoff = static_cast<int64_t>(kvh) * D + d0;
  // The V rows of the warp's first round, loaded with its K rows (lean: one trip to memory fewer when a
  // split is one round, as up to 16,384 keys of table width) or before the wait (kPre, with the K rows).
  float vpre[kAttnKeysPerWarp][4], kpre[kAttnKeysPerWarp][4];
  // DecodeRope::trig_pre: thread tid's cosine and sine of frequency tid % (D/2), which is the frequency of
  // every rotation it makes below when D/2 divides the block (q's items tid + 256·k, the new key's tid).
  const bool trig = kPre && A.rope.trig_pre && kAttnThreads % (D / 2) == 0;
  float tc = 0.f, ts = 0.f;
  __shared__ float
      fwd[kPre ? 2 * kAttnMaxHeadDim : 1];  // trig: the new key's k and v as the cache holds them
  if constexpr (kPre) {
    if (trig) {
      const float phi = static_cast<float>(L - 1) * A.rope.inv_freq[tid % (D / 2)];
      tc = cosf(phi);
      ts = sinf(phi);
    }
    for (int j = tid; j < nk; j += kAttnThreads) {
      const int p = k0 + j;
      slots[j] = static_cast<int64_t>(tables[seq * ldt + p / bs]) * bs + p % bs;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kAttnKeysPerWarp; ++u) {
      const int j = warp * kAttnKeysPerWarp + u;
#pragma unroll
      for (int e = 0; e < 4; ++e) kpre[u][e] = vpre[u][e] = 0.f;
      if (dl && j < nk && k0 + j != L - 1) {
        load4c<kCg>(kc + slots[j] * ldc + hoff, kpre[u]);
        load4c<kCg>(vc + slots[j] * ldc + hoff, vpre[u]);
      }
    }
    // DecodeRope::kv_prefetch: the K and V rows of the split's later rounds to L2 (a hint; the same loads
    // below read them), one bulk prefetch a row, so that a round no longer waits on memory after the one
    // before it. The new key's rows too: this block writes them in L2 before it reads them. (The butterfly
    // kernel's only: the kernel of VV_CUDA_ATTN_XPOSE=0 stays as measured.) 1: before the PDL wait, 2:
    // after it.
    auto kv_to_l2 = [&] {
      const int64_t koff = static_cast<int64_t>(kvh) * D;
      const unsigned row_bytes = static_cast<unsigned>(D * sizeof(CT));
      for (int i = tid; i < 2 * (nk - kAttnRound); i += kAttnThreads) {
        const int j = kAttnRound + (i >> 1);
        prefetch_l2(((i & 1) ? vc : kc) + slots[j] * ldc + koff, row_bytes);
      }
    };
    if (kXpose && A.rope.kv_prefetch == 1) kv_to_l2();
    clk.mark(0);
    pdl_wait();  // q, the new k and v are the kernel before's
    pdl_trigger();
    if (kXpose && A.rope.kv_prefetch == 2) kv_to_l2();
    clk.mark(1);
  }
  if constexpr (kRope) {
    static_assert(kCg, "the fused cache write needs the cache read through L2");
    const int half = D / 2;
    const float pf = static_cast<float>(L - 1);
    for (int i = tid; i < G * half; i += kAttnThreads) {
      const int g = i / half, f = i - g * half;
      float c = tc, sn = ts;
      if (!trig) {
        const float phi = pf * A.rope.inv_freq[f];
        c = cosf(phi);
        sn = sinf(phi);
      }
      float y1, y2;
      rope_rotate(ld_act<kCg>(qr + g * D + f), ld_act<kCg>(qr + g * D + f + half), c, sn, y1, y2);
      Qs[g * D + f] = y1;
      Qs[g * D + f + half] = y2;
    }
    if (nk > 0 && k0 + nk == L) {
      if (trig) {  // (kPre: slots[] holds the split's slots)
        rope_kv_row<CT>(A.rope, r, kvh, L - 1, nullptr, bs, ldc, D, tid, kAttnThreads, true, tc, ts,
                        slots[nk - 1], fwd);
      } else {
        rope_kv_row<CT>(A.rope, r, kvh, L - 1, tables + seq * ldt, bs, ldc, D, tid, kAttnThreads);
      }
    }
  } else {
    for (int i = tid; i < G * D; i += kAttnThreads) Qs[i] = ld_act<kCg>(qr + i);
  }
  if constexpr (!kPre) {
    for (int j = tid; j < nk; j += kAttnThreads) {
      const int p = k0 + j;
      slots[j] = static_cast<int64_t>(tables[seq * ldt + p / bs]) * bs + p % bs;
    }
  }
  __syncthreads();
  clk.mark(2);
  float qv[kAttnMaxG][4];
#pragma unroll
  for (int g = 0; g < kAttnMaxG; ++g)
#pragma unroll
    for (int e = 0; e < 4; ++e) qv[g][e] = g < G && dl ? Qs[g * D + d0 + e] : 0.f;
  if constexpr (kPre) {
    // The new key's rows, written by this block before the barrier above.
#pragma unroll
    for (int u = 0; u < kAttnKeysPerWarp; ++u) {
      const int j = warp * kAttnKeysPerWarp + u;
      if (dl && j < nk && k0 + j == L - 1) {
        if (trig) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            kpre[u][e] = fwd[d0 + e];
            vpre[u][e] = fwd[D + d0 + e];
          }
        } else {
          load4c<kCg>(kc + slots[j] * ldc + hoff, kpre[u]);
          load4c<kCg>(vc + slots[j] * ldc + hoff, vpre[u]);
        }
      }
    }
  } else {
#pragma unroll
    for (int u = 0; u < kAttnKeysPerWarp; ++u) {
      const int j = warp * kAttnKeysPerWarp + u;
      vpre[u][0] = vpre[u][1] = vpre[u][2] = vpre[u][3] = 0.f;
      if (lean && dl && j < nk) load4c<kCg>(vc + slots[j] * ldc + hoff, vpre[u]);
    }
  }
  // kPipe: the next round's raw K (and below V) slices of this lane, loaded a round ahead.
  uint2 knext[kPipe ? kAttnKeysPerWarp : 1];
  auto load_raw = [&](const CT* __restrict__ c, int j, uint2(&raw)[kPipe ? kAttnKeysPerWarp : 1]) {
#pragma unroll
    for (int u = 0; u < (kPipe ? kAttnKeysPerWarp : 1); ++u)
      raw[u] = dl && j + u < nk ? __ldcg(reinterpret_cast<const uint2*>(c + slots[j + u] * ldc + hoff))
                                : make_uint2(0u, 0u);
  };
  // kPipe: round j0's slices from the raw ones loaded a round ahead, then the next round's loads.
  auto take_raw = [&](const CT* __restrict__ c, int j0, uint2(&raw)[kPipe ? kAttnKeysPerWarp : 1],
                      float(&f)[kAttnKeysPerWarp][4]) {
#pragma unroll
    for (int u = 0; u < (kPipe ? kAttnKeysPerWarp : 0); ++u)
      load4(reinterpret_cast<const CT*>(&raw[u]), f[u]);
    if (j0 + kAttnRound < nk) load_raw(c, j0 + kAttnRound, raw);
  };
  for (int j0 = warp * kAttnKeysPerWarp; j0 < nk; j0 += kAttnRound) {
    float kf[kAttnKeysPerWarp][4];
    if (kPre && j0 == warp * kAttnKeysPerWarp) {
#pragma unroll
      for (int u = 0; u < kAttnKeysPerWarp; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) kf[u][e] = kpre[u][e];
      if constexpr (kPipe) {
        if (j0 + kAttnRound < nk) load_raw(kc, j0 + kAttnRound, knext);
      }
    } else if constexpr (kPipe) {
      take_raw(kc, j0, knext, kf);
    } else {
#pragma unroll
      for (int u = 0; u < kAttnKeysPerWarp; ++u) {
        kf[u][0] = kf[u][1] = kf[u][2] = kf[u][3] = 0.f;
        if (dl && j0 + u < nk) load4c<kCg>(kc + slots[j0 + u] * ldc + hoff, kf[u]);
      }
    }
    if constexpr (kXpose) {
      // The warp's 8 keys × 8 heads of lane partials, summed over the lanes by a transposing butterfly in
      // two halves of 4 keys (k = 8(u − 4h) + g): at each of warp_sum's xor distances a lane keeps half of
      // its values and adds its partner's copies of them, so each score has warp_sum's operands in its
      // order (the same bits), 31 shuffles a half instead of 5 a score. The first distance goes with the
      // products, so at most 16 values live; lane L ends with k = L of each half.
      static_assert(kAttnKeysPerWarp == 8 && kAttnMaxG == 8, "two halves of 32 values");
      const bool up16 = (lane & 16) != 0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const int g = i % 8, ua = 4 * h + i / 8, ub = ua + 2;
          float lo = qv[g][0] * kf[ua][0];
          lo = fmaf(qv[g][1], kf[ua][1], lo);
          lo = fmaf(qv[g][2], kf[ua][2], lo);
          lo = fmaf(qv[g][3], kf[ua][3], lo);
          float hi = qv[g][0] * kf[ub][0];
          hi = fmaf(qv[g][1], kf[ub][1], hi);
          hi = fmaf(qv[g][2], kf[ub][2], hi);
          hi = fmaf(qv[g][3], kf[ub][3], hi);
          x[i] = (up16 ? hi : lo) + __shfl_xor_sync(0xffffffffu, up16 ? lo : hi, 16);
        }
        xpose_stage<8, 8>(x, lane);
        xpose_stage<4, 4>(x, lane);
        xpose_stage<2, 2>(x, lane);
        xpose_stage<1, 1>(x, lane);
        const int u = 4 * h + (lane >> 3), g = lane & 7;
        if (g < G && j0 + u < nk) Ps[g * pstride + j0 + u] = x[0] * scale;
      }
    } else {
#pragma unroll
      for (int u = 0; u < kAttnKeysPerWarp; ++u) {
#pragma unroll
        for (int g = 0; g < kAttnMaxG; ++g) {
          if (g < G) {
            float sc = qv[g][0] * kf[u][0];
            sc = fmaf(qv[g][1], kf[u][1], sc);
            sc = fmaf(qv[g][2], kf[u][2], sc);
            sc = fmaf(qv[g][3], kf[u][3], sc);
            sc = warp_sum(sc);
            if (lane == 0 && j0 + u < nk) Ps[g * pstride + j0 + u] = sc * scale;
          }
        }
      }
    }
  }
  __syncthreads();
  clk.mark(3);
  for (int g = warp; g < G; g += kAttnWarps) {
    float mx = -INFINITY;
    for (int j = lane; j < nk; j += 32) mx = fmaxf(mx, Ps[g * pstride + j]);
    mx = warp_max(mx);
    float l = 0.f;
    for (int j = lane; j < nk; j += 32) {
      const float e = expf(Ps[g * pstride + j] - mx);
      Ps[g * pstride + j] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      mls[0][g] = mx;
      mls[1][g] = l;
    }
  }
  __syncthreads();
  clk.mark(4);
  float acc[kAttnMaxG][4];
#pragma unroll
  for (int g = 0; g < kAttnMaxG; ++g) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.f;
  uint2 vnext[kPipe ? kAttnKeysPerWarp : 1];
  for (int j0 = warp * kAttnKeysPerWarp; j0 < nk; j0 += kAttnRound) {
    float vf[kAttnKeysPerWarp][4];
    if ((lean || kPre) && j0 == warp * kAttnKeysPerWarp) {
#pragma unroll
      for (int u = 0; u < kAttnKeysPerWarp; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) vf[u][e] = vpre[u][e];
      if constexpr (kPipe) {
        if (j0 + kAttnRound < nk) load_raw(vc, j0 + kAttnRound, vnext);
      }
    } else if constexpr (kPipe) {
      take_raw(vc, j0, vnext, vf);
    } else {
#pragma unroll
      for (int u = 0; u < kAttnKeysPerWarp; ++u) {
        vf[u][0] = vf[u][1] = vf[u][2] = vf[u][3] = 0.f;
        if (dl && j0 + u < nk) load4c<kCg>(vc + slots[j0 + u] * ldc + hoff, vf[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kAttnKeysPerWarp; ++u) {
      if (j0 + u >= nk) break;
#pragma unroll
      for (int g = 0; g < kAttnMaxG; ++g) {
        if (g < G) {
          const float p = Ps[g * pstride + j0 + u];
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[g][e] = fmaf(p, vf[u][e], acc[g][e]);
        }
      }
    }
  }
  if (dl) {
#pragma unroll
    for (int g = 0; g < kAttnMaxG; ++g)
      if (g < G)
        *reinterpret_cast<float4*>(red + (warp * G + g) * D + d0) =
            make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
  }
  __syncthreads();
  clk.mark(5);
  float* orow = out + r * ldo + static_cast<int64_t>(kvh) * G * D;
  const int64_t pair = r * kv_heads + kvh;
  float* wacc = ws + (pair * nsplit + split) * G * D;
  for (int i = tid; i < G * D; i += kAttnThreads) {
    float a = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) a += red[w * G * D + i];
    if (nse == 1) {
      orow[i] = a / mls[1][i / D];
    } else {
      wacc[i] = a;
    }
  }
  if (nse == 1) {
    clk.mark(6);
    clk.finish(A.rope, split, kvh, false);
    return;
  }
  float* wml = ws + n * kv_heads * nsplit * G * D + (pair * nsplit + split) * G * 2;
  if (tid < G) {
    wml[tid * 2] = mls[0][tid];
    wml[tid * 2 + 1] = mls[1][tid];
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(&counters[pair], 1u) == static_cast<unsigned>(nse - 1);
  __syncthreads();
  clk.mark(6);
  if (!last) {
    clk.finish(A.rope, split, kvh, false);
    return;
  }
  __threadfence();
  if (tid == 0) counters[pair] = 0;  // ready for the next launch
  clk.merge_mark(0);
  const float* pacc = ws + pair * nsplit * G * D;
  const float* pml = ws + n * kv_heads * nsplit * G * D + pair * nsplit * G * 2;
  // kEarly: thread t < G·D/4 takes outputs 4t..4t+3 (one head's: D % 4 == 0); split s's are the float4
  // s·G·D/4 + t of the pair's partials (G·D·4 bytes a split: 16-byte aligned).
  const int gd4 = G * D / 4;
  const bool e_has = tid < gd4;
  const float4* e_p = reinterpret_cast<const float4*>(pacc) + tid;
  // Warp g < G (one head a warp: G <= 8) loads its head's (max, sum) of split `lane` first, then every
  // thread its partials, so the split weights do not wait behind the partials (session 28, call 3: 5.4 µs
  // with the partials' loads first); splits past 32 (over 2,048 keys of 64-key splits) one trip each after.
  float4 e_x[kEarly ? kAttnEarlySplits : 1];
  if constexpr (kEarly) {
    static_assert(kAttnMaxG <= kAttnWarps, "one head a warp");
    const int g = warp;
    float2 m0 = make_float2(-INFINITY, 0.f);
    if (g < G && lane < nse) m0 = __ldcg(reinterpret_cast<const float2*>(pml + (lane * G + g) * 2));
#pragma unroll
    for (int u = 0; u < kAttnEarlySplits; ++u)
      e_x[u] =
          e_has && u < nse ? __ldcg(e_p + static_cast<int64_t>(u) * gd4) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (g < G) {  // the xpose loop's operations in its order: split lane, lane + 32, ...
      float mx = -INFINITY;
      float l = 0.f;
      if (lane < nse) mx = fmaxf(mx, m0.x);
      for (int sp = lane + 32; sp < nse; sp += 32) mx = fmaxf(mx, __ldcg(pml + (sp * G + g) * 2));
      mx = warp_max(mx);
      if (lane < nse) {
        const float e = m0.y > 0.f ? expf(m0.x - mx) : 0.f;
        Ps[g * pstride + lane] = e;
        l += m0.y * e;
      }
      for (int sp = lane + 32; sp < nse; sp += 32) {
        const float2 v = __ldcg(reinterpret_cast<const float2*>(pml + (sp * G + g) * 2));
        const float e = v.y > 0.f ? expf(v.x - mx) : 0.f;
        Ps[g * pstride + sp] = e;
        l += v.y * e;
      }
      l = warp_sum(l);
      if (lane == 0) mls[1][g] = l;
    }
  }
  // Split weights e^(m_s − M) into Ps (nsplit ≤ pstride), the merged sums into mls.
  for (int g = warp; g < (kEarly ? 0 : G); g += kAttnWarps) {
    float mx = -INFINITY;
    float l = 0.f;
    if constexpr (kXpose) {
      // Each (max, sum) pair of a lane's splits lane + 32t (at most 256 splits: t < 8) in one 8-byte load,
      // all at once: one trip to L2 where the loop below takes two. The same operations in the same order.
      constexpr int kT = 256 / 32;
      float2 ml[kT];
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int sp = lane + 32 * t;
        ml[t] = sp < nse ? __ldcg(reinterpret_cast<const float2*>(pml + (sp * G + g) * 2))
                         : make_float2(-INFINITY, 0.f);
      }
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (lane + 32 * t < nse) mx = fmaxf(mx, ml[t].x);
      mx = warp_max(mx);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int sp = lane + 32 * t;
        if (sp < nse) {
          const float e = ml[t].y > 0.f ? expf(ml[t].x - mx) : 0.f;
          Ps[g * pstride + sp] = e;
          l += ml[t].y * e;
        }
      }
    } else {
      for (int sp = lane; sp < nse; sp += 32) mx = fmaxf(mx, __ldcg(pml + (sp * G + g) * 2));
      mx = warp_max(mx);
      for (int sp = lane; sp < nse; sp += 32) {
        const float ls = __ldcg(pml + (sp * G + g) * 2 + 1);
        const float e = ls > 0.f ? expf(__ldcg(pml + (sp * G + g) * 2) - mx) : 0.f;
        Ps[g * pstride + sp] = e;
        l += ls * e;
      }
    }
    l = warp_sum(l);
    if (lane == 0) mls[1][g] = l;
  }
  __syncthreads();
  clk.merge_mark(1);
  if constexpr (kEarly) {
    const int prow = e_has ? (4 * tid / D) * pstride : 0;  // the head's split weights
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    auto add = [&](const float4& x, int sp) {
      const float w = Ps[prow + sp];
      acc.x = fmaf(x.x, w, acc.x);
      acc.y = fmaf(x.y, w, acc.y);
      acc.z = fmaf(x.z, w, acc.z);
      acc.w = fmaf(x.w, w, acc.w);
    };
#pragma unroll
    for (int u = 0; u < kAttnEarlySplits; ++u)
      if (u < nse) add(e_x[u], u);
    for (int sp0 = kAttnEarlySplits; sp0 < nse; sp0 += kAttnEarlySplits) {  // more splits: a trip each
#pragma unroll
      for (int u = 0; u < kAttnEarlySplits; ++u)
        e_x[u] = e_has && sp0 + u < nse ? __ldcg(e_p + static_cast<int64_t>(sp0 + u) * gd4)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int u = 0; u < kAttnEarlySplits; ++u)
        if (sp0 + u < nse) add(e_x[u], sp0 + u);
    }
    clk.merge_mark(2);
    if (e_has) {
      const float l = mls[1][4 * tid / D];
      float* o = orow + 4 * tid;
      o[0] = acc.x / l;
      o[1] = acc.y / l;
      o[2] = acc.z / l;
      o[3] = acc.w / l;
    }
    clk.finish(A.rope, split, kvh, true);
    return;
  }
  if (!lean && !A.wide_merge) {  // one output at a time, 4 splits' loads in flight
    for (int i = tid; i < G * D; i += kAttnThreads) {
      const int g = i / D;
      float a = 0.f;
#pragma unroll 4
      for (int sp = 0; sp < nse; ++sp)
        a = fmaf(__ldcg(pacc + static_cast<int64_t>(sp) * G * D + i), Ps[g * pstride + sp], a);
      if (i == tid) clk.merge_mark(2);  // the first output's sum
      orow[i] = a / mls[1][g];
    }
    clk.finish(A.rope, split, kvh, true);
    return;
  }
  // Lean (or wide_merge): each thread's outputs (i = tid + 256·o: G·D ≤ 1,024, so up to 4 of them) over
  // kSp splits at a time, their loads in flight together; each output's sum in split order. An output's
  // row of split weights (its head's, (i / D)·pstride) once, not per split (a division by the run-time D
  // each).
  constexpr int kOut = kAttnMaxG * kAttnMaxHeadDim / kAttnThreads;
  constexpr int kSp = 8;
  static_assert(kOut * kAttnThreads >= kAttnMaxG * kAttnMaxHeadDim, "every output has a thread");
  float a[kOut];
  int prow[kOut];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    a[o] = 0.f;
    const int i = tid + o * kAttnThreads;
    prow[o] = i < G * D ? (i / D) * pstride : 0;
  }
  for (int sp0 = 0; sp0 < nse; sp0 += kSp) {
    float x[kSp][kOut];
#pragma unroll
    for (int u = 0; u < kSp; ++u)
#pragma unroll
      for (int o = 0; o < kOut; ++o) {
        const int i = tid + o * kAttnThreads;
        x[u][o] = sp0 + u < nse && i < G * D ? __ldcg(pacc + static_cast<int64_t>(sp0 + u) * G * D + i) : 0.f;
      }
#pragma unroll
    for (int u = 0; u < kSp; ++u) {
      if (sp0 + u < nse) {
#pragma unroll
        for (int o = 0; o < kOut; ++o) {
          const int i = tid + o * kAttnThreads;
          if (i < G * D) a[o] = fmaf(x[u][o], Ps[prow[o] + sp0 + u], a[o]);
        }
      }
    }
  }
  clk.merge_mark(2);
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    const int i = tid + o * kAttnThreads;
    if (i < G * D) orow[i] = a[o] / mls[1][i / D];
  }
  clk.finish(A.rope, split, kvh, true);
}

}  // namespace vv::cuda::dec
