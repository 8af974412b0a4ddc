// Decode-step kernels (see decode_ops.cuh). The GEMV: 8 warps per block, a warp per weight row (two
// rows for the SwiGLU pairing), lanes over 8-weight chunks (16-byte loads, U chunks per lane in
// flight before the first use), f32 activations and accumulation, then a warp shuffle reduction.
// The grid holds as many blocks as fit on the device at once; warps stride over the rows. Each
// row's sum has one fixed order (lane-strided chunks, ascending, then the xor tree), whatever the
// fusion, so fused and unfused launches agree bitwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_bulk.cuh"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

// A 16-byte weight load that skips L1 (weights are read once; L1 keeps the activation row). volatile
// keeps the loads issued before the dependency wait that follows them.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

using dec::rms_inv;
using dec::silu;
using dec::unpack8;
using dec::warp_sum;

constexpr int kGemvThreads = 256;
constexpr bool kGemvRollDefault = true;

// Blocks per SM the GEMV is compiled to fit by default: 4 at one row per warp without the norm
// prologue, else 3 (kMinBlocks > 0 overrides it).
constexpr int gemv_default_blocks(int R, bool norm) {
  return R == 1 && !norm ? 4 : 3;
}

// kBal (VV_CUDA_GEMV_BALANCE): g.tpb tasks a block instead of one a warp, the block's other warps idle
// (with the norm prologue they take part in it first), so that a launch of one round spreads its rows
// evenly over the SMs.
// kPair (R = 2, DecodeGemv::pair_rows): rows n and N/2 + n of a job without the SwiGLU epilogue, each stored
// (with its bias, or added to with the residual epilogue) as the one-row form stores it.
template <typename WT, int R, bool kNorm, int U, bool kRoll, int kMinBlocks = 0, bool kBal = false,
          bool kPair = false>
__global__ void __launch_bounds__(kGemvThreads, kMinBlocks > 0 ? kMinBlocks : gemv_default_blocks(R, kNorm))
    decode_gemv_kernel(const DecodeGemv g, int64_t tasks) {
  static_assert(!kPair || R == 2, "pairs are two rows a warp");
  constexpr int V = sizeof(WT) == 4 ? 2 : 1;
  __shared__ float red[16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t nchunk = g.K >> 3;
  const int64_t wpb = kBal ? static_cast<int64_t>(g.tpb) : (kGemvThreads / 32);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * wpb;
  int64_t t = kBal && warp >= g.tpb ? tasks : static_cast<int64_t>(blockIdx.x) * wpb + warp;
  uint4 wv[R][U][V];  // slot u: the lane's chunk u of the current batch
  // Row pointers of a task: job jx, row n (and I + n with the SwiGLU pairing).
  auto locate = [&](int64_t task, int& jx_, int64_t& n_, const WT*(&rp)[R]) {
    jx_ = 0;
#pragma unroll
    for (int q = 1; q < kMaxDecodeJobs; ++q)
      if (q < g.count && task >= g.j[q].task_begin) jx_ = q;
    n_ = task - g.j[jx_].task_begin;
    const WT* base = static_cast<const WT*>(g.j[jx_].w);
#pragma unroll
    for (int r = 0; r < R; ++r) rp[r] = base + (n_ + r * (g.j[jx_].N / 2)) * g.j[jx_].ldw;
  };
  auto load_slot = [&](int u, const WT* const(&rp)[R], int64_t c) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int v = 0; v < V; ++v) wv[r][u][v] = ld_stream(reinterpret_cast<const uint4*>(rp[r] + c * 8) + v);
  };
  int jx = 0;
  int64_t n = 0;
  const WT* rowp[R];
  // The first weights do not depend on the previous kernel: in flight before the wait.
  bool preloaded = t < tasks;
  if (preloaded) {
    locate(t, jx, n, rowp);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = static_cast<int64_t>(u) * 32 + lane;
      if (c < nchunk) load_slot(u, rowp, c);
    }
  }
  pdl_wait();
  pdl_trigger();
  float inv = 0.f;
  if constexpr (kNorm) {
    inv = rms_inv(g.x, g.K, g.eps, red);
    if (blockIdx.x == 0) {
      for (int64_t c = threadIdx.x; c < g.K; c += kGemvThreads) g.norm_out[c] = (g.x[c] * inv) * g.norm_w[c];
    }
  }
  const int64_t nb = (nchunk + 32 * U - 1) / (32 * U);
  for (; t < tasks; t += stride) {
    // kRoll: each slot is refilled as soon as it is consumed (the next batch's chunk, or the next
    // task's first), so a warp keeps U loads in flight; otherwise a batch's U loads are issued
    // together before its first use.
    const int64_t t2 = t + stride;
    const bool has2 = t2 < tasks;
    int jx2 = jx;
    int64_t n2 = n;
    const WT* rowp2[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rowp2[r] = rowp[r];
    if (has2) locate(t2, jx2, n2, rowp2);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (!kRoll) {
        if (!preloaded) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t c = (b * U + u) * 32 + lane;
            if (c < nchunk) load_slot(u, rowp, c);
          }
        }
        preloaded = false;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = (b * U + u) * 32 + lane;
        if (c < nchunk) {
          const float4* xp = reinterpret_cast<const float4*>(g.x + c * 8);
          const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
          float a[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          if constexpr (kNorm) {
            const float4* gp = reinterpret_cast<const float4*>(g.norm_w + c * 8);
            const float4 g0 = __ldg(gp), g1 = __ldg(gp + 1);
            const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) a[e] = __fmul_rn(__fmul_rn(a[e], inv), gw[e]);
          }
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float wf[8];
            unpack8(wv[r][u], static_cast<WT*>(nullptr), wf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r] = fmaf(a[e], wf[e], acc[r]);
          }
        }
        if constexpr (kRoll) {
          if (b + 1 < nb) {
            if (c + 32 * U < nchunk) load_slot(u, rowp, c + 32 * U);
          } else if (has2) {
            const int64_t c0 = static_cast<int64_t>(u) * 32 + lane;
            if (c0 < nchunk) load_slot(u, rowp2, c0);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
      const DecodeGemvJob& J = g.j[jx];
      if constexpr (kPair) {
        const int64_t I = J.N / 2;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t row = n + r * I;
          const float v = acc[r] + (J.bias ? J.bias[row] : 0.f);
          if (J.ep == static_cast<int>(Epilogue::kAddResidual)) {
            J.out[row] += v;
          } else {
            J.out[row] = v;
          }
        }
      } else if constexpr (R == 2) {
        const int64_t I = J.N / 2;
        const float gv = acc[0] + (J.bias ? J.bias[n] : 0.f);
        const float uv = acc[1] + (J.bias ? J.bias[n + I] : 0.f);
        J.out[n] = gv;
        J.out[n + I] = uv;
        g.silu_out[n] = silu(gv) * uv;
      } else {
        const float v = acc[0] + (J.bias ? J.bias[n] : 0.f);
        if (J.ep == static_cast<int>(Epilogue::kAddResidual)) {
          J.out[n] += v;
        } else {
          J.out[n] = v;
        }
      }
    }
    jx = jx2;
    n = n2;
#pragma unroll
    for (int r = 0; r < R; ++r) rowp[r] = rowp2[r];
  }
}

// VV_CUDA_GEMV_ROLL=0|1 picks the GEMV's load schedule (see decode_gemv_kernel); default below.
bool gemv_roll() {
  static const bool on = [] {
    const char* e = std::getenv("VV_CUDA_GEMV_ROLL");
    return e ? std::string(e) != "0" : kGemvRollDefault;
  }();
  return on;
}

template <typename WT, int R, bool kNorm, bool kRoll, int kMinBlocks = 0, bool kBal = false,
          bool kPair = false>
void launch_gemv_sched(const DecodeGemv& g, int64_t tasks, cudaStream_t s) {
  // Five blocks per SM (kMinBlocks = 5) hold half the loads in flight per warp.
  constexpr int U = (R == 1 && sizeof(WT) == 2 && kMinBlocks < 5) ? 8 : 4;
  auto* kern = decode_gemv_kernel<WT, R, kNorm, U, kRoll, kMinBlocks, kBal, kPair>;
  static int per_sm = 0;  // blocks resident per SM, per instantiation
  if (per_sm == 0) {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, kGemvThreads, 0) != cudaSuccess) {
      cudaGetLastError();
      b = 1;
    }
    per_sm = std::max(b, 1);
  }
  const int64_t slots = static_cast<int64_t>(per_sm) * g.sms;
  if constexpr (kBal) {  // the fewest tasks a block that cover every task with the blocks resident
    DecodeGemv gb = g;
    gb.tpb = static_cast<int>(std::clamp<int64_t>((tasks + slots - 1) / slots, 1, kGemvThreads / 32));
    const int64_t grid = (tasks + gb.tpb - 1) / gb.tpb;
    launch_pdl(kern, static_cast<unsigned>(grid), kGemvThreads, s, gb, tasks);
    return;
  }
  const int64_t want = (tasks + kGemvThreads / 32 - 1) / (kGemvThreads / 32);
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(want, slots));
  launch_pdl(kern, static_cast<unsigned>(grid), kGemvThreads, s, g, tasks);
}

// VV_CUDA_GEMV_WIDE=1 (opt-in until measured on a GPU): a one-row-per-warp launch whose rows outnumber
// the warps resident at 3-4 blocks per SM (the fused norm + q/k/v: 4,608 rows against 3,168 warps, a
// second round for 1,440 of them) runs 5 blocks per SM with 4 loads in flight per lane, all its rows
// in one round. The loads' schedule does not change a row's sum (lane-strided chunks, ascending).
bool gemv_wide() {
  static const bool on = [] {
    const char* e = std::getenv("VV_CUDA_GEMV_WIDE");
    return e && std::string(e) == "1";
  }();
  return on;
}

// Whether g takes the balanced launch (DecodeGemv::balance): one row a task, no norm prologue, the
// rolled schedule, and no more rows than the warps resident at the default's blocks per SM.
bool balances(const DecodeGemv& g, int64_t tasks) {
  return g.balance && g.silu_out == nullptr && g.norm_w == nullptr && gemv_roll() &&
         tasks <= static_cast<int64_t>(g.sms) * gemv_default_blocks(1, false) * (kGemvThreads / 32);
}

template <typename WT, int R, bool kNorm>
void launch_gemv(const DecodeGemv& g, int64_t tasks, cudaStream_t s) {
  if constexpr (R == 1 && !kNorm) {
    if (balances(g, tasks)) {
      launch_gemv_sched<WT, R, kNorm, true, 0, true>(g, tasks, s);
      return;
    }
  }
  if constexpr (R == 1 && kNorm && sizeof(WT) == 2) {
    if (g.min_blocks == 4 && gemv_roll()) {
      launch_gemv_sched<WT, R, kNorm, true, 4>(g, tasks, s);
      return;
    }
  }
  if constexpr (R == 1 && sizeof(WT) == 2) {
    const int64_t resident =
        static_cast<int64_t>(g.sms) * gemv_default_blocks(R, kNorm) * (kGemvThreads / 32);
    if (gemv_wide() && gemv_roll() && tasks > resident &&
        tasks <= static_cast<int64_t>(g.sms) * 5 * (kGemvThreads / 32)) {
      launch_gemv_sched<WT, R, kNorm, true, 5>(g, tasks, s);
      return;
    }
  }
  if (gemv_roll()) {
    launch_gemv_sched<WT, R, kNorm, true>(g, tasks, s);
  } else {
    launch_gemv_sched<WT, R, kNorm, false>(g, tasks, s);
  }
}

// Whether g's rows go two a warp (DecodeGemv::pair_rows): `tasks` one a row.
bool pairs(const DecodeGemv& g, int64_t tasks) {
  if (!g.pair_rows || g.silu_out || g.wt == DType::kF32 || !gemv_roll()) return false;
  for (int i = 0; i < g.count; ++i)
    if (g.j[i].N % 2 != 0) return false;
  const bool norm = g.norm_w != nullptr;
  const int64_t warps = static_cast<int64_t>(g.sms) * (kGemvThreads / 32);
  return tasks > warps * gemv_default_blocks(1, norm) && tasks / 2 <= warps * gemv_default_blocks(2, norm);
}

template <typename WT>
void dispatch_gemv(const DecodeGemv& g, int64_t tasks, cudaStream_t s) {
  const bool norm = g.norm_w != nullptr;
  if constexpr (sizeof(WT) == 2) {
    if (pairs(g, tasks)) {  // (balanced too with DecodeGemv::balance)
      DecodeGemv gp = g;
      int64_t t = 0;
      for (int i = 0; i < gp.count; ++i) {
        gp.j[i].task_begin = t;
        t += gp.j[i].N / 2;
      }
      if (norm) {
        g.balance ? launch_gemv_sched<WT, 2, true, true, 0, true, true>(gp, t, s)
                  : launch_gemv_sched<WT, 2, true, true, 0, false, true>(gp, t, s);
      } else {
        g.balance ? launch_gemv_sched<WT, 2, false, true, 0, true, true>(gp, t, s)
                  : launch_gemv_sched<WT, 2, false, true, 0, false, true>(gp, t, s);
      }
      return;
    }
  }
  if (g.silu_out) {
    if (norm) {
      launch_gemv<WT, 2, true>(g, tasks, s);
    } else {
      launch_gemv<WT, 2, false>(g, tasks, s);
    }
  } else if (norm) {
    launch_gemv<WT, 1, true>(g, tasks, s);
  } else {
    launch_gemv<WT, 1, false>(g, tasks, s);
  }
}

// One thread per rope_kv_write item (dec::rope_kv_item).
template <typename CT>
__global__ void rope_kv_kernel(const RopeKvArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.R * (a.qh + a.kh) * (a.D / 2)) return;
  dec::rope_kv_item<CT, false>(a, i);
}

// Ties to the lowest index; a NaN beats every number and the first NaN wins (as the reference).
__device__ __forceinline__ bool better(float v1, int64_t i1, float v2, int64_t i2) {
  const bool n1 = isnan(v1), n2 = isnan(v2);
  if (n1 || n2) return n1 && n2 ? i1 < i2 : n1;
  if (v1 != v2) return v1 > v2;
  return i1 < i2;
}

constexpr int kArgMaxParts = 256;
constexpr int kArgThreads = 256;

// The best of (v, i) and (ov, oi); an index < 0 is no candidate.
__device__ __forceinline__ void keep_better(float& v, int64_t& i, float ov, int64_t oi) {
  if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) {
    v = ov;
    i = oi;
  }
}

// The warp's best (value, index) in every lane.
__device__ __forceinline__ void warp_best(float& v, int64_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    keep_better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
}

// Block (part p, row r): the best of slice p of row r into ws (slices of `len` elements, a multiple of
// VEC). VEC > 1: 16-byte loads (the row's start 16-byte aligned, its stride a multiple of VEC). The order
// of comparison does not matter: `better` is a strict total order on (value, index).
// A running log-sum-exp: sum of exp(x − m) over the values seen, m their max (−inf: none yet).
struct Lse {
  float m = -INFINITY, s = 0.f;
  // x: NaN and −inf add nothing.
  __device__ __forceinline__ void add(float x) {
    if (!(x > -INFINITY)) return;
    if (x > m) {
      s = s * __expf(m - x) + 1.f;  // m = −inf: s is 0, and 0 · exp(−inf) is 0
      m = x;
    } else {
      s += __expf(x - m);
    }
  }
  __device__ __forceinline__ void merge(float om, float os) {
    if (!(om > -INFINITY)) return;
    if (om > m) {
      s = s * __expf(m - om) + os;
      m = om;
    } else {
      s += os * __expf(om - m);
    }
  }
  __device__ __forceinline__ void warp_merge() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
      merge(om, os);
    }
  }
};

// kLp: also the slice's log-sum-exp pair into wsm / wss (decode_argmax's logprob).
template <typename LT, int VEC, bool kLp = false>
__global__ void __launch_bounds__(kArgThreads)
    argmax_part_kernel(const LT* __restrict__ logits, int64_t ld, int64_t V, int64_t len, int parts,
                       float* wsv, int32_t* wsi, float* wsm, float* wss) {
  pdl_wait();
  pdl_trigger();
  __shared__ float sv[kArgThreads / 32];
  __shared__ int64_t si[kArgThreads / 32];
  __shared__ float sm[kArgThreads / 32], ss[kArgThreads / 32];
  const int64_t r = blockIdx.y;
  const int64_t begin = blockIdx.x * len, end = begin + len < V ? begin + len : V;
  const LT* row = logits + r * ld;
  float bv = NAN;
  int64_t bi = -1;
  Lse lse;
  const int64_t vend = end > begin ? begin + (end - begin) / VEC * VEC : begin;
  if constexpr (VEC > 1) {
    struct alignas(16) Vec {
      LT e[VEC];
    };
#pragma unroll 4
    for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * VEC; i < vend; i += kArgThreads * VEC) {
      const Vec x = *reinterpret_cast<const Vec*>(row + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float f = to_f32(x.e[k]);
        keep_better(bv, bi, f, i + k);
        if constexpr (kLp) lse.add(f);
      }
    }
  }
  for (int64_t i = (VEC > 1 ? vend : begin) + threadIdx.x; i < end; i += kArgThreads) {
    const float f = to_f32(row[i]);
    keep_better(bv, bi, f, i);
    if constexpr (kLp) lse.add(f);
  }
  warp_best(bv, bi);
  if constexpr (kLp) lse.warp_merge();
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) {
    sv[warp] = bv;
    si[warp] = bi;
    if constexpr (kLp) {
      sm[warp] = lse.m;
      ss[warp] = lse.s;
    }
  }
  __syncthreads();
  if (warp == 0) {
    const bool has = threadIdx.x < kArgThreads / 32;
    bv = has ? sv[threadIdx.x] : NAN;
    bi = has ? si[threadIdx.x] : -1;
    warp_best(bv, bi);
    if constexpr (kLp) {
      lse = Lse{};
      if (has) lse.merge(sm[threadIdx.x], ss[threadIdx.x]);
      lse.warp_merge();
    }
    if (threadIdx.x == 0) {
      wsv[r * parts + blockIdx.x] = bv;
      wsi[r * parts + blockIdx.x] = static_cast<int32_t>(bi);
      if constexpr (kLp) {
        wsm[r * parts + blockIdx.x] = lse.m;
        wss[r * parts + blockIdx.x] = lse.s;
      }
    }
  }
}

// A warp a row: the best of its parts (kLp: and its logprob from the parts' log-sum-exp pairs).
template <bool kLp = false>
__global__ void argmax_final_kernel(const float* __restrict__ wsv, const int32_t* __restrict__ wsi,
                                    const float* __restrict__ wsm, const float* __restrict__ wss,
                                    int64_t rows, int parts, int32_t* out, float* logprob) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;
  float bv = NAN;
  int64_t bi = -1;
  Lse lse;
  for (int p = static_cast<int>(threadIdx.x & 31); p < parts; p += 32) {
    keep_better(bv, bi, wsv[r * parts + p], wsi[r * parts + p]);
    if constexpr (kLp) lse.merge(wsm[r * parts + p], wss[r * parts + p]);
  }
  warp_best(bv, bi);
  if constexpr (kLp) lse.warp_merge();
  if ((threadIdx.x & 31) == 0) {
    out[r] = bi < 0 ? 0 : static_cast<int32_t>(bi);
    if constexpr (kLp) {
      const bool finite = lse.m > -INFINITY && bv > -INFINITY;  // bv NaN: a NaN won the argmax
      logprob[r] = finite ? fminf(0.f, (bv - lse.m) - __logf(lse.s)) : -INFINITY;
    }
  }
}

using dec::decode_attn_block;
using dec::kAttnKeysPerWarp;
using dec::kAttnMaxG;
using dec::kAttnMaxHeadDim;
using dec::kAttnRound;
using dec::kAttnThreads;
using dec::kAttnWarps;
using dec::load4;
using dec::warp_max;

// kRope: a.rope's fused rope and cache write; the cache is then read through L2 (cg loads: the new key's
// row was written by this block).
// kPre (with kRope, unless VV_CUDA_ATTN_PRE=0): the block waits for the kernel before itself, after the loads
// that do not depend on it (decode_attn_block).
// kStamp (with kPre): DecodeRope's stamp sink records each block's stages (VV_CUDA_ATTN_STAMPS, a probe).
template <typename CT, bool kRope, bool kPre = false, bool kStamp = false>
__global__ void __launch_bounds__(kAttnThreads) decode_attn_kernel(const DecodeAttnArgs a) {
  if constexpr (!kPre) {
    pdl_wait();
    pdl_trigger();
  }
  extern __shared__ float sm[];
  __shared__ float mls[2][kAttnMaxG];
  __shared__ int last;
  decode_attn_block<CT, kRope, kRope, kPre, kStamp>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm, mls, last);
}

// The fused form with the scores by a transposing butterfly and the merge's maxima and sums in one trip
// (VV_CUDA_ATTN_XPOSE=1), capped at 160 registers
// like the default form (159), so that a block still fits beside the last block of the q/k/v GEMV before
// it on an SM (its own choice was 179; session 27 measured a form at 184 registers whose blocks all waited
// for the GEMV to end).
// kEarly: the merge's early loads (decode_attn_block's kEarly; the default, VV_CUDA_ATTN_MERGE_EARLY=0: off).
template <typename CT, bool kStamp, bool kEarly = false>
__global__ void __maxnreg__(160) decode_attn_xpose_kernel(const DecodeAttnArgs a) {
  extern __shared__ float sm[];
  __shared__ float mls[2][kAttnMaxG];
  __shared__ int last;
  decode_attn_block<CT, true, true, true, kStamp, true, kEarly>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm,
                                                                mls, last);
}
// The butterfly kernel with the early merge and the rounds' loads a round ahead (decode_attn_block's kPipe;
// the default for splits of several rounds), capped at 176 registers: the next round's raw K slices spill 112
// bytes under 160, and 176 a thread still fits a block beside one of the q/k/v GEMV's (256 threads at 80:
// 45,056 + 20,480 = 65,536 registers).
template <typename CT>
__global__ void __maxnreg__(176) decode_attn_pipe_kernel(const DecodeAttnArgs a) {
  extern __shared__ float sm[];
  __shared__ float mls[2][kAttnMaxG];
  __shared__ int last;
  decode_attn_block<CT, true, true, true, false, true, true, true>(a, blockIdx.x, blockIdx.y, blockIdx.z, sm,
                                                                   mls, last);
}

// ---- Decode attention on the tensor cores ----------------------------------------------------
// Fragment layouts: mma_util.cuh (g = lane/4, t = lane%4). The GQA group's G ≤ 8 query heads are
// rows 0..7 of the A tile (rows 8..15 are zero), so a thread's scores are row g, and a1/a3 are 0.
// Q·Kᵀ: the head_dim axis is the k axis and may be permuted freely (the same way for q and K):
// thread t takes dims 32c + 8t .. +7 of chunk c (one 16-byte load per K row): elements 0..3 are
// k-step 2c (logical k 2t, 2t+1 | 2t+8, 2t+9), elements 4..7 k-step 2c+1. Key n of an 8-key tile is
// the thread group g's key, so a thread loads whole 16-byte slices of K rows.
// P·V: the output dims (n axis) may be permuted too: n-tile dt = 8·hh + e holds dims
// 64·hh + 8·n + e, so thread group g needs dims 64·hh + 8g .. +7 of its keys 2t, 2t+1, 2t+8, 2t+9
// (again 16-byte slices), and the B fragment's pairs of keys are put together with a byte permute.
__device__ __forceinline__ uint4 ld16(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ uint4 as_bf16x8(uint4 u, __nv_bfloat16*) {
  return u;
}
__device__ __forceinline__ uint4 as_bf16x8(uint4 u, __half*) {
  return mma::f16x8_to_bf16x8(u);
}
__device__ __forceinline__ uint32_t word(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
using mma::quad_max;
using mma::quad_sum;

constexpr int kMmaDecWarps = 4;  // independent units per block

// Floats of one unit's partial result in ws: acc [G][D], then max [8] and sum [8].
__host__ __device__ constexpr int mma_unit_floats(int G, int D) {
  return G * D + 16;
}

// Block (x, kv head, row): warp w takes unit u = 4x + w, keys [u·chunk, min(L, (u+1)·chunk)), in
// steps of 16 keys with an online softmax (log2 domain). See decode_ops.cuh for the merge.
template <typename CT, int D>
__global__ void __launch_bounds__(kMmaDecWarps * 32, 3)
    mma_decode_kernel(const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
                      const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt,
                      int bs, const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc, int kv_heads,
                      int G, float scale_log2, int chunk, int splits, float* __restrict__ out, int64_t ldo,
                      float* ws, unsigned* counters) {
  constexpr int KC = D / 32;   // 32-dim chunks of Q·Kᵀ (two k-steps each)
  constexpr int VH = D / 64;   // 64-dim halves of P·V
  constexpr int DT = D / 8;    // 8-dim output tiles
  constexpr int VEC = D / 32;  // dims per lane in the merge
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int unit = blockIdx.x * kMmaDecWarps + warp;
  const int kvh = blockIdx.y;
  const int64_t r = blockIdx.z;
  const int L = row_pos[r] + 1;
  const int ns = (L + chunk - 1) / chunk;  // this row's units
  if (unit >= ns) return;
  const int32_t* tab = tables + static_cast<int64_t>(row_seq[r]) * ldt;
  const int k0 = unit * chunk, k1 = min(L, k0 + chunk);
  const int64_t hoff = static_cast<int64_t>(kvh) * D;

  uint32_t qa[KC][2][2];  // [chunk][k-step of the chunk][a0, a2]
  {
    const float* qp = q + r * ldq + static_cast<int64_t>(kvh * G + g) * D + 8 * t;
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      float x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = g < G ? qp[32 * c + e] : 0.f;
      qa[c][0][0] = mma::pack_bf16(x[0], x[1]);
      qa[c][0][1] = mma::pack_bf16(x[2], x[3]);
      qa[c][1][0] = mma::pack_bf16(x[4], x[5]);
      qa[c][1][1] = mma::pack_bf16(x[6], x[7]);
    }
  }
  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float m = -INFINITY, l = 0.f;
  auto slot = [&](int j) { return static_cast<int64_t>(tab[j / bs]) * bs + j % bs; };

#pragma unroll 1
  for (int j0 = k0; j0 < k1; j0 += 16) {
    uint4 kr[2][KC], vr[4][VH];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int j = j0 + 8 * h2 + g;
      if (j < k1) {
        const CT* p = kc + slot(j) * ldc + hoff + 8 * t;
#pragma unroll
        for (int c = 0; c < KC; ++c) kr[h2][c] = ld16(p + 32 * c);
      } else {
#pragma unroll
        for (int c = 0; c < KC; ++c) kr[h2][c] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = j0 + (i >> 1) * 8 + 2 * t + (i & 1);
      if (j < k1) {
        const CT* p = vc + slot(j) * ldc + hoff + 8 * g;
#pragma unroll
        for (int hh = 0; hh < VH; ++hh) vr[i][hh] = ld16(p + 64 * hh);
      } else {  // zeros, not stale data: a masked key's weight is 0, and 0·NaN would not be
#pragma unroll
        for (int hh = 0; hh < VH; ++hh) vr[i][hh] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[2][4];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      s[h2][0] = s[h2][1] = s[h2][2] = s[h2][3] = 0.f;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const uint4 kb = as_bf16x8(kr[h2][c], static_cast<CT*>(nullptr));
        const uint32_t a0[4] = {qa[c][0][0], 0u, qa[c][0][1], 0u};
        mma::mma_bf16(s[h2], a0, kb.x, kb.y);
        const uint32_t a1[4] = {qa[c][1][0], 0u, qa[c][1][1], 0u};
        mma::mma_bf16(s[h2], a1, kb.z, kb.w);
      }
    }
    // Row g's scores: keys j0 + 8·h2 + 2t + e. Key j0 is valid, so every row's max is finite.
    float mx = -INFINITY;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 8 * h2 + 2 * t + e;
        s[h2][e] = j < k1 ? s[h2][e] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[h2][e]);
      }
    mx = quad_max(mx);
    const float m_new = fmaxf(m, mx);
    const float corr = exp2f(m - m_new);  // 0 at the first step (m = −inf)
    float sum = 0.f;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[h2][e] = exp2f(s[h2][e] - m_new);
        sum += s[h2][e];
      }
    l = l * corr + sum;  // this thread's keys; the quad is summed at the end
    m = m_new;
    const uint32_t pa[4] = {mma::pack_bf16(s[0][0], s[0][1]), 0u, mma::pack_bf16(s[1][0], s[1][1]), 0u};
#pragma unroll
    for (int hh = 0; hh < VH; ++hh) {
      const uint4 v0 = as_bf16x8(vr[0][hh], static_cast<CT*>(nullptr));
      const uint4 v1 = as_bf16x8(vr[1][hh], static_cast<CT*>(nullptr));
      const uint4 v2 = as_bf16x8(vr[2][hh], static_cast<CT*>(nullptr));
      const uint4 v3 = as_bf16x8(vr[3][hh], static_cast<CT*>(nullptr));
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int dt = hh * 8 + e;
        o[dt][0] *= corr;
        o[dt][1] *= corr;
        const unsigned sel = (e & 1) ? 0x7632u : 0x5410u;  // high or low halves: element e
        const uint32_t b0 = __byte_perm(word(v0, e >> 1), word(v1, e >> 1), sel);
        const uint32_t b1 = __byte_perm(word(v2, e >> 1), word(v3, e >> 1), sel);
        mma::mma_bf16(o[dt], pa, b0, b1);
      }
    }
  }
  l = quad_sum(l);
  // Thread (g, t) holds row g's dims 64·hh + 16t + e (o[8hh + e][0]) and 64·hh + 16t + 8 + e (…[1]).
  if (ns == 1) {
    if (g < G) {
      float* dst = out + r * ldo + static_cast<int64_t>(kvh * G + g) * D + 16 * t;
#pragma unroll
      for (int hh = 0; hh < VH; ++hh)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          dst[64 * hh + e] = o[hh * 8 + e][0] / l;
          dst[64 * hh + 8 + e] = o[hh * 8 + e][1] / l;
        }
    }
    return;
  }
  const int64_t pair = r * kv_heads + kvh;
  const int UF = mma_unit_floats(G, D);
  float* wu = ws + (pair * splits + unit) * UF;
  if (g < G) {
#pragma unroll
    for (int hh = 0; hh < VH; ++hh) {
      float* d = wu + g * D + 64 * hh + 16 * t;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        d[e] = o[hh * 8 + e][0];
        d[8 + e] = o[hh * 8 + e][1];
      }
    }
    if (t == 0) {
      wu[G * D + g] = m;
      wu[G * D + 8 + g] = l;
    }
  }
  __threadfence();
  __syncwarp();
  unsigned prev = 0;
  if (lane == 0) prev = atomicAdd(&counters[pair], 1u);
  prev = __shfl_sync(0xffffffffu, prev, 0);
  if (prev != static_cast<unsigned>(ns - 1)) return;
  __threadfence();
  if (lane == 0) counters[pair] = 0;  // ready for the next launch
  // The last unit merges units 0..ns−1 in order (lanes over dims; split maxima and sums over lanes
  // in passes of 32 units, reduced in the fixed xor order), so the result does not depend on which
  // unit finished last.
  const float* wp = ws + pair * splits * UF;
  float* orow = out + r * ldo + static_cast<int64_t>(kvh) * G * D + lane * VEC;
  for (int gg = 0; gg < G; ++gg) {
    float M = -INFINITY;
    for (int u = lane; u < ns; u += 32) M = fmaxf(M, __ldcg(wp + u * UF + G * D + gg));
    M = warp_max(M);
    float Ls = 0.f;
    for (int u = lane; u < ns; u += 32)
      Ls = fmaf(__ldcg(wp + u * UF + G * D + 8 + gg), exp2f(__ldcg(wp + u * UF + G * D + gg) - M), Ls);
    Ls = warp_sum(Ls);
    float acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = 0.f;
    for (int u0 = 0; u0 < ns; u0 += 32) {
      const int u = u0 + lane;
      const float wl = u < ns ? exp2f(__ldcg(wp + u * UF + G * D + gg) - M) : 0.f;
      const int cnt = min(32, ns - u0);
#pragma unroll 4
      for (int i = 0; i < cnt; ++i) {
        const float w = __shfl_sync(0xffffffffu, wl, i);
        const float* src = wp + (u0 + i) * UF + gg * D + lane * VEC;
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[v] = fmaf(__ldcg(src + v), w, acc[v]);
      }
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) orow[gg * D + v] = acc[v] / Ls;
  }
}

// ---- The tensor-core decode attention, streamed through shared memory -------------------------
// The same units, q/K/V/P roundings and online softmax as mma_decode_kernel, with the loads
// decoupled from the arithmetic: a warp copies the K and V rows of its next S steps of 16 keys
// into its own ring of shared-memory stages with cp.async (zero-filled past the row's length), one
// block-table lookup per step when the block size is a multiple of 16, so the bytes of S steps are
// in flight while the warp computes. The fragments come from shared memory with ldmatrix in the
// standard mma layouts (an XOR swizzle of the 16-byte chunks keeps ldmatrix's eight rows on eight
// bank groups). The merge of a row's units issues the loads of all G heads of two units at a time
// (the first kernel's merge waited on one head's loads at a time).
using mma::cp_async16_zfill;
using mma::cp_async_commit;
using mma::cp_async_wait;
// Two 16-bit cache values (one fragment register) as bf16, rounded as f16x8_to_bf16x8 does.
__device__ __forceinline__ uint32_t as_bf16x2(uint32_t u, __nv_bfloat16*) {
  return u;
}
__device__ __forceinline__ uint32_t as_bf16x2(uint32_t u, __half*) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u));
  return mma::pack_bf16(f.x, f.y);
}

constexpr int kMmaStreamKeys = 16;  // keys per stage: the n side of two m16n8k16 tiles

// Shared memory of one warp: S stages of K then V rows, 16 keys × D each, bf16/f16.
__host__ __device__ constexpr int mma_stream_warp_bytes(int D, int S) {
  return S * 2 * kMmaStreamKeys * D * 2;
}

// Block (x, kv head, row) of `warps` warps: warp w takes unit u = warps·x + w as in
// mma_decode_kernel; S stages of 16 keys per warp. With `share`, the block takes unit x and its warps
// the unit's steps in turn (MmaDecodeConfig::share).
// Bounds of 2 blocks of 128 threads per SM (up to 255 registers: 184 at D 128 for bf16, no spill; 5 blocks of
// the default 2 warps fit an SM's registers, 660 on 132 SMs, a 128-row step's 512 in one wave). At 3 (168
// registers) ptxas spilled 36 bytes that the loop reloaded: Nsight, H100, 128 rows at context 400, 48.7
// against 45.9 µs a launch (NOTES, session 37).
template <typename CT, int D, int S>
__global__ void __launch_bounds__(128, 2)
    mma_decode_stream_kernel(const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
                             const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables,
                             int64_t ldt, int bs, const CT* __restrict__ kc, const CT* __restrict__ vc,
                             int64_t ldc, int kv_heads, int G, float scale_log2, int chunk, int splits,
                             float* __restrict__ out, int64_t ldo, float* ws, unsigned* counters, bool heads,
                             bool share, __nv_bfloat16* __restrict__ pack, const DecodeRope rp) {
  constexpr int KS = D / 16;     // k-steps of Q·Kᵀ
  constexpr int DT = D / 8;      // 8-dim output tiles of P·V
  constexpr int CPR = D / 8;     // 16-byte chunks per cached row (of one kv head)
  constexpr int KPP = 32 / CPR;  // rows a warp's copy instruction covers
  constexpr int PASSES = kMmaStreamKeys / KPP;
  constexpr int ROWS = kMmaStreamKeys * D;  // elements of the K (or V) rows of one stage
  constexpr int VEC = D / 32;               // dims per lane in the merge
  pdl_wait();
  pdl_trigger();
  extern __shared__ uint4 mma_stream_smem[];
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // heads: block (x, 0, row) of warps = units·kv_heads, warp w the kv head w mod kv_heads of unit
  // x·units + w / kv_heads; otherwise block (x, kv head, row), warp w unit x·warps + w.
  // share: block (x, kv head, row) takes unit x, warp w its steps w, w + warps, ... (merged at the end).
  const int unit = share   ? static_cast<int>(blockIdx.x)
                   : heads ? blockIdx.x * (warps / kv_heads) + warp / kv_heads
                           : blockIdx.x * warps + warp;
  const int kvh = heads && !share ? warp % kv_heads : static_cast<int>(blockIdx.y);
  const int64_t r = blockIdx.z;
  const int L = row_pos[r] + 1;
  const int ns = (L + chunk - 1) / chunk;  // this row's units
  if (unit >= ns) return;
  const int32_t* tab = tables + static_cast<int64_t>(row_seq[r]) * ldt;
  const int k0 = unit * chunk, k1 = min(L, k0 + chunk);
  const int nsteps = (k1 - k0 + kMmaStreamKeys - 1) / kMmaStreamKeys;
  // This warp's steps of the unit: s0, s0 + sw, ... (all of them but with share).
  const int sw = share ? warps : 1, s0 = share ? warp : 0;
  const int mine = nsteps > s0 ? (nsteps - s0 + sw - 1) / sw : 0;
  const int64_t hoff = static_cast<int64_t>(kvh) * D;
  CT* const sm = reinterpret_cast<CT*>(mma_stream_smem) + static_cast<int64_t>(warp) * S * 2 * ROWS;
  // DecodeRope: key L − 1 is in the last unit's last step, which one warp copies (and alone reads): that
  // warp writes the key, then __syncwarp orders the lanes' stores before its copies. Before its first
  // copies when the step is among them, else after them, with q's rotation (below; the step's copy comes
  // later in the loop), so that the write overlaps the copies in flight.
  const int last_step = nsteps - 1;
  const bool writer = rp.inv_freq != nullptr && unit == ns - 1 && last_step % sw == s0;
  const bool write_first = writer && (last_step - s0) / sw < S;
  if (write_first) {
    dec::rope_kv_row<CT>(rp, r, kvh, L - 1, tab, bs, ldc, D, lane, 32);
    __syncwarp();
  }

  // The lane's copies of a stage: rows n = lane / CPR + KPP·p (p < PASSES), 16-byte chunk c = lane %
  // CPR of each, stored at chunk c ^ (n & 7) of the row.
  const int cn = lane / CPR, cc = lane % CPR;
  const bool tiled = bs % kMmaStreamKeys == 0;  // a step's 16 keys are 16 slots of one block
  // The writer whose copies come first (below, with q's rotation): its key's block, in flight with the
  // first copies' entries.
  const bool late_writer = writer && !write_first;
  const int32_t new_blk = late_writer ? __ldg(tab + (L - 1) / bs) : 0;
  auto issue = [&](int step, int stage) {
    const int j0 = k0 + step * kMmaStreamKeys;
    int64_t slot[PASSES];
    if (tiled) {
      const int64_t base = static_cast<int64_t>(__ldg(tab + j0 / bs)) * bs + j0 % bs;
#pragma unroll
      for (int p = 0; p < PASSES; ++p) slot[p] = base + cn + KPP * p;
    } else {
#pragma unroll
      for (int p = 0; p < PASSES; ++p) {
        const int j = min(j0 + cn + KPP * p, k1 - 1);  // past the length: a valid key, not copied
        slot[p] = static_cast<int64_t>(__ldg(tab + j / bs)) * bs + j % bs;
      }
    }
    CT* ks = sm + stage * 2 * ROWS;
    CT* vs = ks + ROWS;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
      const int n = cn + KPP * p;
      const bool valid = j0 + n < k1;
      const int64_t off = valid ? slot[p] * ldc + hoff + 8 * cc : 0;
      const int so = n * D + 8 * (cc ^ (n & 7));
      cp_async16_zfill(ks + so, kc + off, valid);
      cp_async16_zfill(vs + so, vc + off, valid);
    }
  };
#pragma unroll
  for (int s = 0; s < S; ++s) {
    if (s < mine) issue(s0 + s * sw, s);
    cp_async_commit();  // empty groups too: the wait below counts groups
  }

  // q as the A fragments (rows g < G; a1 = a3 = 0, rows 8..15 of the tile are empty): k-step kk
  // takes dims 16kk + 2t, +1 (a0) and 16kk + 8 + 2t, +1 (a2).
  // DecodeRope: dims d and d + D/2 (k-steps kk and kk + KS/2, same e) are rope's pair of frequency d.
  // Lane l takes the cosine and sine of frequencies l, l + 32, ... (D/2 of them). The writer whose copies
  // came first (the key's step is later) rotates the new key with them: rope_kv_row's values (the same
  // position and frequencies), its loads issued with q's, so that neither its cosines and sines nor a
  // round trip of its own stand between its copies and its first step.
  constexpr int PER = (D / 2 + 31) / 32;
  constexpr int half = D / 2;
  float nk[PER][2], nv[PER][2];  // late_writer: the new key's and value's pairs of frequency lane + 32j
  float* const kr = late_writer ? rp.k + r * rp.ldk + hoff : nullptr;
  const float* const vr = late_writer ? rp.v + r * rp.ldv + hoff : nullptr;
  uint32_t qa[KS][2];
  {
    const float* qp = q + r * ldq + static_cast<int64_t>(kvh * G + g) * D + 2 * t;
    float x[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[kk][e] = g < G ? qp[16 * kk + (e >> 1) * 8 + (e & 1)] : 0.f;
    if (late_writer) {
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int f = lane + 32 * j;
        if (f < half) {
          nk[j][0] = kr[f], nk[j][1] = kr[f + half];
          nv[j][0] = vr[f], nv[j][1] = vr[f + half];
        }
      }
    }
    if (rp.inv_freq != nullptr) {
      // A lane's frequency 16kk + 8(e >> 1) + (e & 1) + 2t is lane 16(kk % 2) + 8(e >> 1) + (e & 1) + 2t's
      // value kk / 2.
      const float pf = static_cast<float>(L - 1);
      float cs[PER], sn[PER];
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const float phi = pf * rp.inv_freq[min(lane + 32 * j, half - 1)];
        cs[j] = cosf(phi);
        sn[j] = sinf(phi);
      }
#pragma unroll
      for (int kk = 0; kk < KS / 2; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int src = 16 * (kk % 2) + 8 * (e >> 1) + (e & 1) + 2 * t;
          const float c = __shfl_sync(0xffffffffu, cs[kk / 2], src),
                      sv = __shfl_sync(0xffffffffu, sn[kk / 2], src);
          rope_rotate(x[kk][e], x[kk + KS / 2][e], c, sv, x[kk][e], x[kk + KS / 2][e]);
        }
      if (late_writer) {
        // rope_kv_row's stores: the rotated key back into k, both rows into the cache, before this warp
        // copies the key's step (in the loop below); __syncwarp orders the lanes' stores before it.
        const int64_t new_off = (static_cast<int64_t>(new_blk) * bs + (L - 1) % bs) * ldc + hoff;
        CT* const kc = static_cast<CT*>(rp.kc) + new_off;
        CT* const vc = static_cast<CT*>(rp.vc) + new_off;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
          const int f = lane + 32 * j;
          if (f < half) {
            float y1, y2;
            rope_rotate(nk[j][0], nk[j][1], cs[j], sn[j], y1, y2);
            kr[f] = y1;
            kr[f + half] = y2;
            kc[f] = from_f32<CT>(y1);
            kc[f + half] = from_f32<CT>(y2);
            vc[f] = from_f32<CT>(nv[j][0]);
            vc[f + half] = from_f32<CT>(nv[j][1]);
          }
        }
        __syncwarp();
      }
    }
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      qa[kk][0] = mma::pack_bf16(x[kk][0], x[kk][1]);
      qa[kk][1] = mma::pack_bf16(x[kk][2], x[kk][3]);
    }
  }
  float o[DT][2];  // row g's dims 8dt + 2t, +1 (the C fragment's c0, c1; c2, c3 are the empty rows)
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = 0.f;
  float m = -INFINITY, l = 0.f;
  // ldmatrix rows and chunks of this lane: K as the n-major B operand (keys × dims), V as the
  // k-major one (keys × dims, transposed on load).
  const int kn = (lane & 7) + ((lane >> 4) << 3), kcs = (lane >> 3) & 1;
  const int vn = (lane & 7) + ((lane >> 3) & 1) * 8, vcs = lane >> 4;

#pragma unroll 1
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<S - 1>();        // this step's group has landed (this lane's copies)
    __syncwarp();                  // and every lane's
    const int stage = i % S;
    const CT* ks = sm + stage * 2 * ROWS;
    const CT* vs = ks + ROWS;
    const int j0 = k0 + (s0 + i * sw) * kMmaStreamKeys;
    // S = Q·Kᵀ for keys j0 .. j0+15: two n tiles, the even and odd k-steps in separate
    // accumulators (two chains of KS/2 mmas each), added at the end.
    float s[2][2][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) s[a][h2][0] = s[a][h2][1] = s[a][h2][2] = s[a][h2][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const int c = 2 * kk + kcs;
      uint32_t b[4];
      mma::ldsm_x4(ks + kn * D + 8 * (c ^ (kn & 7)), b[0], b[1], b[2], b[3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) b[i] = as_bf16x2(b[i], static_cast<CT*>(nullptr));
      const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
      mma::mma_bf16(s[kk & 1][0], a, b[0], b[1]);
      mma::mma_bf16(s[kk & 1][1], a, b[2], b[3]);
    }
    // Row g's scores: keys j0 + 8·h2 + 2t + e. Key j0 is valid, so every row's max is finite.
    float p[2][2];
    float mx = -INFINITY;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = j0 + 8 * h2 + 2 * t + e;
        p[h2][e] = j < k1 ? (s[0][h2][e] + s[1][h2][e]) * scale_log2 : -INFINITY;
        mx = fmaxf(mx, p[h2][e]);
      }
    mx = quad_max(mx);
    const float m_new = fmaxf(m, mx);
    const float corr = exp2f(m - m_new);  // 0 at the first step (m = −inf)
    float sum = 0.f;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[h2][e] = exp2f(p[h2][e] - m_new);
        sum += p[h2][e];
      }
    l = l * corr + sum;  // this thread's keys; the quad is summed at the end
    m = m_new;
    const uint32_t pa[4] = {mma::pack_bf16(p[0][0], p[0][1]), 0u, mma::pack_bf16(p[1][0], p[1][1]), 0u};
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      const int c = 2 * dp + vcs;
      uint32_t b[4];
      mma::ldsm_x4_t(vs + vn * D + 8 * (c ^ (vn & 7)), b[0], b[1], b[2], b[3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) b[i] = as_bf16x2(b[i], static_cast<CT*>(nullptr));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float c4[4] = {o[2 * dp + h][0] * corr, o[2 * dp + h][1] * corr, 0.f, 0.f};
        mma::mma_bf16(c4, pa, b[2 * h], b[2 * h + 1]);
        o[2 * dp + h][0] = c4[0];
        o[2 * dp + h][1] = c4[1];
      }
    }
    __syncwarp();  // every lane's ldmatrix of this stage is done before it is refilled
    if (i + S < mine) issue(s0 + (i + S) * sw, stage);
    cp_async_commit();
  }
  l = quad_sum(l);
  if (share) {
    // The warps' partials (o, m, l of the 8 rows of their tile) into shared memory over the stages
    // (each warp's region of 8·D + 16 floats fits in its own ring), then warp 0 merges them in warp
    // order: M = max m_w, l = Σ l_w·2^(m_w − M), o = Σ o_w·2^(m_w − M). A warp without steps has
    // m = −inf, l = o = 0 and adds nothing; warp 0 always has step 0, so M is finite.
    constexpr int RW = 8 * D + 16;  // floats of a warp's region
    static_assert(RW * 4 <= mma_stream_warp_bytes(D, S), "a warp's partials fit in its ring");
    __syncthreads();  // every warp's last ldmatrix is done: the rings are free
    float* red = reinterpret_cast<float*>(mma_stream_smem);
    float* mine_r = red + warp * RW;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(mine_r + g * D + 8 * dt + 2 * t) = make_float2(o[dt][0], o[dt][1]);
    if (t == 0) {
      mine_r[8 * D + g] = m;
      mine_r[8 * D + 8 + g] = l;
    }
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY;
    for (int w = 0; w < warps; ++w) M = fmaxf(M, red[w * RW + 8 * D + g]);
    float Ls = 0.f;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = 0.f;
    for (int w = 0; w < warps; ++w) {
      const float* rw = red + w * RW;
      const float c = exp2f(rw[8 * D + g] - M);
      Ls = fmaf(rw[8 * D + 8 + g], c, Ls);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const float2 v = *reinterpret_cast<const float2*>(rw + g * D + 8 * dt + 2 * t);
        o[dt][0] = fmaf(v.x, c, o[dt][0]);
        o[dt][1] = fmaf(v.y, c, o[dt][1]);
      }
    }
    m = M;
    l = Ls;
  }
  // pack (the o projection's bf16 operand, [rows, kv_heads·G·D] contiguous): each output also rounded
  // to bf16 as pack_rows4 rounds it (round to nearest even).
  const int64_t ldp = static_cast<int64_t>(kv_heads) * G * D;
  if (ns == 1) {
    if (g < G) {
      const int64_t col = static_cast<int64_t>(kvh * G + g) * D + 2 * t;
      float* dst = out + r * ldo + col;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const float a = o[dt][0] / l, b = o[dt][1] / l;
        dst[8 * dt] = a;
        dst[8 * dt + 1] = b;
        if (pack)
          *reinterpret_cast<__nv_bfloat162*>(pack + r * ldp + col + 8 * dt) = __floats2bfloat162_rn(a, b);
      }
    }
    return;
  }
  const int64_t pair = r * kv_heads + kvh;
  const int UF = mma_unit_floats(G, D);
  float* wu = ws + (pair * splits + unit) * UF;
  if (g < G) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(wu + g * D + 8 * dt + 2 * t) = make_float2(o[dt][0], o[dt][1]);
    if (t == 0) {
      wu[G * D + g] = m;
      wu[G * D + 8 + g] = l;
    }
  }
  __threadfence();
  __syncwarp();
  unsigned prev = 0;
  if (lane == 0) prev = atomicAdd(&counters[pair], 1u);
  prev = __shfl_sync(0xffffffffu, prev, 0);
  if (prev != static_cast<unsigned>(ns - 1)) return;
  __threadfence();
  if (lane == 0) counters[pair] = 0;  // ready for the next launch
  // The last unit merges units 0..ns−1: per head the maximum M and the sum Σ l_u·2^(m_u − M) over
  // the units (lanes over units, then the fixed xor tree), then acc = Σ_u acc_u·2^(m_u − M) in unit
  // order (lanes over dims), all G heads' loads of a unit issued together. The first round issues,
  // together, what does not wait on M: the maxima and sums of the lane's unit (u = lane) and the
  // partials of unit 0 (a second unit's too would spill registers). The order depends on the row's
  // unit count only, so not on which unit finished last.
  const float* wp = ws + pair * splits * UF;
  auto load_unit = [&](int u, float(&x)[8][VEC]) {
    const float* src = wp + u * UF + lane * VEC;
#pragma unroll
    for (int gg = 0; gg < 8; ++gg) {
      if (gg < G) {
        if constexpr (VEC == 4) {
          const float4 f = __ldcg(reinterpret_cast<const float4*>(src + gg * D));
          x[gg][0] = f.x, x[gg][1] = f.y, x[gg][2] = f.z, x[gg][3] = f.w;
        } else {
          const float2 f = __ldcg(reinterpret_cast<const float2*>(src + gg * D));
          x[gg][0] = f.x, x[gg][1] = f.y;
        }
      }
    }
  };
  float acc[8][VEC];
#pragma unroll
  for (int gg = 0; gg < 8; ++gg)
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[gg][v] = 0.f;
  // acc += x·w_u for the unit u0 + i (its weight from lane i).
  auto add_unit = [&](const float(&x)[8][VEC], const float(&wl)[8], int i) {
#pragma unroll
    for (int gg = 0; gg < 8; ++gg) {
      if (gg < G) {  // G is the same in every lane
        const float w = __shfl_sync(0xffffffffu, wl[gg], i);
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[gg][v] = fmaf(x[gg][v], w, acc[gg][v]);
      }
    }
  };
  float mu[8], lu[8];  // unit `lane`'s maxima and sums
  float x0[8][VEC] = {};
#pragma unroll
  for (int gg = 0; gg < 8; ++gg) {
    mu[gg] = -INFINITY;
    lu[gg] = 0.f;
    if (gg < G && lane < ns) {
      mu[gg] = __ldcg(wp + lane * UF + G * D + gg);
      lu[gg] = __ldcg(wp + lane * UF + G * D + 8 + gg);
    }
  }
  load_unit(0, x0);
  float M[8], Ls[8];
#pragma unroll
  for (int gg = 0; gg < 8; ++gg) M[gg] = mu[gg], Ls[gg] = 0.f;
  for (int u = lane + 32; u < ns; u += 32) {
#pragma unroll
    for (int gg = 0; gg < 8; ++gg)
      if (gg < G) M[gg] = fmaxf(M[gg], __ldcg(wp + u * UF + G * D + gg));
  }
#pragma unroll
  for (int gg = 0; gg < 8; ++gg) M[gg] = warp_max(M[gg]);
  for (int u0 = 0; u0 < ns; u0 += 32) {
    const int u = u0 + lane;
    float wl[8];
#pragma unroll
    for (int gg = 0; gg < 8; ++gg) {
      wl[gg] = 0.f;
      if (gg < G && u < ns) {
        const float mg = u0 == 0 ? mu[gg] : __ldcg(wp + u * UF + G * D + gg);
        const float lg = u0 == 0 ? lu[gg] : __ldcg(wp + u * UF + G * D + 8 + gg);
        wl[gg] = exp2f(mg - M[gg]);
        Ls[gg] = fmaf(lg, wl[gg], Ls[gg]);
      }
    }
    int i = 0;
    if (u0 == 0) {
      add_unit(x0, wl, 0);
      i = 1;
    }
    const int cnt = min(32, ns - u0);
#pragma unroll 2
    for (; i < cnt; ++i) {
      float x[8][VEC] = {};
      load_unit(u0 + i, x);
      add_unit(x, wl, i);
    }
  }
  float* orow = out + r * ldo + static_cast<int64_t>(kvh) * G * D + lane * VEC;
  __nv_bfloat16* prow = pack ? pack + r * ldp + static_cast<int64_t>(kvh) * G * D + lane * VEC : nullptr;
#pragma unroll
  for (int gg = 0; gg < 8; ++gg) {
    const float den = warp_sum(Ls[gg]);
    if (gg < G) {
      float y[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        y[v] = acc[gg][v] / den;
        orow[gg * D + v] = y[v];
      }
      if (prow) {
#pragma unroll
        for (int v = 0; v < VEC; v += 2)
          *reinterpret_cast<__nv_bfloat162*>(prow + gg * D + v) = __floats2bfloat162_rn(y[v], y[v + 1]);
      }
    }
  }
}

// ---- One-row GEMV streamed by bulk copies (VV_CUDA_GEMV_BULK, sm_90) --------------------------
// One block per SM (at most), 8 warps, over a DecodeGemv's jobs; its stages take at most 104 KB, so a
// block of the next launch fits beside it and starts its own copies while this one finishes (PDL). A job's
// weight rows are contiguous, so a tile of TR rows (TR row pairs with the SwiGLU pairing: rows n.. and I +
// n..) is one copy (two): thread 0 streams a block's tiles (a balanced contiguous run of the jobs' tiles)
// through `stages` shared-memory stages with cp.async.bulk, each stage completing an mbarrier; the first
// stages are issued before the PDL wait. Thread t holds the activation's chunks t, t + 256, ... (8 floats
// each, XC of them; with the norm prologue, x · inv · norm_w rounded as the other GEMV rounds it) in
// registers and sums w·act over those chunks of each row of the tile in chunk order (the tile's rows
// interleaved, so their chains overlap); then each warp's xor tree, then the 8 warps' sums in warp
// order. XC and TR follow from K alone, and so does a row's sum: a row gets the same bits alone, in
// a fused launch, or paired. After the barrier that ends a tile's reads, thread 0 refills its stage
// with the tile `stages` further on, and threads 0..rows-1 finish the tile's rows (bias, residual,
// SwiGLU as decode_gemv_kernel does).
using dec::bulk_tile_rows;
using dec::bulk_xc;
using dec::kBulkFusedMaxXc;
using dec::kBulkMaxRows;
using dec::kBulkMaxStages;
using dec::kBulkMaxXc;
using dec::kBulkThreads;
constexpr size_t kBulkStageBudget = 104 * 1024;  // two blocks an SM (228 KB of shared memory)

// The stages' bytes: kBulkStageBudget, or VV_CUDA_GEMV_BULK_KB (32 to 220) KB (more in flight, but the
// next launch's block no longer fits beside this one above ~110). Read once.
size_t bulk_budget() {
  static const size_t b = [] {
    const char* e = std::getenv("VV_CUDA_GEMV_BULK_KB");
    return e ? static_cast<size_t>(std::clamp(std::atoi(e), 32, 220)) * 1024 : kBulkStageBudget;
  }();
  return b;
}

// Whether g runs on the bulk kernel (its XC in *xc): DecodeGemv::bulk, 16-bit weights with contiguous
// rows, K a multiple of 8 up to the form's bound, 16-byte aligned rows and activation.
bool bulk_takes(const DecodeGemv& g, int* xc) {
  if (!g.bulk || (g.wt != DType::kBF16 && g.wt != DType::kF16) || g.K <= 0 || g.K % 8 != 0 || g.count < 1)
    return false;
  const bool fused = g.norm_w != nullptr || g.silu_out != nullptr;
  if (g.K > int64_t{kBulkThreads} * 8 * (fused ? kBulkFusedMaxXc : kBulkMaxXc)) return false;
  if (reinterpret_cast<uintptr_t>(g.x) % 16 != 0) return false;
  if (g.swiglu_in &&
      (fused || g.swiglu_act == nullptr || reinterpret_cast<uintptr_t>(g.swiglu_in) % 16 != 0 ||
       reinterpret_cast<uintptr_t>(g.swiglu_act) % 16 != 0))
    return false;
  if (g.silu_out && (g.count != 1 || g.j[0].N % 2 != 0)) return false;
  for (int i = 0; i < g.count; ++i)
    if (g.j[i].ldw != g.K || g.j[i].N < 1 || reinterpret_cast<uintptr_t>(g.j[i].w) % 16 != 0) return false;
  *xc = bulk_xc(g.K);
  return true;
}

template <typename WT, int XC, bool kNorm, bool kPair, bool kSilu>
__global__ void __launch_bounds__(kBulkThreads, 1)
    decode_gemv_bulk_kernel(const DecodeGemv g, int stages, uint32_t stride, int64_t tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int TR = bulk_tile_rows(XC, kPair);
  constexpr int SR = kPair ? 2 * TR : TR;  // weight rows a stage
  static_assert(SR <= kBulkMaxRows, "a stage's rows");
  extern __shared__ __align__(128) unsigned char bulk_smem[];
  const uint32_t base = mma::smem_addr(bulk_smem);
  const uint32_t bars = base + static_cast<uint32_t>(stages) * stride;
  float* red =
      reinterpret_cast<float*>(bulk_smem + static_cast<size_t>(stages) * stride + 8 * kBulkMaxStages);
  float* nred = red + 2 * 8 * kBulkMaxRows;  // rms_inv's 16 floats
  const int tid = threadIdx.x;
  const int64_t K = g.K;
  const int64_t t0 = tiles * blockIdx.x / gridDim.x, t1 = tiles * (blockIdx.x + 1) / gridDim.x;
  const size_t row_bytes = static_cast<size_t>(K) * sizeof(WT);
  // Tile t: its job, its first job row (pair) and its rows.
  auto locate = [&](int64_t t, int& jx, int64_t& n0, int& rows) {
    jx = 0;
#pragma unroll
    for (int q = 1; q < kMaxDecodeJobs; ++q)
      if (q < g.count && t >= g.j[q].task_begin) jx = q;
    n0 = (t - g.j[jx].task_begin) * TR;
    const int64_t nr = kPair ? g.j[jx].N / 2 : g.j[jx].N;
    rows = static_cast<int>(nr - n0 < TR ? nr - n0 : TR);
  };
  auto issue = [&](int st, int64_t t) {
    int jx, rows;
    int64_t n0;
    locate(t, jx, n0, rows);
    const uint32_t bytes = static_cast<uint32_t>(row_bytes * static_cast<size_t>(rows));
    const uint32_t bar = bars + 8 * st, dst = base + static_cast<uint32_t>(st) * stride;
    const WT* wj = static_cast<const WT*>(g.j[jx].w);
    mbar::expect_tx(bar, kPair ? 2 * bytes : bytes);
    mbar::bulk_copy(dst, wj + n0 * K, bytes, bar);
    if constexpr (kPair) {
      mbar::bulk_copy(dst + static_cast<uint32_t>(row_bytes * TR), wj + (g.j[jx].N / 2 + n0) * K, bytes, bar);
    }
  };
  if (tid == 0) {
    for (int st = 0; st < stages; ++st) mbar::init1(bars + 8 * st);
    mbar::fence_init();
    // The weights do not depend on the previous kernel: in flight before the wait.
    for (int st = 0; st < stages && t0 + st < t1; ++st) issue(st, t0 + st);
  }
  __syncthreads();
  pdl_wait();
  float inv = 0.f;
  if constexpr (kNorm) {
    inv = rms_inv(g.x, K, g.eps, nred);
    if (blockIdx.x == 0) {
      for (int64_t c = tid; c < K; c += kBulkThreads) g.norm_out[c] = (g.x[c] * inv) * g.norm_w[c];
    }
  }
  float xr[XC][8];
  dec::bulk_load_act<XC, kNorm, kSilu, false>(g, inv, xr);
  pdl_trigger();
  for (int64_t t = t0; t < t1; ++t) {
    const int i = static_cast<int>(t - t0), st = i % stages;
    const uint32_t phase = static_cast<uint32_t>(i / stages) & 1u;
    mbar::wait(bars + 8 * st, phase);
    int jx, rows;
    int64_t n0;
    locate(t, jx, n0, rows);
    const WT* sw = reinterpret_cast<const WT*>(bulk_smem + static_cast<size_t>(st) * stride);
    float* rb = red + (i & 1) * 8 * kBulkMaxRows;
    float acc[SR];
    dec::bulk_tile_sums<WT, XC, SR, TR>(sw, K, rows, xr, acc);
    dec::bulk_store_sums<SR>(rb, acc);
    __syncthreads();  // the stage is read and the warps' sums are in rb
    if (tid == 0 && t + stages < t1) issue(st, t + stages);
    if (tid < rows) dec::bulk_finish_row<kPair, false>(g.j[jx], g.silu_out, n0, rb, tid, TR);
  }
#endif
}

template <typename WT, int XC, bool kNorm, bool kPair, bool kSilu = false>
void launch_bulk(DecodeGemv g, cudaStream_t s) {
  constexpr int TR = bulk_tile_rows(XC, kPair), SR = kPair ? 2 * TR : TR;
  auto* kern = decode_gemv_bulk_kernel<WT, XC, kNorm, kPair, kSilu>;
  int64_t tiles = 0;
  for (int i = 0; i < g.count; ++i) {
    g.j[i].task_begin = tiles;
    tiles += ((kPair ? g.j[i].N / 2 : g.j[i].N) + TR - 1) / TR;
  }
  const uint32_t stride =
      static_cast<uint32_t>((static_cast<size_t>(g.K) * sizeof(WT) * SR + 127) / 128 * 128);
  const int stages = static_cast<int>(std::clamp<size_t>(bulk_budget() / stride, 2, kBulkMaxStages));
  // stages, kBulkMaxStages mbarriers, the warps' row sums [2][8][kBulkMaxRows], rms_inv's 16 floats
  const size_t smem =
      static_cast<size_t>(stages) * stride + 8 * kBulkMaxStages + (2 * 8 * kBulkMaxRows + 16) * sizeof(float);
  allow_dynamic_smem(kern, smem);
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(tiles, g.sms));
  launch_pdl(kern, dim3(static_cast<unsigned>(grid)), kBulkThreads, smem, s, g, stages, stride, tiles);
}

template <typename WT, bool kNorm, bool kPair>
void dispatch_bulk_xc(const DecodeGemv& g, int xc, cudaStream_t s) {
  switch (xc) {
    case 1:
      return launch_bulk<WT, 1, kNorm, kPair>(g, s);
    case 2:
      return launch_bulk<WT, 2, kNorm, kPair>(g, s);
    case 4:
      return launch_bulk<WT, 4, kNorm, kPair>(g, s);
    default:
      if constexpr (!kNorm && !kPair) {
        if (xc == 8) return launch_bulk<WT, 8, false, false>(g, s);
        return launch_bulk<WT, 12, false, false>(g, s);
      }
  }
}

template <typename WT>
void dispatch_bulk(const DecodeGemv& g, int xc, cudaStream_t s) {
  if (g.swiglu_in) {  // the SwiGLU prologue (neither norm nor pairing)
    switch (xc) {
      case 1:
        return launch_bulk<WT, 1, false, false, true>(g, s);
      case 2:
        return launch_bulk<WT, 2, false, false, true>(g, s);
      case 4:
        return launch_bulk<WT, 4, false, false, true>(g, s);
      case 8:
        return launch_bulk<WT, 8, false, false, true>(g, s);
      default:
        return launch_bulk<WT, 12, false, false, true>(g, s);
    }
  }
  const bool norm = g.norm_w != nullptr, pair = g.silu_out != nullptr;
  if (norm && pair) return dispatch_bulk_xc<WT, true, true>(g, xc, s);
  if (norm) return dispatch_bulk_xc<WT, true, false>(g, xc, s);
  if (pair) return dispatch_bulk_xc<WT, false, true>(g, xc, s);
  dispatch_bulk_xc<WT, false, false>(g, xc, s);
}

constexpr int kPrefetchThreads = 128;
constexpr size_t kPrefetchPiece = 16 * 1024;  // bytes per cp.async.bulk.prefetch

// One piece of kPrefetchPiece bytes (the last one shorter) per thread, grid-stride.
__global__ void __launch_bounds__(kPrefetchThreads)
    l2_prefetch_kernel(const char* __restrict__ p, size_t bytes, bool after_wait) {
  pdl_trigger();
  if (after_wait) pdl_wait();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const size_t pieces = (bytes + kPrefetchPiece - 1) / kPrefetchPiece;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kPrefetchThreads + threadIdx.x; i < pieces;
       i += static_cast<size_t>(gridDim.x) * kPrefetchThreads) {
    const size_t off = i * kPrefetchPiece;
    const unsigned len = static_cast<unsigned>(bytes - off < kPrefetchPiece ? bytes - off : kPrefetchPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(len) : "memory");
  }
#endif
  if (!after_wait) pdl_wait();
}

}  // namespace

bool decode_gemv_bulk_takes(const DecodeGemv& g) {
  int xc = 0;
  return bulk_takes(g, &xc);
}

void l2_prefetch(const void* p, size_t bytes, bool after_wait, int sms, cudaStream_t s) {
  bytes &= ~static_cast<size_t>(15);
  if (bytes == 0 || reinterpret_cast<uintptr_t>(p) % 16 != 0) return;
  const size_t pieces = (bytes + kPrefetchPiece - 1) / kPrefetchPiece;
  const size_t grid = std::min<size_t>((pieces + kPrefetchThreads - 1) / kPrefetchThreads,
                                       static_cast<size_t>(std::max(sms, 1)));
  launch_pdl(l2_prefetch_kernel, static_cast<unsigned>(grid), kPrefetchThreads, s,
             static_cast<const char*>(p), bytes, after_wait);
}

bool decode_gemv_fits(const Tensor& a, const Tensor& w) {
  if (a.dtype != DType::kF32 || a.rows() != 1 || a.cols() % 8 != 0 || a.cols() == 0) return false;
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16) return false;
  if (w.cols() != a.cols() || w.row_stride() % 8 != 0) return false;
  return reinterpret_cast<uintptr_t>(a.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

bool decode_gemv_balances(const DecodeGemv& g) {
  int64_t tasks = 0;
  for (int i = 0; i < g.count; ++i) tasks += g.j[i].N;
  return balances(g, tasks);
}

bool decode_gemv_pairs(const DecodeGemv& g) {
  int64_t tasks = 0;
  for (int i = 0; i < g.count; ++i) tasks += g.j[i].N;
  int xc = 0;
  return !bulk_takes(g, &xc) && pairs(g, tasks);
}

void decode_gemv(DecodeGemv g, cudaStream_t s) {
  int xc = 0;
  if (bulk_takes(g, &xc)) {
    if (g.wt == DType::kF16) {
      dispatch_bulk<__half>(g, xc, s);
    } else {
      dispatch_bulk<__nv_bfloat16>(g, xc, s);
    }
    return;
  }
  int64_t tasks = 0;
  for (int i = 0; i < g.count; ++i) {
    g.j[i].task_begin = tasks;
    tasks += g.silu_out ? g.j[i].N / 2 : g.j[i].N;
  }
  if (tasks == 0) return;
  switch (g.wt) {
    case DType::kBF16:
      dispatch_gemv<__nv_bfloat16>(g, tasks, s);
      break;
    case DType::kF16:
      dispatch_gemv<__half>(g, tasks, s);
      break;
    default:
      dispatch_gemv<float>(g, tasks, s);
      break;
  }
}

PagedKv paged_kv(const AttentionRows& rows, const KvLayer& cache) {
  PagedKv kv;
  kv.row_seq = rows.row_seq.ptr<const int32_t>();
  kv.tables = rows.block_tables.ptr<const int32_t>();
  kv.ldt = rows.block_tables.row_stride();
  kv.bs = rows.block_size;
  kv.kc = cache.k.data;
  kv.vc = cache.v.data;
  kv.ldc = cache.k.row_stride();
  kv.ct = cache.k.dtype;
  return kv;
}

RopeKvArgs rope_kv_args(Tensor& q, Tensor& k, const Tensor& v, const Tensor& pos, int q_heads,
                        const float* inv_freq, const AttentionRows& rows, KvLayer& cache,
                        const AttentionShape& shape) {
  RopeKvArgs a;
  a.q = q.ptr<float>();
  a.ldq = q.row_stride();
  a.k = k.ptr<float>();
  a.ldk = k.row_stride();
  a.v = v.ptr<const float>();
  a.ldv = v.row_stride();
  a.pos = pos.ptr<const int32_t>();
  a.inv_freq = inv_freq;
  a.R = q.rows();
  a.qh = q_heads;
  a.kh = shape.kv_heads;
  a.D = shape.head_dim;
  a.kv = paged_kv(rows, cache);
  return a;
}

void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& pos, int q_heads,
                   const float* inv_freq, const AttentionRows& rows, KvLayer& cache,
                   const AttentionShape& shape, cudaStream_t s) {
  const RopeKvArgs a = rope_kv_args(q, k, v, pos, q_heads, inv_freq, rows, cache, shape);
  const int64_t n = a.R * (a.qh + a.kh) * (a.D / 2);
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  switch (a.kv.ct) {
    case DType::kBF16:
      launch_pdl(rope_kv_kernel<__nv_bfloat16>, grid, 256, s, a);
      break;
    case DType::kF16:
      launch_pdl(rope_kv_kernel<__half>, grid, 256, s, a);
      break;
    default:
      launch_pdl(rope_kv_kernel<float>, grid, 256, s, a);
      break;
  }
}

size_t decode_argmax_ws_bytes(int64_t rows) {
  // Each part's best (value, index) and its log-sum-exp pair (logprob only).
  return static_cast<size_t>(std::max<int64_t>(rows, 1)) * kArgMaxParts *
         (3 * sizeof(float) + sizeof(int32_t));
}

ArgmaxPlan plan_argmax(int64_t rows, int64_t V, int64_t elem_bytes, int64_t ld, bool aligned, int sms) {
  ArgmaxPlan p;
  if (rows < 1 || V < 1) return p;
  // About four blocks an SM in all, a slice of at least 1,024 elements, at most kArgMaxParts a row.
  const int64_t want = (4 * static_cast<int64_t>(std::max(sms, 1)) + rows - 1) / rows;
  const int64_t most = std::max<int64_t>((V + 1023) / 1024, 1);
  p.vec =
      aligned && 16 % elem_bytes == 0 && ld % (16 / elem_bytes) == 0 ? static_cast<int>(16 / elem_bytes) : 1;
  const int64_t parts = std::clamp<int64_t>(std::min(want, most), 1, kArgMaxParts);
  p.len = ((V + parts - 1) / parts + p.vec - 1) / p.vec * p.vec;
  p.parts = static_cast<int>((V + p.len - 1) / p.len);
  return p;
}

template <bool kLp>
static void decode_argmax_as(const Tensor& logits, Tensor& out, void* ws, int sms, cudaStream_t s,
                             float* logprob) {
  const int64_t R = logits.rows(), V = logits.cols();
  if (R == 0) return;
  const int64_t eb = logits.dtype == DType::kF32 ? 4 : 2;
  // kLp: a row's slices as for one row, whatever the row count, so that its logprob's sums keep one order
  // (a row's value does not depend on the rows beside it).
  const ArgmaxPlan p = plan_argmax(kLp ? 1 : R, V, eb, logits.row_stride(),
                                   reinterpret_cast<uintptr_t>(logits.data) % 16 == 0, sms);
  if (p.parts == 0) return;
  float* wsv = static_cast<float*>(ws);
  int32_t* wsi = reinterpret_cast<int32_t*>(wsv + R * p.parts);
  float* wsm = reinterpret_cast<float*>(wsi + R * p.parts);
  float* wss = wsm + R * p.parts;
  const dim3 grid(static_cast<unsigned>(p.parts), static_cast<unsigned>(R));
  auto go = [&](auto kern, const auto* l) {
    launch_pdl(kern, grid, kArgThreads, 0, s, l, logits.row_stride(), V, p.len, p.parts, wsv, wsi, wsm, wss);
  };
  switch (logits.dtype) {
    case DType::kBF16: {
      const auto* l = static_cast<const __nv_bfloat16*>(logits.data);
      p.vec == 8 ? go(argmax_part_kernel<__nv_bfloat16, 8, kLp>, l)
                 : go(argmax_part_kernel<__nv_bfloat16, 1, kLp>, l);
      break;
    }
    case DType::kF16: {
      const auto* l = static_cast<const __half*>(logits.data);
      p.vec == 8 ? go(argmax_part_kernel<__half, 8, kLp>, l) : go(argmax_part_kernel<__half, 1, kLp>, l);
      break;
    }
    default: {
      const float* l = logits.ptr<const float>();
      p.vec == 4 ? go(argmax_part_kernel<float, 4, kLp>, l) : go(argmax_part_kernel<float, 1, kLp>, l);
      break;
    }
  }
  launch_pdl(argmax_final_kernel<kLp>, static_cast<unsigned>((R + 3) / 4), 128, s,
             static_cast<const float*>(wsv), static_cast<const int32_t*>(wsi), static_cast<const float*>(wsm),
             static_cast<const float*>(wss), R, p.parts, out.ptr<int32_t>(), logprob);
}

void decode_argmax(const Tensor& logits, Tensor& out, void* ws, int sms, cudaStream_t s, float* logprob) {
  if (logprob) {
    decode_argmax_as<true>(logits, out, ws, sms, s, logprob);
  } else {
    decode_argmax_as<false>(logits, out, ws, sms, s, nullptr);
  }
}

DecodeAttentionPlan plan_decode_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape,
                                          int sms, bool one_wave, size_t smem_limit) {
  DecodeAttentionPlan p;
  const int G = shape.kv_heads > 0 ? shape.heads / shape.kv_heads : 0;
  if (n < 1 || n > kDecodeAttentionMaxRows || G < 1 || G > kAttnMaxG || shape.head_dim > kAttnMaxHeadDim ||
      shape.head_dim % 4 != 0 || shape.heads % shape.kv_heads != 0)
    return p;
  const int64_t max_keys = std::max<int64_t>(rows.block_tables.cols() * rows.block_size, 1);
  // Splits of one round (64 keys), more keys per split when the context is long, so that at most
  // 256 splits need merging.
  int64_t chunk = kAttnRound;
  if (max_keys > 256 * chunk) chunk = ((max_keys + 255) / 256 + kAttnRound - 1) / kAttnRound * kAttnRound;
  const int64_t pairs = n * shape.kv_heads;
  const int64_t D = shape.head_dim;
  auto splits_of = [&](int64_t c) { return (max_keys + c - 1) / c; };
  auto pstride_of = [&](int64_t c) { return (std::max<int64_t>(c, splits_of(c)) + 31) / 32 * 32; };
  auto smem_of = [&](int64_t c) {
    return static_cast<size_t>(G * D * (1 + kAttnWarps) + G * pstride_of(c)) * sizeof(float) +
           static_cast<size_t>(c) * sizeof(int64_t);
  };
  if (one_wave && n == 1 && sms >= pairs) {  // about one block a SM: whole rounds a split
    const int64_t per_pair = std::max<int64_t>(1, sms / pairs);
    const int64_t keys = (max_keys + per_pair - 1) / per_pair;
    int64_t c = std::max<int64_t>(chunk, (keys + kAttnRound - 1) / kAttnRound * kAttnRound);
    while (c > chunk && smem_of(c) > smem_limit) c -= kAttnRound;  // within the block's shared memory
    chunk = c;
  }
  p.use = true;
  p.chunk = static_cast<int>(chunk);
  p.splits = static_cast<int>(splits_of(chunk));
  p.pstride = static_cast<int>(pstride_of(chunk));
  p.ws_floats = p.splits > 1 ? static_cast<size_t>(pairs * p.splits * G * (D + 2)) : 0;
  p.counters = p.splits > 1 ? static_cast<size_t>(pairs) : 0;
  p.smem = smem_of(chunk);
  return p;
}

DecodeAttnArgs decode_attn_args(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                                const AttentionShape& shape, Tensor& out, const DecodeAttentionPlan& p,
                                float* ws, unsigned* counters, bool lean, bool wide_merge) {
  DecodeAttnArgs a;
  a.q = q.ptr<const float>();
  a.ldq = q.row_stride();
  a.row_pos = rows.row_pos.ptr<const int32_t>();
  a.kv = paged_kv(rows, cache);
  a.n = q.rows();
  a.heads = shape.heads;
  a.kv_heads = shape.kv_heads;
  a.D = static_cast<int>(shape.head_dim);
  a.scale = shape.scale;
  a.chunk = p.chunk;
  a.pstride = p.pstride;
  a.splits = p.splits;
  a.out = out.ptr<float>();
  a.ldo = out.row_stride();
  a.ws = ws;
  a.counters = counters;
  a.lean = lean;
  a.wide_merge = wide_merge;
  a.smem = p.smem;
  return a;
}

void decode_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                      const AttentionShape& shape, Tensor& out, const DecodeAttentionPlan& p, float* ws,
                      unsigned* counters, bool lean, cudaStream_t s, const DecodeRope* rope,
                      bool wide_merge) {
  const int64_t n = q.rows();
  if (n == 0) return;
  DecodeAttnArgs a = decode_attn_args(q, rows, cache, shape, out, p, ws, counters, lean, wide_merge);
  if (rope) a.rope = *rope;
  const bool fused = a.rope.inv_freq != nullptr, pre = fused && a.rope.pre;
  const bool stamp = pre && a.rope.stamp_recs != nullptr, xpose = pre && a.rope.xpose;
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(shape.kv_heads),
                  static_cast<unsigned>(n));
  auto go = [&](auto* kern) {
    allow_dynamic_smem(kern, p.smem);  // what this launch needs (the plan keeps it within the device's)
    launch_pdl(kern, grid, kAttnThreads, p.smem, s, a);
  };
  switch (a.kv.ct) {
    case DType::kBF16:
      if (xpose && a.rope.early_merge && a.rope.pipe && !stamp && p.chunk > kAttnRound) {
        go(decode_attn_pipe_kernel<__nv_bfloat16>);
      } else if (xpose && a.rope.early_merge) {
        stamp ? go(decode_attn_xpose_kernel<__nv_bfloat16, true, true>)
              : go(decode_attn_xpose_kernel<__nv_bfloat16, false, true>);
      } else if (xpose) {
        stamp ? go(decode_attn_xpose_kernel<__nv_bfloat16, true>)
              : go(decode_attn_xpose_kernel<__nv_bfloat16, false>);
      } else {
        stamp   ? go(decode_attn_kernel<__nv_bfloat16, true, true, true>)
        : pre   ? go(decode_attn_kernel<__nv_bfloat16, true, true>)
        : fused ? go(decode_attn_kernel<__nv_bfloat16, true>)
                : go(decode_attn_kernel<__nv_bfloat16, false>);
      }
      break;
    case DType::kF16:
      pre     ? go(decode_attn_kernel<__half, true, true>)
      : fused ? go(decode_attn_kernel<__half, true>)
              : go(decode_attn_kernel<__half, false>);
      break;
    default:
      pre     ? go(decode_attn_kernel<float, true, true>)
      : fused ? go(decode_attn_kernel<float, true>)
              : go(decode_attn_kernel<float, false>);
      break;
  }
}

namespace {

struct StampSink {
  int device = -1;
  AttnStamp* recs = nullptr;
  unsigned* count = nullptr;
  unsigned cap = 0;
};
StampSink& stamp_sink_slot() {
  static StampSink s;
  return s;
}

}  // namespace

bool attn_stamp_sink(AttnStamp** recs, unsigned** count, unsigned* cap) {
  StampSink& s = stamp_sink_slot();
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (s.recs && dev != s.device) {  // one device's blocks only: another device's backend stamps nothing
    *recs = nullptr;
    *count = nullptr;
    *cap = 0;
    return true;
  }
  if (!s.recs) {
    constexpr unsigned kCap = 32768;
    void* r = nullptr;
    void* c = nullptr;
    if (cudaMalloc(&r, sizeof(AttnStamp) * kCap) != cudaSuccess ||
        cudaMalloc(&c, sizeof(unsigned)) != cudaSuccess ||
        cudaMemset(c, 0, sizeof(unsigned)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      cudaFree(r);
      cudaFree(c);
      (void)cudaGetLastError();
      return false;
    }
    s.device = dev;
    s.recs = static_cast<AttnStamp*>(r);
    s.count = static_cast<unsigned*>(c);
    s.cap = kCap;
  }
  *recs = s.recs;
  *count = s.count;
  *cap = s.cap;
  return true;
}

std::vector<AttnStamp> attn_stamps_take() {
  StampSink& s = stamp_sink_slot();
  std::vector<AttnStamp> out;
  unsigned n = 0;
  if (!s.recs || cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(&n, s.count, sizeof n, cudaMemcpyDeviceToHost) != cudaSuccess)
    return out;
  out.resize(std::min(n, s.cap));
  if (!out.empty() &&
      cudaMemcpy(out.data(), s.recs, sizeof(AttnStamp) * out.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
    out.clear();
  (void)cudaMemset(s.count, 0, sizeof(unsigned));
  (void)cudaDeviceSynchronize();
  return out;
}

namespace {

MmaDecodeConfig& mma_config_slot() {
  static MmaDecodeConfig c = mma_decode_config_from_env();
  return c;
}

}  // namespace

MmaDecodeConfig mma_decode_config_from_env() {
  MmaDecodeConfig d;
  auto num = [](const char* name, std::initializer_list<int> ok, int& v) {
    const char* e = std::getenv(name);
    if (!e) return;
    const int x = std::atoi(e);
    for (int o : ok)
      if (x == o) v = x;
  };
  if (const char* e = std::getenv("VV_CUDA_MMA_DECODE")) {
    if (std::string(e) == "regs") d.stream = false;
    if (std::string(e) == "stream") d.stream = true;
  }
  if (const char* e = std::getenv("VV_CUDA_MMA_DECODE_SHARE"); e && std::string(e) == "0") {
    d.share = false;  // a unit a warp, at that form's own chunk
    d.chunk = kMmaDecodeChunk;
  }
  num("VV_CUDA_MMA_DECODE_STAGES", {2, 4}, d.stages);
  num("VV_CUDA_MMA_DECODE_WARPS", {1, 2, 4}, d.warps);
  num("VV_CUDA_MMA_DECODE_CHUNK", {64, 128, 256, 512, 1024}, d.chunk);
  if (const char* e = std::getenv("VV_CUDA_MMA_DECODE_HEADS")) d.heads = std::string(e) == "1";
  if (const char* e = std::getenv("VV_CUDA_MMA_DECODE_SHARE_MIN_PAIRS")) {  // digits only, else ignored
    char* end = nullptr;
    const long x = std::strtol(e, &end, 10);
    if (*e >= '0' && *e <= '9' && end && *end == '\0' && x <= 65536) d.share_min_pairs = static_cast<int>(x);
  }
  return d;
}

bool mma_decode_env_set() {
  for (const char* v : {"VV_CUDA_MMA_DECODE", "VV_CUDA_MMA_DECODE_SHARE", "VV_CUDA_MMA_DECODE_STAGES",
                        "VV_CUDA_MMA_DECODE_WARPS", "VV_CUDA_MMA_DECODE_CHUNK", "VV_CUDA_MMA_DECODE_HEADS",
                        "VV_CUDA_MMA_DECODE_SHARE_MIN_PAIRS"})
    if (std::getenv(v)) return true;
  return false;
}

namespace {

// Launches the stream kernel for S stages (a block's shared memory: warps × S stages of K and V).
template <typename CT, int D, int S>
void launch_mma_stream(cudaLaunchConfig_t cfg, int warps, const Tensor& q, const AttentionRows& rows,
                       const CT* kc, const CT* vc, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out, const MmaDecodePlan& p, float scale_log2, float* ws, unsigned* counters,
                       void* pack, const DecodeRope& rope) {
  auto* kern = mma_decode_stream_kernel<CT, D, S>;
  // share: one unit a block, its steps over the block's warps. heads: 4 warps a block, 4 / kv_heads
  // units of every kv head (kv_heads ≤ 4 dividing 4).
  const bool share = p.share;
  const bool heads = !share && p.cfg.heads && shape.kv_heads <= 4 && 4 % shape.kv_heads == 0;
  const int upb = share ? 1 : heads ? 4 / static_cast<int>(shape.kv_heads) : warps;  // units a block
  if (heads) {
    warps = 4;
    cfg.gridDim.y = 1;
  }
  cfg.gridDim.x = static_cast<unsigned>((p.splits + upb - 1) / upb);
  cfg.blockDim = dim3(static_cast<unsigned>(warps * 32));
  cfg.dynamicSmemBytes = static_cast<size_t>(warps) * mma_stream_warp_bytes(D, S);
  // What this launch's warps need (64 KB at 4 warps, D 128, S 2), and the largest shared-memory
  // carveout (a hint: so that 3 blocks of 64 KB fit on an SM; the kernel reads K and V past L1, only q
  // and the block table go through it).
  allow_dynamic_smem(kern, cfg.dynamicSmemBytes, /*max_carveout=*/true);
  cudaLaunchKernelEx(&cfg, kern, q.ptr<const float>(), q.row_stride(), rows.row_seq.ptr<const int32_t>(),
                     rows.row_pos.ptr<const int32_t>(), rows.block_tables.ptr<const int32_t>(),
                     rows.block_tables.row_stride(), rows.block_size, kc, vc, cache.k.row_stride(),
                     shape.kv_heads, shape.heads / shape.kv_heads, scale_log2, p.chunk, p.splits,
                     out.ptr<float>(), out.row_stride(), ws, counters, heads, share,
                     static_cast<__nv_bfloat16*>(pack), rope);
}

}  // namespace

MmaDecodeConfig mma_decode_config() {
  return mma_config_slot();
}

void set_mma_decode_config(const MmaDecodeConfig& c) {
  MmaDecodeConfig v = mma_config_slot();
  v.stream = c.stream;
  if (c.stages == 2 || c.stages == 4) v.stages = c.stages;
  if (c.warps == 1 || c.warps == 2 || c.warps == 4) v.warps = c.warps;
  if (c.chunk == 64 || c.chunk == 128 || c.chunk == 256 || c.chunk == 512 || c.chunk == 1024)
    v.chunk = c.chunk;
  v.heads = c.heads;
  v.share = c.share;
  if (c.share_min_pairs >= 0 && c.share_min_pairs <= 65536) v.share_min_pairs = c.share_min_pairs;
  mma_config_slot() = v;
}

MmaDecodePlan plan_mma_decode_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape,
                                        bool row_invariant, const MmaDecodeConfig* cfg) {
  MmaDecodePlan p;
  if (n < 1 || n > kDecodeAttentionMaxRows ||
      !mma_decode_applies(shape.heads, shape.kv_heads, shape.head_dim))
    return p;
  const int G = shape.heads / shape.kv_heads;
  const int64_t max_keys = std::max<int64_t>(rows.block_tables.cols() * rows.block_size, 1);
  // Units of the configured chunk (kMmaDecodeShareChunk by default); past 256 units (131,072 keys of
  // table width at 512) wider units, in steps of 64 keys, bound the workspace (then a row's units
  // depend on the table width).
  const MmaDecodeConfig& mc = cfg ? *cfg : mma_config_slot();
  p.cfg = mc;
  const int64_t pairs = n * shape.kv_heads;
  p.share = mc.stream && mc.share;
  int64_t chunk = mc.chunk;
  if (p.share && !row_invariant && pairs < mc.share_min_pairs) {  // too few pairs: a unit a warp
    p.share = false;
    chunk = kMmaDecodeChunk;
  }
  if (max_keys > 256 * chunk) chunk = ((max_keys + 255) / 256 + 63) / 64 * 64;
  p.use = true;
  p.chunk = static_cast<int>(chunk);
  p.splits = static_cast<int>((max_keys + chunk - 1) / chunk);
  p.ws_floats = p.splits > 1 ? static_cast<size_t>(pairs * p.splits * mma_unit_floats(G, shape.head_dim)) : 0;
  p.counters = p.splits > 1 ? static_cast<size_t>(pairs) : 0;
  return p;
}

void mma_decode_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                          const AttentionShape& shape, Tensor& out, const MmaDecodePlan& p, float* ws,
                          unsigned* counters, cudaStream_t s, void* pack, const DecodeRope* rope) {
  const int64_t n = q.rows();
  if (n == 0) return;
  const DecodeRope rp = rope ? *rope : DecodeRope{};
  const MmaDecodeConfig& mc = p.cfg;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((p.splits + kMmaDecWarps - 1) / kMmaDecWarps),
                     static_cast<unsigned>(shape.kv_heads), static_cast<unsigned>(n));
  cfg.blockDim = dim3(kMmaDecWarps * 32);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  const int G = shape.heads / shape.kv_heads;
  const float scale_log2 = shape.scale * 1.4426950408889634f;
  auto go = [&](auto* kc, auto* vc, auto dtag) {
    using CT = std::remove_const_t<std::remove_pointer_t<decltype(kc)>>;
    constexpr int D = decltype(dtag)::value;
    if (mc.stream) {
      if (mc.stages == 4) {
        launch_mma_stream<CT, D, 4>(cfg, mc.warps, q, rows, kc, vc, cache, shape, out, p, scale_log2, ws,
                                    counters, pack, rp);
      } else {
        launch_mma_stream<CT, D, 2>(cfg, mc.warps, q, rows, kc, vc, cache, shape, out, p, scale_log2, ws,
                                    counters, pack, rp);
      }
      return;
    }
    cudaLaunchKernelEx(&cfg, mma_decode_kernel<CT, D>, q.ptr<const float>(), q.row_stride(),
                       rows.row_seq.ptr<const int32_t>(), rows.row_pos.ptr<const int32_t>(),
                       rows.block_tables.ptr<const int32_t>(), rows.block_tables.row_stride(),
                       rows.block_size, kc, vc, cache.k.row_stride(), shape.kv_heads, G, scale_log2, p.chunk,
                       p.splits, out.ptr<float>(), out.row_stride(), ws, counters);
  };
  auto by_d = [&](auto* kc, auto* vc) {
    if (shape.head_dim == 64) {
      go(kc, vc, std::integral_constant<int, 64>{});
    } else {
      go(kc, vc, std::integral_constant<int, 128>{});
    }
  };
  if (cache.k.dtype == DType::kBF16) {
    by_d(static_cast<const __nv_bfloat16*>(cache.k.data), static_cast<const __nv_bfloat16*>(cache.v.data));
  } else {
    by_d(static_cast<const __half*>(cache.k.data), static_cast<const __half*>(cache.v.data));
  }
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("VV_CUDA_PDL");
    if (e && std::string(e) == "0") return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return on;
}

}  // namespace vv::cuda
