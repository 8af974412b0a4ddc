// The weight-streaming GEMM of stream_gemm.cuh. A block: 4 warps; a unit is 128 weight rows (32 per
// warp: two 16-row mma tiles) × 64 of K, against all rows of a (16·NT, zero-padded). The weight is
// the mma's A operand and a's rows its N (swap-AB: few rows of a fill the 8-wide side, not the
// 16-high one). Each unit's weight rows and the matching columns of a come in with cp.async into
// rows padded to 72 elements (ldmatrix's eight row addresses on distinct banks); S units are in
// flight while the warps work on the oldest. A block walks its contiguous run of units, and at the
// end of a tile (or of its run) writes the tile's sums: plainly when it covered all of K, with f32
// atomics when the tile is shared.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_attr.h"
#include "kernels/cuda/stream_gemm.cuh"
#include "kernels/cuda/stream_gemm_plan.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace vv::cuda {
namespace {

using mma::cp_async16_zfill;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldsm_a;
using mma::ldsm_b_nmajor;
using mma::mma_bf16;

constexpr int kThreads = 128;
constexpr int kBN = 128;      // weight rows (output columns) per unit
constexpr int kBK = 64;       // K per unit
constexpr int kLD = kBK + 8;  // shared-memory row stride in elements (144 bytes)
constexpr int kBlocksPerSm = 2;

__host__ __device__ constexpr int stages_for(int NT) {
  return NT >= 8 ? 3 : 4;
}
constexpr size_t smem_bytes(int NT) {
  return static_cast<size_t>(stages_for(NT)) * (kBN + 16 * NT) * kLD * sizeof(__nv_bfloat16);
}

using stream_plan::block_of;
using stream_plan::every_segment_slot;
using stream_plan::segment_end;
using stream_plan::segment_slot;
using stream_plan::unit_begin;

template <int NT>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    stream_gemm_kernel(const __nv_bfloat16* __restrict__ a, int M, int K, const __nv_bfloat16* __restrict__ w,
                       int64_t ldw, int N, int ksteps, int64_t units, const float* __restrict__ bias,
                       int accumulate, float* __restrict__ out, int64_t ldo) {
  constexpr int S = stages_for(NT);
  constexpr int XR = 16 * NT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Ws = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // S × [kBN][kLD]
  __nv_bfloat16* Xs = Ws + S * kBN * kLD;                          // S × [XR][kLD]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t u0 = unit_begin(blockIdx.x, gridDim.x, units),
                u1 = unit_begin(blockIdx.x + 1, gridDim.x, units);

  // 16-byte chunks (K % 8 == 0, so a chunk is all in or all out); zeros past N, M and K.
  auto load_w = [&](int stage, int64_t u) {
    const int n0 = static_cast<int>(u / ksteps) * kBN, k0 = static_cast<int>(u % ksteps) * kBK;
    __nv_bfloat16* dst = Ws + stage * kBN * kLD;
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, k = k0 + (c & 7) * 8;
      const bool valid = n0 + r < N && k < K;
      cp_async16_zfill(dst + r * kLD + (c & 7) * 8, valid ? w + static_cast<int64_t>(n0 + r) * ldw + k : w,
                       valid);
    }
  };
  auto load_x = [&](int stage, int64_t u) {
    const int k0 = static_cast<int>(u % ksteps) * kBK;
    __nv_bfloat16* dst = Xs + stage * XR * kLD;
#pragma unroll
    for (int i = 0; i < XR * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, k = k0 + (c & 7) * 8;
      const bool valid = r < M && k < K;
      cp_async16_zfill(dst + r * kLD + (c & 7) * 8, valid ? a + static_cast<int64_t>(r) * K + k : a, valid);
    }
  };

  // The weights do not depend on the previous kernel: start streaming them before waiting for it.
#pragma unroll
  for (int st = 0; st < S - 1; ++st)
    if (u0 + st < u1) load_w(st, u0 + st);
  pdl_wait();
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (u0 + st < u1) load_x(st, u0 + st);
    cp_async_commit();  // empty groups too: the wait below counts groups
  }
  pdl_trigger();

  float acc[2][2 * NT][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 2 * NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

  int64_t seg = u0;  // first unit of the tile segment being summed
  for (int64_t u = u0; u < u1; ++u) {
    const int i = static_cast<int>(u - u0);
    cp_async_wait<S - 2>();  // unit u's group has landed (this thread's copies)...
    __syncthreads();         // ...and everyone's; and every warp is done with unit u - 1's stage
    if (u + S - 1 < u1) {
      const int st = (i + S - 1) % S;
      load_w(st, u + S - 1);
      load_x(st, u + S - 1);
    }
    cp_async_commit();
    const __nv_bfloat16* wst = Ws + (i % S) * kBN * kLD + warp * 32 * kLD;
    const __nv_bfloat16* xst = Xs + (i % S) * XR * kLD;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[2][4];
      ldsm_a(wst + kk, kLD, lane, af[0]);
      ldsm_a(wst + 16 * kLD + kk, kLD, lane, af[1]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t b0, b1, b2, b3;
        ldsm_b_nmajor(xst + 16 * j * kLD + kk, kLD, lane, b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(acc[mt][2 * j], af[mt], b0, b1);
          mma_bf16(acc[mt][2 * j + 1], af[mt], b2, b3);
        }
      }
    }
    if (u + 1 != u1 && (u + 1) % ksteps != 0) continue;
    // The end of a tile or of this block's run: write the segment [seg, u] of tile u / ksteps.
    // C fragment: c0, c1 at (weight row g, a rows 2t, 2t + 1) of the 16 × 8 tile; c2, c3 at row g + 8.
    const bool first = seg % ksteps == 0;               // holds k = 0: adds the bias
    const bool whole = first && (u + 1) % ksteps == 0;  // all of K: no other block touches the tile
    const int nb = static_cast<int>(u / ksteps) * kBN + warp * 32;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = nb + mt * 16 + g + 8 * h;
        if (n >= N) continue;
        const float bv = first && bias ? bias[n] : 0.f;
#pragma unroll
        for (int nt = 0; nt < 2 * NT; ++nt) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int m = nt * 8 + 2 * t4 + j;
            if (m >= M) continue;
            float* o = out + static_cast<int64_t>(m) * ldo + n;
            const float v = acc[mt][nt][2 * h + j] + bv;
            if (whole) {
              *o = accumulate ? *o + v : v;
            } else {
              atomicAdd(o, v);
            }
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2 * NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    seg = u + 1;
  }
  cp_async_wait<0>();
}

// ---- The Hopper form (sm_90a): TMA loads into 128-byte-swizzled stages, wgmma from shared memory --
// A block is one warpgroup. A unit's 128 weight rows are two m64 wgmma A operands, a's rows (16·NT
// of them, the TMA box; rows past M read as zeros) the B operand with N = 16·NT. Each stage has an
// mbarrier that the TMA completes (both boxes' bytes); thread 0 refills a stage once every warp has
// passed the barrier after reading it. Accumulator fragment (PTX, wgmma m64nNk16 f32): thread t of
// the warpgroup, warp w = t/32, g = lane/4, q = lane%4: d[4j + r] at row 16w + g + 8·(r/2), column
// 8j + 2q + r%2.
// WG warpgroups per block share each stage's rows of a; a unit is 128·WG weight rows (one TMA box),
// each warpgroup computing 128 of them. Two warpgroups (one block per SM) read a's rows from L2 half
// as often per weight byte as one (two blocks per SM): at 64-128 rows those re-reads, not the HBM
// stream, bound the one-warpgroup form (H200: ~5.6 TB/s of L2-to-SM traffic at its limit).
constexpr size_t kWgBudget = 220 * 1024;  // dynamic shared memory per SM for the blocks of one SM
template <int NT, int WG>
__host__ __device__ constexpr int wg_stages() {
  const int stage = (128 * WG + 16 * NT) * 128;
  const int fit = static_cast<int>((kWgBudget / (2 / WG) - 1088) / stage);
  return fit < 8 ? fit : 8;
}
template <int NT, int WG>
constexpr size_t wg_smem_bytes() {
  // the stages (1,024-aligned), their mbarriers, and 1,024 bytes of slack to align the base
  return static_cast<size_t>(wg_stages<NT, WG>()) * (128 * WG + 16 * NT) * 128 + 64 + 1024;
}

// flags (non-accumulating calls with shared tiles; else null): one int per tile, zero at entry. The
// segment holding a shared tile's last K step stores its sums plainly and then raises the flag; the
// tile's other segments wait for it and add theirs atomically. That segment opens its block's run, so
// it is done early, and the waits (at the ends of the other blocks' runs) rarely spin.
template <int NT, int WG>
__global__ void __launch_bounds__(128 * WG, 2 / WG)
    stream_gemm_wg_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                          int M, int N, int ksteps, int64_t units, const float* __restrict__ bias,
                          int accumulate, float* __restrict__ out, int64_t ldo, int* __restrict__ flags) {
#ifdef VV_WGMMA
  constexpr int S = wg_stages<NT, WG>();
  constexpr int XR = 16 * NT, BN = 128 * WG;
  constexpr uint32_t kWBytes = BN * 128, kXBytes = XR * 128, kStage = kWBytes + kXBytes;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;  // stage s: W at base + s·kStage, X after it
  const uint32_t bars = base + S * kStage;      // S mbarriers, 8 bytes each
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2,
            q = lane & 3;
  const int64_t u0 = unit_begin(blockIdx.x, gridDim.x, units),
                u1 = unit_begin(blockIdx.x + 1, gridDim.x, units);

  auto tma = [&](uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
  };
  auto expect = [&](int st) { mbar::expect_tx(bars + 8 * st, kStage); };
  auto load_w = [&](int st, int64_t u) {
    tma(base + st * kStage, &wmap, static_cast<int>(u % ksteps) * kBK, static_cast<int>(u / ksteps) * BN,
        bars + 8 * st);
  };
  auto load_x = [&](int st, int64_t u) {
    tma(base + st * kStage + kWBytes, &xmap, static_cast<int>(u % ksteps) * kBK, 0, bars + 8 * st);
  };

  if (tid == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&xmap)) : "memory");
    for (int st = 0; st < S; ++st) mbar::init1(bars + 8 * st);
    mbar::fence_init();
    // The weights do not depend on the previous kernel: start streaming them before waiting for it.
    for (int st = 0; st < S && u0 + st < u1; ++st) {
      expect(st);
      load_w(st, u0 + st);
    }
  }
  __syncthreads();
  pdl_wait();
  if (tid == 0) {
    for (int st = 0; st < S && u0 + st < u1; ++st) load_x(st, u0 + st);
  }
  pdl_trigger();

  constexpr int R = 8 * NT;  // accumulator floats per thread per 64-row half
  float acc[2][R];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < R; ++e) acc[h][e] = 0.f;

  int64_t seg = u0;
  for (int64_t u = u0; u < u1; ++u) {
    const int i = static_cast<int>(u - u0), st = i % S;
    const uint32_t phase = static_cast<uint32_t>(i / S) & 1u;
    mbar::wait(bars + 8 * st, phase);
    const uint32_t w_addr = base + st * kStage + wg * 128 * 128, x_addr = base + st * kStage + kWBytes;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < ((accumulate & 4) ? 0 : kBK / 16);
         ++kk) {  // 32 bytes of each 128-byte row per k16 step
      const uint64_t db = sw128_desc(x_addr + 32 * kk);
      wgmma_bf16<16 * NT>(acc[0], sw128_desc(w_addr + 32 * kk), db);
      wgmma_bf16<16 * NT>(acc[1], sw128_desc(w_addr + 64 * 128 + 32 * kk), db);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    __syncthreads();  // every warp is done reading stage st: refill it
    if (tid == 0 && u + S < u1) {
      expect(st);
      load_w(st, u + S);
      load_x(st, u + S);
    }
    if (u + 1 != u1 && (u + 1) % ksteps != 0) continue;
    const bool first = seg % ksteps == 0;
    const bool whole = first && (u + 1) % ksteps == 0;
    const int tile = static_cast<int>(u / ksteps);
    const int nb = tile * BN + 128 * wg + 16 * warp + g;
    // A shared tile of a non-accumulating call: its last segment stores, the others wait and add.
    const bool shared = !whole && flags && !(accumulate & 3);
    const bool finisher = shared && (u + 1) % ksteps == 0;
    if (shared && !finisher) {
      if (tid == 0) {
        while (*reinterpret_cast<volatile int*>(flags + tile) == 0) {
        }
        __threadfence();
      }
      __syncthreads();
    }
    // (the accumulators are read unconditionally: a read under a thread-dependent branch makes the
    // compiler serialize the wgmmas)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r2 = 0; r2 < 2; ++r2) {
        const int n = nb + 64 * h + 8 * r2;
        const bool n_ok = n < N;
        const float bv = first && bias && n_ok ? bias[n] : 0.f;
#pragma unroll
        for (int j = 0; j < 2 * NT; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int m = 8 * j + 2 * q + c;
            const float v = acc[h][4 * j + 2 * r2 + c] + bv;
            if (!n_ok || m >= M) continue;
            float* o = out + static_cast<int64_t>(m) * ldo + n;
            if (whole || finisher || (accumulate & 2)) {
              *o = (accumulate & 1) ? *o + v : v;
            } else {
              atomicAdd(o, v);
            }
          }
        }
      }
    }
    if (finisher) {
      __syncthreads();  // every thread's stores are issued...
      if (tid == 0) {
        __threadfence();  // ...and visible before the flag
        atomicExch(flags + tile, 1);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < R; ++e) acc[h][e] = 0.f;
    seg = u + 1;
  }
#else
  (void)wmap, (void)xmap, (void)M, (void)N, (void)ksteps, (void)units, (void)bias, (void)accumulate,
      (void)out, (void)ldo;
  __trap();
#endif
}

// ---- The warp-specialised Hopper form (VV_CUDA_STREAM_GEMM_KIND=ws) ------------------------------
// A block is two consumer warpgroups and a producer warpgroup (384 threads, one block per SM; the
// producer gives its registers to the consumers with setmaxnreg, and one of its threads issues every
// TMA). A unit is
// 256 weight rows × 64 of K (one TMA box, 32 KB) with a's 16·NT rows beside it; each consumer
// warpgroup multiplies 128 of the weight rows. Each stage has two mbarriers: `full` (the producer's
// one arrival with the stage's bytes, completed by the TMA) and `empty` (one arrival per consumer
// warpgroup once its wgmmas on the stage have retired). So the producer refills a stage as soon as
// both warpgroups are done with it, and a consumer keeps one unit's wgmmas in flight while it waits
// for the next (`wgmma.wait_group 1`); no block barrier in the loop.
// Units are split over the blocks in contiguous runs (stream-K), so each SM streams the same bytes.
// A tile covered by several blocks ("segments") is summed without atomics: each segment leaves its
// partial sums in its own workspace slot and counts itself in; the segment that counts last adds
// every segment's sums in block order (its own from registers), then the bias and the residual, and
// stores. So the bits depend only on the shape and the grid, never on timing.
constexpr int kWsBN = 256;       // weight rows a unit
constexpr int kWsThreads = 384;  // two consumer warpgroups + the producer warpgroup
constexpr size_t kWsBudget = 227 * 1024 - 1024 - 256;
template <int NT>
__host__ __device__ constexpr int ws_stages() {
  const int stage = (kWsBN + 16 * NT) * 128;
  const int fit = static_cast<int>(kWsBudget / stage);
  return fit < 8 ? fit : 8;
}
template <int NT>
constexpr size_t ws_smem_bytes() {
  // the stages (1,024-aligned), 2·S mbarriers, one int per consumer warpgroup, the trace's 8 words,
  // 1,024 bytes of slack
  return static_cast<size_t>(ws_stages<NT>()) * (kWsBN + 16 * NT) * 128 + 16 * 8 + 16 + 64 + 1024;
}
// VV_CUDA_STREAM_WS_TRACE=2: words a block leaves for one traced launch (globaltimer ns): consumer thread
// 0's entry, first stage landed, time waiting for stages, time in segment epilogues, end, segments;
// the producer's time after its first weight loads and after its PDL wait.
constexpr int kWsTraceWords = 8;
__device__ __forceinline__ uint64_t ws_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The floats of one consumer warpgroup's partial sums (its 128 weight rows × 16·NT rows of a).
template <int NT>
__host__ __device__ constexpr int64_t ws_slot_floats() {
  return 128 * 16 * NT;
}

// One GEMM of a warp-specialised launch: its operands' tensor maps, its shape, its split over the grid
// and where its sums go. A launch runs one (stream_gemm_ws_kernel) or two in a row
// (stream_gemm_mlp_kernel: gate_up with SwiGLU, then down).
// Passed as a __grid_constant__ kernel parameter, so that its fields are read from the parameter bank.
struct WsGemm {
  int M, N, ksteps;
  int64_t units, G;  // G: the runs (clusters) its units are cut into; clusters from G on sit it out
  const float* bias;
  int accumulate;
  void* out;
  int64_t ldo;
  float* ws;    // its partial sums' slots
  int* counts;  // its tiles' arrival counts
};

#ifdef VV_WGMMA
// The producer (warp 8, lane 0) of one GEMM: cluster gi's run of units, a stage each, the ring's
// position running on from the launch's unit i0 (an earlier GEMM of the launch had the units before).
// The weights of the first stages (up to all S) are issued before `gate`, which waits for what the rows
// of a depend on; their rows of a after it. Returns the ring position after this GEMM's units.
template <int NT, int CL, bool SWIGLU, typename Gate>
__device__ __forceinline__ int ws_produce(const WsGemm& p, const CUtensorMap* wmap, const CUtensorMap* xmap,
                                          int rank, int64_t gi, uint32_t base, uint32_t full, uint32_t empty,
                                          int i0, Gate gate) {
  constexpr int TILE = SWIGLU ? 128 : kWsBN;  // output columns a tile
  constexpr int S = ws_stages<NT>();
  constexpr int XR = 16 * NT, XPART = XR / CL;
  constexpr uint32_t kWBytes = kWsBN * 128, kStage = kWBytes + XR * 128;
  if (gi >= p.G) return i0;
  const int64_t u0 = unit_begin(gi, p.G, p.units), u1 = unit_begin(gi + 1, p.G, p.units);
  const int n = static_cast<int>(u1 - u0);
  auto load_w = [&](int i, int64_t u) {
    const int st = i % S;
    const int k0 = static_cast<int>(u % p.ksteps) * kBK,
              row = static_cast<int>((u / p.ksteps) * CL + rank) * TILE;
    mbar::tma_load_2d(base + st * kStage, wmap, k0, row, full + 8 * st);
    if constexpr (SWIGLU)
      mbar::tma_load_2d(base + st * kStage + 128 * 128, wmap, k0, p.N + row, full + 8 * st);
  };
  auto load_x = [&](int i, int64_t u) {
    const int st = i % S;
    const uint32_t dst = base + st * kStage + kWBytes + rank * XPART * 128;
    const int k0 = static_cast<int>(u % p.ksteps) * kBK;
    if constexpr (CL > 1) {
      mbar::tma_load_2d_multicast(dst, xmap, k0, rank * XPART, full + 8 * st, (1u << CL) - 1);
    } else {
      mbar::tma_load_2d(dst, xmap, k0, 0, full + 8 * st);
    }
  };
  // Every consumer of the cluster is done with the stage unit i takes (this CTA's weights, everyone's a).
  auto stage_free = [&](int i) {
    if (i >= S) mbar::wait_or_trap(empty + 8 * (i % S), static_cast<uint32_t>(i / S - 1) & 1u);
  };
  // (A stage's bytes: its weight box and every CTA's part of a's rows.)
  const int first = n < S ? n : S;
  for (int j = 0; j < first; ++j) {
    stage_free(i0 + j);
    mbar::expect_tx(full + 8 * ((i0 + j) % S), kStage);
    load_w(i0 + j, u0 + j);
  }
  gate();
  for (int j = 0; j < first; ++j) load_x(i0 + j, u0 + j);
  for (int j = S; j < n; ++j) {
    stage_free(i0 + j);
    mbar::expect_tx(full + 8 * ((i0 + j) % S), kStage);
    load_w(i0 + j, u0 + j);
    load_x(i0 + j, u0 + j);
  }
  return i0 + n;
}

// The consumers (warpgroup c takes weight rows [128c, 128c + 128) of each unit's tile) of one GEMM:
// cluster gi's run of units from the launch's ring position i0, segment by segment, each segment's
// sums left in the workspace, or added up and written by the segment that finishes its tile. With
// SWIGLU and `finished` given (the MLP launch): a tile's finisher counts itself in on *finished once its
// bf16 output is written and fenced for the async proxy (the next GEMM's TMA loads read it). tsm: the
// trace's words (tracer: thread 0 keeps them). Returns the ring position after this GEMM's units.
template <int NT, int CL, bool SWIGLU>
__device__ __forceinline__ int ws_consume(const WsGemm& p, int rank, int64_t gi, uint32_t base, uint32_t full,
                                          uint32_t empty, int i0, int* last_flag, unsigned long long* tsm,
                                          bool tracer, int* finished) {
  constexpr int TILE = SWIGLU ? 128 : kWsBN;  // output columns a tile
  constexpr int S = ws_stages<NT>();
  constexpr int XR = 16 * NT;
  constexpr uint32_t kWBytes = kWsBN * 128, kStage = kWBytes + XR * 128;
  constexpr int R = 8 * NT;  // accumulator floats per thread per 64-row half
  if (gi >= p.G) return i0;
  const int M = p.M, N = p.N, ksteps = p.ksteps;
  const int64_t G = p.G, units = p.units;
  const int64_t u0 = unit_begin(gi, G, units), u1 = unit_begin(gi + 1, G, units);
  const int tid = threadIdx.x, lane = tid & 31;
  const int c = tid >> 7, t = tid & 127, w4 = (tid >> 5) & 3, g = lane >> 2, q = lane & 3;
  // Stage st is free again in this CTA: tell every producer of the cluster (each writes its part
  // of a into it).
  auto release = [&](int st) {
    if (t != 0) return;
    if constexpr (CL > 1) {
#pragma unroll
      for (int r = 0; r < CL; ++r) mbar::arrive_cluster(empty + 8 * st, static_cast<uint32_t>(r));
    } else {
      mbar::arrive(empty + 8 * st);
    }
  };
  float acc[2][R];
  // Segment by segment: [seg, end) is one tile group's units within this cluster's run.
  for (int64_t seg = u0; seg < u1;) {
    if (tracer) {
      if (tsm[4]) tsm[3] += ws_now() - tsm[4];  // the segment before's epilogue
      ++tsm[5];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < R; ++e) acc[h][e] = 0.f;
    wgmma_fence_operands<R>(acc[0]);
    wgmma_fence_operands<R>(acc[1]);
    const int64_t end = segment_end(seg, u1, ksteps);
    for (int64_t u = seg; u < end; ++u) {
      const int i = i0 + static_cast<int>(u - u0), st = i % S;
      if (tracer) tsm[6] = ws_now();
      mbar::wait_or_trap(full + 8 * st, static_cast<uint32_t>(i / S) & 1u);
      if (tracer) {
        const uint64_t t1 = ws_now();
        tsm[2] += t1 - tsm[6];
        if (!tsm[1]) tsm[1] = t1;
      }
      const uint32_t w_addr = base + st * kStage + c * 128 * 128, x_addr = base + st * kStage + kWBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {  // 32 bytes of each 128-byte row per k16 step
        const uint64_t db = sw128_desc(x_addr + 32 * kk);
        wgmma_bf16<16 * NT>(acc[0], sw128_desc(w_addr + 32 * kk), db);
        wgmma_bf16<16 * NT>(acc[1], sw128_desc(w_addr + 64 * 128 + 32 * kk), db);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous unit's wgmmas have retired: its stage is free
      if (u > seg) release((i + S - 1) % S);
    }
    wgmma_wait<0>();
    release((i0 + static_cast<int>(end - 1 - u0)) % S);
    if (tracer) tsm[4] = ws_now();
    const int64_t u = end - 1;
    // The segment [seg, u] of this CTA's tile of group u / ksteps ends here. Its sums leave the
    // accumulators with the bias added (by the segment holding k = 0) in code every thread runs: a
    // read of a wgmma's registers under a thread-dependent branch makes the compiler serialize the
    // wgmmas.
    const int64_t group = u / ksteps, tile = group * CL + rank;
    const bool whole = seg % ksteps == 0 && (u + 1) % ksteps == 0;
    const int nb = static_cast<int>(tile) * TILE + (SWIGLU ? 0 : 128 * c) + 16 * w4 + g;
    float v[2][R];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r2 = 0; r2 < 2; ++r2) {
        const int n = nb + 64 * h + 8 * r2;
        const float bv = p.bias && seg % ksteps == 0 && n < N ? p.bias[n] : 0.f;
#pragma unroll
        for (int j = 0; j < 2 * NT; ++j)
#pragma unroll
          for (int cc = 0; cc < 2; ++cc) v[h][4 * j + 2 * r2 + cc] = acc[h][4 * j + 2 * r2 + cc] + bv;
      }
    wgmma_fence_operands<R>(v[0]);  // here, not sunk into the branches below
    wgmma_fence_operands<R>(v[1]);
    seg = end;
    // Chunk e / 4 of a thread's sums (four values, 4j..4j + 3 of a half) holds rows 8j..8j + 7 of a:
    // the chunks past M are padding, neither written nor read.
    const int chunks = (M + 7) / 8;
    // Leaves this warpgroup's sums in `mine` (a float4 a thread per chunk of four) and counts it in
    // on `counter`: true in the warpgroup whose arrival is the `arrivals`-th (which resets it).
    auto leave_and_count = [&](float* mine, int* counter, int arrivals) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < R; e += 4)
          if (e / 4 < chunks)
            __stcg(reinterpret_cast<float4*>(mine + (h * R + e) * 128),
                   make_float4(v[h][e], v[h][e + 1], v[h][e + 2], v[h][e + 3]));
      __threadfence();
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
      if (t == 0) {
        const bool last = atomicAdd(counter, 1) == arrivals - 1;
        if (last) *counter = 0;  // ready for the next launch
        last_flag[c] = last ? 1 : 0;
      }
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
      return last_flag[c] != 0;
    };
    if (tile * TILE >= N) continue;  // the last group's missing tile (an odd count): nothing to add
    if constexpr (SWIGLU) {
      // Both warpgroups' sums to the workspace (a slot for every segment, whole or not), counted in; the
      // last of the tile's 2 × segments adds them up and writes silu(g)·u.
      auto slot_of = [&](int64_t b, int cw) {
        return p.ws + ((every_segment_slot(b, group) * CL + rank) * 2 + cw) * ws_slot_floats<NT>() + 4 * t;
      };
      const int64_t b_first = block_of(group * ksteps, G, units),
                    b_last = block_of((group + 1) * ksteps - 1, G, units);
      if (!leave_and_count(slot_of(gi, c), p.counts + tile, static_cast<int>(2 * (b_last - b_first + 1))))
        continue;
      __threadfence();
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
      // Half by half, CJ chunks at a time, slot by slot: the group's gate and up sums of a slot loaded
      // at once (the chunks past M too: unwritten padding, added but never stored), so a slot costs one
      // trip to L2 a group, not one a chunk (a load under a runtime branch is not hoisted: each waited
      // for the one before). (Whole halves at once spilled at 64 and 128 rows.)
      constexpr int CJ = 2 * NT < 4 ? 2 * NT : 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j0 = 0; j0 < 2 * NT; j0 += CJ) {
          float4 gs[CJ], us[CJ];
          for (int64_t b = b_first; b <= b_last; ++b) {
            const float* pg = slot_of(b, 0) + (h * R + 4 * j0) * 128;
            const float* pu = slot_of(b, 1) + (h * R + 4 * j0) * 128;
            float4 lg[CJ], lu[CJ];
#pragma unroll
            for (int j = 0; j < CJ; ++j) {
              lg[j] = __ldcg(reinterpret_cast<const float4*>(pg + 4 * j * 128));
              lu[j] = __ldcg(reinterpret_cast<const float4*>(pu + 4 * j * 128));
            }
#pragma unroll
            for (int j = 0; j < CJ; ++j) {
              if (b == b_first) {
                gs[j] = lg[j], us[j] = lu[j];
              } else {
                gs[j].x += lg[j].x, gs[j].y += lg[j].y, gs[j].z += lg[j].z, gs[j].w += lg[j].w;
                us[j].x += lu[j].x, us[j].y += lu[j].y, us[j].z += lu[j].z, us[j].w += lu[j].w;
              }
            }
          }
#pragma unroll
          for (int j = 0; j < CJ; ++j) {  // the chunk of the four values 4(j0 + j)..+3 of half h
            const float ga[4] = {gs[j].x, gs[j].y, gs[j].z, gs[j].w};
            const float ua[4] = {us[j].x, us[j].y, us[j].z, us[j].w};
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int n = nb + 64 * h + 8 * (r >> 1), m = 8 * (j0 + j) + 2 * q + (r & 1);
              if (j0 + j >= chunks || n >= N || m >= M) continue;
              const float gv = __bfloat162float(__float2bfloat16(ga[r]));
              const float uv = __bfloat162float(__float2bfloat16(ua[r]));
              out[static_cast<int64_t>(m) * p.ldo + n] = __float2bfloat16(gv / (1.0f + expf(-gv)) * uv);
            }
          }
        }
      }
      if (finished) {
        // The tile's output is written: visible at gpu scope and to the async proxy (the next GEMM's
        // TMA loads), then counted in, once a tile.
        __threadfence();
        asm volatile("fence.proxy.async.global;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
        if (t == 0) atomicAdd(finished, 1);
      }
      continue;
    }
    float* out = static_cast<float*>(p.out);
    bool finish = whole;
    if (!whole) {
      // Cluster b's sums of this CTA's tile (a float4 a thread per chunk of four).
      auto slot_of = [&](int64_t b) {
        return p.ws +
               ((segment_slot(b, group, G, units, ksteps) * CL + rank) * 2 + c) * ws_slot_floats<NT>() +
               4 * t;
      };
      const int64_t b_first = block_of(group * ksteps, G, units),
                    b_last = block_of((group + 1) * ksteps - 1, G, units);
      finish = leave_and_count(slot_of(gi), p.counts + 2 * tile + c, static_cast<int>(b_last - b_first + 1));
      if (finish) {
        __threadfence();
        // Every segment's sums in cluster order, this one's too (from the workspace, so that the
        // order and the bits do not depend on which segment adds them up).
        // Slot by slot, each slot's address found once (segment_slot divides; chunk by chunk with
        // the slots inner was slower on the H100, session 22: o at 64 rows 100 µs against 57), and
        // all its chunks loaded at once (both halves up to 64 rows), the ones past M too (unwritten
        // padding, added but never stored): a load under a runtime branch is not hoisted, so each
        // chunk waited for the one before, one L2 trip a chunk.
        constexpr int HB = NT <= 4 ? 2 : 1;  // halves loaded at once (both: one trip a slot; 128 rows spill)
        for (int64_t b = b_first; b <= b_last; ++b) {
          const float* src = slot_of(b);
#pragma unroll
          for (int h0 = 0; h0 < 2; h0 += HB) {
            float4 pp[HB][R / 4];
#pragma unroll
            for (int hh = 0; hh < HB; ++hh)
#pragma unroll
              for (int e = 0; e < R; e += 4)
                pp[hh][e / 4] = __ldcg(reinterpret_cast<const float4*>(src + ((h0 + hh) * R + e) * 128));
#pragma unroll
            for (int hh = 0; hh < HB; ++hh)
#pragma unroll
              for (int e = 0; e < R; e += 4) {
                const float4 x = pp[hh][e / 4];
                float* vv = &v[h0 + hh][e];
                if (b == b_first) {
                  vv[0] = x.x, vv[1] = x.y, vv[2] = x.z, vv[3] = x.w;
                } else {
                  vv[0] += x.x, vv[1] += x.y, vv[2] += x.z, vv[3] += x.w;
                }
              }
          }
        }
      }
    }
    if (finish) {
      // Accumulating: a half's residual values are all loaded before its first store (a load after a
      // store to the same array is not hoisted above it: one trip to memory a value).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float res[R];
#pragma unroll
        for (int e = 0; e < R; ++e) {
          const int n = nb + 64 * h + 8 * ((e >> 1) & 1), m = 8 * (e >> 2) + 2 * q + (e & 1);
          res[e] = p.accumulate && n < N && m < M ? out[static_cast<int64_t>(m) * p.ldo + n] : 0.f;
        }
#pragma unroll
        for (int e = 0; e < R; ++e) {
          const int n = nb + 64 * h + 8 * ((e >> 1) & 1), m = 8 * (e >> 2) + 2 * q + (e & 1);
          if (n < N && m < M)
            out[static_cast<int64_t>(m) * p.ldo + n] = p.accumulate ? res[e] + v[h][e] : v[h][e];
        }
      }
    }
  }
  return i0 + static_cast<int>(u1 - u0);
}

// The shared memory a ws launch lays out (stage s: W at base + s·kStage, X after it; then the S full
// and S empty mbarriers, a flag a consumer warpgroup, the trace's words), its barriers initialised.
template <int NT>
struct WsSmem {
  uint32_t base, full, empty;
  int* last_flag;
  unsigned long long* tsm;
};
template <int NT, int CL>
__device__ __forceinline__ WsSmem<NT> ws_smem_setup(unsigned char* smem_raw) {
  constexpr int S = ws_stages<NT>();
  constexpr uint32_t kStage = (kWsBN + 16 * NT) * 128;
  WsSmem<NT> m;
  const uint32_t raw = smem_u32(smem_raw);
  m.base = (raw + 1023) & ~1023u;
  m.full = m.base + S * kStage;
  m.empty = m.full + 8 * S;
  m.last_flag = reinterpret_cast<int*>(smem_raw + (m.empty + 8 * S - raw));
  m.tsm = reinterpret_cast<unsigned long long*>(smem_raw + (m.empty + 8 * S + 16 - raw));
  if (threadIdx.x == 0) {
    for (int st = 0; st < S; ++st) {
      mbar::init1(m.full + 8 * st);
      mbar::init(m.empty + 8 * st, 2 * CL);  // both consumer warpgroups of every CTA of the cluster
    }
    mbar::fence_init();
  }
  if constexpr (CL > 1) {
    cluster_sync();  // every CTA's barriers exist before anyone arrives on them or copies into them
  } else {
    __syncthreads();
  }
  return m;
}

#endif  // VV_WGMMA

// SWIGLU: w is gate_up [2N, K] (gate rows, then up rows); a unit's tile is gate rows [128p, 128p + 128)
// (the first warpgroup's) and the same up rows (the second's), and the output is N columns of
// silu(g)·u in bf16 (g and u rounded to bf16 first, as the reference's bf16 run does): the down
// projection's operand. Every segment of such a tile leaves both warpgroups' sums in the workspace;
// the last of them to count in combines the two.
template <int NT, int CL, bool SWIGLU>
__global__ void __launch_bounds__(kWsThreads, 1)
    stream_gemm_ws_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap,
                          const __grid_constant__ WsGemm p, unsigned long long* __restrict__ trace) {
#ifdef VV_WGMMA
  static_assert((16 * NT / CL) % 8 == 0, "a CTA's part of a's rows: whole 8-row (1,024-byte) swizzle atoms");
  extern __shared__ unsigned char smem_raw[];
  const WsSmem<NT> sm = ws_smem_setup<NT, CL>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // A cluster (CL consecutive blocks) walks one run of units; its CTA of rank r takes tile CL·p + r of
  // each unit's tile group p, and loads part r of a's rows for all of them.
  const int rank = CL > 1 ? static_cast<int>(cluster_rank()) : 0;
  const int64_t gi = blockIdx.x / CL;
  if (warp >= 8) {  // ---- the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&xmap)) : "memory");
      // The weights do not depend on the previous kernel: the first stages' before waiting for it.
      ws_produce<NT, CL, SWIGLU>(p, &wmap, &xmap, rank, gi, sm.base, sm.full, sm.empty, 0, [&] {
        if (trace) trace[blockIdx.x * kWsTraceWords + 6] = ws_now();
        pdl_wait();
        if (trace) trace[blockIdx.x * kWsTraceWords + 7] = ws_now();
      });
    }
  } else {
    // ---- the consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    // VV_CUDA_STREAM_WS_TRACE=2 (trace given: one launch of a shape): thread 0's times (globaltimer ns):
    // tsm[0] entry, [1] first stage landed, [2] waiting for stages, [3] in epilogues, [4] this
    // epilogue's start, [5] segments.
    // (Not at 128 rows: the accumulators and the sums leave no registers for it; it spilled more.)
    const bool tracer = NT <= 4 && trace && tid == 0;
    unsigned long long* tsm = sm.tsm;
    if (tracer) {
      tsm[0] = ws_now();
      tsm[1] = tsm[2] = tsm[3] = tsm[4] = tsm[5] = 0;
    }
    pdl_wait();  // the epilogue reads `out` (accumulating) and the workspace the previous GEMM used
    pdl_trigger();
    ws_consume<NT, CL, SWIGLU>(p, rank, gi, sm.base, sm.full, sm.empty, 0, sm.last_flag, tsm, tracer,
                               nullptr);
    if (tracer) {
      const uint64_t t_end = ws_now();
      if (tsm[4]) tsm[3] += t_end - tsm[4];
      unsigned long long* tr = trace + blockIdx.x * kWsTraceWords;
      tr[0] = tsm[0], tr[1] = tsm[1], tr[2] = tsm[2], tr[3] = tsm[3], tr[4] = t_end, tr[5] = tsm[5];
    }
  }
  // No CTA leaves while another of its cluster may still copy into it or arrive on its barriers.
  if constexpr (CL > 1) cluster_sync();
#else
  (void)wmap, (void)xmap, (void)p, (void)trace;
  __trap();
#endif
}

// The MLP in one launch (VV_CUDA_STREAM_WS_MLP=1): gate_up with SwiGLU (up: the SWIGLU form's GEMM, its
// bf16 output h), then down from h (down: accumulating into the residual, no bias), every block one
// after the other on one ring of stages (clusters of one). Down's weights need nothing of gate_up, so a
// block's producer issues down's first stages while its consumers finish gate_up and other blocks
// still stream; only their rows of h wait, at a grid-wide count of gate_up's finished tiles
// (gate[0]; gate[1] counts the producers that passed it, and the last resets both). Each GEMM keeps
// its own split (its G), so the bits are those of the two launches one after the other. The count
// needs every block of the grid resident at once: one block an SM, grid ≤ SMs.
template <int NT>
__global__ void __launch_bounds__(kWsThreads, 1)
    stream_gemm_mlp_kernel(const __grid_constant__ CUtensorMap w1map,
                           const __grid_constant__ CUtensorMap x1map,
                           const __grid_constant__ CUtensorMap w2map,
                           const __grid_constant__ CUtensorMap x2map, const __grid_constant__ WsGemm up,
                           const __grid_constant__ WsGemm down, int up_tiles, int* __restrict__ gate) {
#ifdef VV_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const WsSmem<NT> sm = ws_smem_setup<NT, 1>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t gi = blockIdx.x;
  if (warp >= 8) {  // ---- the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 8 && lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&w1map)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x1map)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&w2map)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x2map)) : "memory");
      const int i = ws_produce<NT, 1, true>(up, &w1map, &x1map, 0, gi, sm.base, sm.full, sm.empty, 0,
                                            [] { pdl_wait(); });
      ws_produce<NT, 1, false>(down, &w2map, &x2map, 0, gi, sm.base, sm.full, sm.empty, i, [&] {
        // h is whole once every tile of gate_up has counted in (each after a gpu-scope and an async-proxy
        // fence of its stores).
        uint64_t t0 = 0;
        for (int spins = 0;; ++spins) {
          int n;
          asm volatile("ld.acquire.gpu.b32 %0, [%1];\n" : "=r"(n) : "l"(gate) : "memory");
          if (n >= up_tiles) break;
          if (spins == 64) t0 = ws_now();
          if (spins > 64) {
            __nanosleep(64);
            if (ws_now() - t0 > 2000000000ull) __trap();  // 2 s: a block that never ran (not resident)
          }
        }
        if (atomicAdd(gate + 1, 1) == static_cast<int>(down.G) - 1) {  // the last producer to pass
          gate[0] = 0;  // ready for the next launch: every other waiter has read its count
          gate[1] = 0;
        }
        asm volatile("fence.proxy.async.global;\n" ::: "memory");  // h's rows through TMA from here
      });
    }
  } else {
    // ---- the consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    pdl_wait();  // gate_up's a and down's residual are the previous kernels'
    pdl_trigger();
    const int i =
        ws_consume<NT, 1, true>(up, 0, gi, sm.base, sm.full, sm.empty, 0, sm.last_flag, nullptr, false, gate);
    ws_consume<NT, 1, false>(down, 0, gi, sm.base, sm.full, sm.empty, i, sm.last_flag, nullptr, false,
                             nullptr);
  }
#else
  (void)w1map, (void)x1map, (void)w2map, (void)x2map, (void)up, (void)down, (void)up_tiles, (void)gate;
  __trap();
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2-D bf16 map over [rows, cols] (row stride ld elements) with a box of 64 columns × box_rows rows,
// 128-byte swizzle, zeros outside.
bool encode_map(CUtensorMap* m, const void* p, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  auto fn = encode_fn();
  if (!fn) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  return fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, estr,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct Geometry {
  int ksteps;
  int64_t units;
  int grid;
  int split;  // block boundaries inside a tile (0: every tile is one block's)
};
// Units of `bn` weight rows × 64 of K over `per_sm` blocks per SM.
Geometry geometry(int64_t N, int64_t K, int sms, int bn, int per_sm) {
  Geometry g;
  g.ksteps = static_cast<int>((K + kBK - 1) / kBK);
  g.units = (N + bn - 1) / bn * g.ksteps;
  g.grid = static_cast<int>(std::min<int64_t>(g.units, int64_t{per_sm} * std::max(sms, 1)));
  g.split = 0;
  for (int b = 1; b < g.grid; ++b) g.split += unit_begin(b, g.grid, g.units) % g.ksteps != 0;
  return g;
}

template <int NT>
void launch(const __nv_bfloat16* a, int M, int K, const __nv_bfloat16* w, int64_t ldw, int N,
            const float* bias, bool accumulate, float* out, int64_t ldo, const Geometry& geo,
            cudaStream_t s) {
  auto* kern = stream_gemm_kernel<NT>;
  allow_dynamic_smem(stream_gemm_kernel<NT>, smem_bytes(NT), /*max_carveout=*/true);
  launch_pdl(kern, dim3(static_cast<unsigned>(geo.grid)), kThreads, smem_bytes(NT), s, a, M, K, w, ldw, N,
             geo.ksteps, geo.units, bias, accumulate ? 1 : 0, out, ldo);
}

// VV_CUDA_STREAM_PROBE (a measurement knob; results are wrong with it): 2 = plain stores instead of
// atomics, 4 = no wgmma, 6 = both.
int probe_bits() {
  static const int probe = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_PROBE");
    return e ? (std::atoi(e) & 6) : 0;
  }();
  return probe;
}

template <int NT, int WG>
bool launch_wg(const void* a, int M, int K, const void* w, int64_t ldw, int N, const float* bias,
               bool accumulate, float* out, int64_t ldo, int sms, int* flags, size_t flag_count,
               cudaStream_t s) {
  CUtensorMap wmap, xmap;
  if (!encode_map(&wmap, w, N, K, ldw, 128 * WG) || !encode_map(&xmap, a, M, K, K, 16 * NT)) return false;
  const Geometry geo = geometry(N, K, sms, 128 * WG, 2 / WG);
  const int64_t tiles = (N + 128 * WG - 1) / (128 * WG);
  int* f = nullptr;
  if (!accumulate && geo.split > 0) {
    if (flags && static_cast<size_t>(tiles) <= flag_count) {
      f = flags;
      cudaMemsetAsync(flags, 0, static_cast<size_t>(tiles) * sizeof(int), s);
    } else {
      cudaMemset2DAsync(out, static_cast<size_t>(ldo) * sizeof(float), 0,
                        static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M), s);
    }
  }
  auto* kern = stream_gemm_wg_kernel<NT, WG>;
  allow_dynamic_smem(stream_gemm_wg_kernel<NT, WG>, wg_smem_bytes<NT, WG>(), /*max_carveout=*/true);
  launch_pdl(kern, dim3(static_cast<unsigned>(geo.grid)), 128 * WG, wg_smem_bytes<NT, WG>(), s, wmap, xmap, M,
             N, geo.ksteps, geo.units, bias, (accumulate ? 1 : 0) | probe_bits(), out, ldo, f);
  return true;
}

// VV_CUDA_STREAM_WG=1|2: warpgroups per block of the Hopper form (an A/B knob; default 2).
int wg_per_block() {
  static const int wg = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WG");
    return e && std::atoi(e) == 1 ? 1 : 2;
  }();
  return wg;
}

template <int NT>
bool launch_wg_any(const void* a, int M, int K, const void* w, int64_t ldw, int N, const float* bias,
                   bool accumulate, float* out, int64_t ldo, int sms, int* flags, size_t flag_count,
                   cudaStream_t s) {
  return wg_per_block() == 1
             ? launch_wg<NT, 1>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, flags, flag_count, s)
             : launch_wg<NT, 2>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, flags, flag_count, s);
}

// VV_CUDA_STREAM_WS_TRACE=1: one stderr line for each new shape and form of the ws form's launches: its
// split over the grid (to read a table's figures against). Read once per process.
void trace_ws_plan(int64_t N, int64_t K, int rows, int CL, bool swiglu, int64_t tiles, int64_t groups,
                   int64_t ksteps, int64_t G, int64_t units) {
  static const bool on = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_TRACE");
    return e && std::string(e) == "1";
  }();
  if (!on) return;
  static std::mutex mu;
  static std::set<std::tuple<int64_t, int64_t, int, int, bool>> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert({N, K, rows, CL, swiglu}).second) return;
  std::set<int64_t> shared;  // tile groups cut between runs
  for (int64_t b = 1; b < G; ++b) {
    const int64_t u = stream_plan::unit_begin(b, G, units);
    if (u % ksteps != 0) shared.insert(u / ksteps);
  }
  std::fprintf(
      stderr,
      "vibevoice: stream GEMM ws%s: N=%lld K=%lld, %d padded rows, clusters of %d: %lld tiles in %lld "
      "groups of %lld steps, %lld runs of %.1f units, %zu groups shared between runs\n",
      swiglu ? " (SwiGLU)" : "", static_cast<long long>(N), static_cast<long long>(K), rows, CL,
      static_cast<long long>(tiles), static_cast<long long>(groups), static_cast<long long>(ksteps),
      static_cast<long long>(G), static_cast<double>(units) / static_cast<double>(G), shared.size());
}

// VV_CUDA_STREAM_WS_TRACE=2: the 20th launch of each shape of up to 64 rows (outside a graph capture) is
// timed inside (kWsTraceWords a block) and summarised on stderr; the others run untraced. A diagnostic: the
// report synchronises the stream.
unsigned long long* ws_trace_take(int64_t N, int64_t K, int M, int64_t blocks, cudaStream_t s) {
  static const bool on = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_TRACE");
    return e && std::string(e) == "2";
  }();
  if (!on || blocks > 1024 || M > 64) return nullptr;  // (the 128-row forms are not traced)
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return nullptr;
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int>, int> launches;
  static unsigned long long* buf = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (++launches[{N, K, M}] != 20) return nullptr;
  if (!buf && cudaMalloc(&buf, 1024 * kWsTraceWords * sizeof(unsigned long long)) != cudaSuccess) {
    cudaGetLastError();
    buf = nullptr;
  }
  return buf;
}
void ws_trace_report(const unsigned long long* trace, int64_t N, int64_t K, int M, int CL, bool swiglu,
                     int64_t blocks, cudaStream_t s) {
  std::vector<unsigned long long> w(static_cast<size_t>(blocks * kWsTraceWords));
  if (cudaStreamSynchronize(s) != cudaSuccess ||
      cudaMemcpy(w.data(), trace, w.size() * sizeof(w[0]), cudaMemcpyDeviceToHost) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  auto col = [&](int k) {
    std::vector<double> v;
    for (int64_t b = 0; b < blocks; ++b) v.push_back(static_cast<double>(w[b * kWsTraceWords + k]));
    return v;
  };
  const std::vector<double> enter = col(0);
  const double t0 = *std::min_element(enter.begin(), enter.end());
  auto rel = [&](std::vector<double> v, bool from_t0, double unit = 1e3) {  // sorted; ns to µs by default
    for (double& x : v) x = (from_t0 ? x - t0 : x) / unit;
    std::sort(v.begin(), v.end());
    return v;
  };
  auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
  const auto en = rel(enter, true), first = rel(col(1), true), wait = rel(col(2), false),
             epi = rel(col(3), false), end = rel(col(4), true), segs = rel(col(5), false, 1.0),
             pw = rel(col(6), true), pd = rel(col(7), true);
  std::fprintf(
      stderr,
      "vibevoice: ws trace N=%lld K=%lld M=%d CL=%d%s, %lld blocks (µs from the first block's "
      "entry; median / max): entry %.2f / %.2f, producer's first weights issued %.2f / %.2f, its PDL "
      "wait over %.2f / %.2f, first stage landed %.2f / %.2f, waiting for stages %.2f / %.2f, "
      "epilogues %.2f / %.2f (%.0f segments a block, at most %.0f), end %.2f / %.2f (first %.2f)\n",
      static_cast<long long>(N), static_cast<long long>(K), M, CL, swiglu ? " SwiGLU" : "",
      static_cast<long long>(blocks), med(en), en.back(), med(pw), pw.back(), med(pd), pd.back(), med(first),
      first.back(), med(wait), wait.back(), med(epi), epi.back(), med(segs), segs.back(), med(end),
      end.back(), end.front());
}

// The clusters of CL blocks that can be resident at once (cudaOccupancyMaxActiveClusters; 0 when the
// query fails). Asked once per form: a process drives one kind of device.
template <int NT, int CL, bool SWIGLU>
int max_active_clusters() {
  static const int n = [] {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CL);
    cfg.blockDim = dim3(kWsThreads);
    cfg.dynamicSmemBytes = ws_smem_bytes<NT>();
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CL;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, stream_gemm_ws_kernel<NT, CL, SWIGLU>, &cfg) !=
        cudaSuccess) {
      cudaGetLastError();
      clusters = 0;
    }
    return clusters;
  }();
  return n;
}

// Whether a ws kernel was compiled to 168 registers a thread: the consumers' setmaxnreg.inc 232 takes
// what the producer's dec 40 frees (the block's 384 × 168); with fewer (another compiler) it would wait
// forever, so not this form then.
bool ws_regs_ok(const void* kern) {
  cudaFuncAttributes fa{};
  const bool ok = cudaFuncGetAttributes(&fa, kern) == cudaSuccess && fa.numRegs == 168;
  if (!ok) cudaGetLastError();
  return ok;
}

// The runs (clusters) a ws launch cuts `units` (of `groups` tile groups) into: one a cluster slot
// (`slots`: the SMs over the cluster size), fewer where the scratch's least units a run or most
// segments a tile say so.
int64_t ws_runs(int64_t units, int64_t groups, int slots, const StreamGemmScratch& scratch) {
  int64_t G = std::min<int64_t>(units / std::max(scratch.ws_min_units, 1), std::max(slots, 1));
  if (scratch.ws_max_split > 0) G = std::min<int64_t>(G, groups * scratch.ws_max_split);
  return std::max<int64_t>(G, 1);
}

// N: the output's columns (SWIGLU: w has 2N rows). out: f32, or bf16 with SWIGLU.
template <int NT, int CL, bool SWIGLU>
bool launch_ws(const void* a, int M, int K, const void* w, int64_t ldw, int N, const float* bias,
               bool accumulate, void* out, int64_t ldo, int sms, const StreamGemmScratch& scratch,
               cudaStream_t s) {
  auto* kern = stream_gemm_ws_kernel<NT, CL, SWIGLU>;
  static const bool regs_ok = ws_regs_ok(reinterpret_cast<const void*>(kern));
  if (!regs_ok) return false;
  allow_dynamic_smem(kern, ws_smem_bytes<NT>(), /*max_carveout=*/true);
  // Units are (group of CL tiles, 64-deep step) pairs over G clusters, as many as can be resident.
  constexpr int TILE = SWIGLU ? 128 : kWsBN;
  const int64_t tiles = (N + TILE - 1) / TILE, groups = (tiles + CL - 1) / CL;
  const int ksteps = (K + kBK - 1) / kBK;
  const int64_t units = groups * ksteps;
  int64_t G = ws_runs(units, groups, sms / CL, scratch);
  if constexpr (CL > 1) {
    const int resident = max_active_clusters<NT, CL, SWIGLU>();
    if (resident <= 0) return false;
    if (!scratch.row_invariant) G = std::min<int64_t>(G, resident);  // (else: the rest run after)
  }
  if (G <= 0) return false;
  bool split = false;
  for (int64_t b = 1; b < G && !split; ++b) split = stream_plan::unit_begin(b, G, units) % ksteps != 0;
  // Counts: one a tile and warpgroup, or one a tile (SWIGLU). Slots: two a cluster for the segments
  // that open and close its run, or one for every segment (SWIGLU: group + cluster), × CL × 2.
  const int64_t count_need = SWIGLU ? tiles : 2 * tiles;
  const int64_t slots = (SWIGLU ? groups + G : (split ? 2 * G : 0)) * CL * 2;
  if (!scratch.counts || static_cast<size_t>(count_need) > scratch.count_ints ||
      (slots > 0 &&
       (!scratch.ws || slots * ws_slot_floats<NT>() * 4 > static_cast<int64_t>(scratch.ws_bytes))))
    return false;
  trace_ws_plan(N, K, 16 * NT, CL, SWIGLU, tiles, groups, ksteps, G, units);
  CUtensorMap wmap, xmap;
  if (!encode_map(&wmap, w, SWIGLU ? 2 * int64_t{N} : N, K, ldw, TILE) ||
      !encode_map(&xmap, a, M, K, K, 16 * NT / CL))
    return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(G * CL));
  cfg.blockDim = dim3(kWsThreads);
  cfg.dynamicSmemBytes = ws_smem_bytes<NT>();
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (CL > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = CL;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  unsigned long long* trace = ws_trace_take(N, K, M, G * CL, s);
  const WsGemm p{M, N, ksteps, units, G, bias, accumulate ? 1 : 0, out, ldo, scratch.ws, scratch.counts};
  if (cudaLaunchKernelEx(&cfg, kern, wmap, xmap, p, trace) != cudaSuccess) {
    cudaGetLastError();  // (a refused launch: the caller takes another form)
    return false;
  }
  if (trace) ws_trace_report(trace, N, K, M, CL, SWIGLU, G * CL, s);
  return true;
}

template <int NT, bool SWIGLU>
bool launch_ws_any(const void* a, int M, int K, const void* w, int64_t ldw, int N, const float* bias,
                   bool accumulate, void* out, int64_t ldo, int sms, const StreamGemmScratch& scratch,
                   cudaStream_t s) {
  // Clusters of 4 from 32 padded rows up: each CTA's part of a's rows must be whole 8-row swizzle atoms.
  if constexpr (NT >= 2) {
    if (scratch.ws_cluster == 4 && !scratch.row_invariant)
      return launch_ws<NT, 4, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s);
  }
  return scratch.ws_cluster >= 2
             ? launch_ws<NT, 2, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s)
             : launch_ws<NT, 1, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s);
}

template <bool SWIGLU>
bool launch_ws_rows(const void* a, int M, int K, const void* w, int64_t ldw, int N, const float* bias,
                    bool accumulate, void* out, int64_t ldo, int sms, const StreamGemmScratch& scratch,
                    cudaStream_t s) {
  if (scratch.pad128)
    return launch_ws_any<8, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s);
  return M <= 16   ? launch_ws_any<1, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s)
         : M <= 32 ? launch_ws_any<2, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s)
         : M <= 64
             ? launch_ws_any<4, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s)
             : launch_ws_any<8, SWIGLU>(a, M, K, w, ldw, N, bias, accumulate, out, ldo, sms, scratch, s);
}

// The MLP in one launch (stream_gemm_mlp_kernel): gate_up's and down's splits as their own launches
// would take them (clusters of one), the grid the larger of the two (at most one block an SM: the
// kernel's grid-wide count needs every block resident).
template <int NT>
bool launch_mlp(const void* a, int M, int K, const void* w1, int64_t ldw1, int I, void* h, const void* w2,
                int64_t ldw2, float* out, int64_t ldo, int sms, const StreamGemmScratch& scratch,
                cudaStream_t s) {
  auto* kern = stream_gemm_mlp_kernel<NT>;
  static const bool regs_ok = ws_regs_ok(reinterpret_cast<const void*>(kern));
  if (!regs_ok) return false;
  allow_dynamic_smem(kern, ws_smem_bytes<NT>(), /*max_carveout=*/true);
  const int64_t tiles1 = (I + 127) / 128, ks1 = (K + kBK - 1) / kBK, units1 = tiles1 * ks1;
  const int64_t tiles2 = (K + kWsBN - 1) / kWsBN, ks2 = (I + kBK - 1) / kBK, units2 = tiles2 * ks2;
  const int64_t G1 = ws_runs(units1, tiles1, sms, scratch), G2 = ws_runs(units2, tiles2, sms, scratch);
  const int64_t grid = std::max(G1, G2);
  if (grid > sms) return false;
  bool split2 = false;
  for (int64_t b = 1; b < G2 && !split2; ++b) split2 = stream_plan::unit_begin(b, G2, units2) % ks2 != 0;
  // Slots: gate_up's (a segment each, both warpgroups), then down's (two a run where tiles are split);
  // counts: gate_up's tiles, down's (two a tile), then the grid-wide count and its passes.
  const int64_t slots1 = (tiles1 + G1) * 2, slots2 = split2 ? 2 * G2 * 2 : 0;
  const int64_t count_need = tiles1 + 2 * tiles2 + 2;
  if (!scratch.counts || static_cast<size_t>(count_need) > scratch.count_ints || !scratch.ws ||
      (slots1 + slots2) * ws_slot_floats<NT>() * 4 > static_cast<int64_t>(scratch.ws_bytes))
    return false;
  CUtensorMap w1map, x1map, w2map, x2map;
  if (!encode_map(&w1map, w1, 2 * int64_t{I}, K, ldw1, 128) || !encode_map(&x1map, a, M, K, K, 16 * NT) ||
      !encode_map(&w2map, w2, K, I, ldw2, kWsBN) || !encode_map(&x2map, h, M, I, I, 16 * NT))
    return false;
  const WsGemm up{M, I, static_cast<int>(ks1), units1, G1, nullptr, 0, h, I, scratch.ws, scratch.counts};
  const WsGemm down{M,
                    K,
                    static_cast<int>(ks2),
                    units2,
                    G2,
                    nullptr,
                    1,
                    out,
                    ldo,
                    scratch.ws + slots1 * ws_slot_floats<NT>(),
                    scratch.counts + tiles1};
  if (launch_pdl(kern, dim3(static_cast<unsigned>(grid)), kWsThreads, ws_smem_bytes<NT>(), s, w1map, x1map,
                 w2map, x2map, up, down, static_cast<int>(tiles1),
                 scratch.counts + tiles1 + 2 * tiles2) != cudaSuccess) {
    cudaGetLastError();  // (a refused launch: the caller launches the two GEMMs)
    return false;
  }
  return true;
}

}  // namespace

size_t stream_gemm_ws_bytes(int sms) {
  return static_cast<size_t>(8) * static_cast<size_t>(std::max(sms, 1)) * ws_slot_floats<8>() * sizeof(float);
}

bool stream_gemm_ws(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                    const float* bias, bool accumulate, float* out, int64_t ldo, int sms,
                    const StreamGemmScratch& scratch, cudaStream_t s) {
  if (M <= 0 || N <= 0) return true;
  if (M > kStreamGemmMaxRows) return false;
  return launch_ws_rows<false>(a, static_cast<int>(M), static_cast<int>(K), w, ldw, static_cast<int>(N), bias,
                               accumulate, out, ldo, sms, scratch, s);
}

bool stream_gemm_swiglu(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t I, void* out,
                        int64_t ldo, int sms, const StreamGemmScratch& scratch, cudaStream_t s) {
  if (M <= 0 || I <= 0) return true;
  if (M > kStreamGemmMaxRows || 2 * I > (int64_t{1} << 30) || !scratch.counts || !scratch.ws) return false;
  return launch_ws_rows<true>(a, static_cast<int>(M), static_cast<int>(K), w, ldw, static_cast<int>(I),
                              nullptr, false, out, ldo, sms, scratch, s);
}

bool stream_gemm_mlp(const void* a, int64_t M, int64_t K, const void* w1, int64_t ldw1, int64_t I, void* h,
                     const void* w2, int64_t ldw2, float* out, int64_t ldo, int sms,
                     const StreamGemmScratch& scratch, cudaStream_t s) {
  if (M <= 0 || I <= 0) return true;
  if (M > kStreamGemmMaxRows || 2 * I > (int64_t{1} << 30) || K > (int64_t{1} << 30) ||
      scratch.ws_cluster != 1 || scratch.row_invariant)
    return false;
  const int m = static_cast<int>(M), k = static_cast<int>(K), i = static_cast<int>(I);
  if (scratch.pad128) return launch_mlp<8>(a, m, k, w1, ldw1, i, h, w2, ldw2, out, ldo, sms, scratch, s);
  return M <= 16   ? launch_mlp<1>(a, m, k, w1, ldw1, i, h, w2, ldw2, out, ldo, sms, scratch, s)
         : M <= 32 ? launch_mlp<2>(a, m, k, w1, ldw1, i, h, w2, ldw2, out, ldo, sms, scratch, s)
         : M <= 64 ? launch_mlp<4>(a, m, k, w1, ldw1, i, h, w2, ldw2, out, ldo, sms, scratch, s)
                   : launch_mlp<8>(a, m, k, w1, ldw1, i, h, w2, ldw2, out, ldo, sms, scratch, s);
}

bool stream_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!(M >= 1 && M <= kStreamGemmMaxRows && K > 0 && K % 8 == 0 && ldw % 8 == 0 && ldw >= K && aligned(a) &&
        aligned(w) && K <= (int64_t{1} << 30)))
    return false;
  // The mma form's stages (up to 108 KB; the Hopper form's ≈ 220 KB exist on sm_90 only): a GPU that
  // cannot give them (sm_86/89: 99 KB) keeps cuBLASLt.
  const int nt = M <= 16 ? 1 : M <= 32 ? 2 : M <= 64 ? 4 : 8;
  return smem_bytes(nt) <= device_smem_optin();
}

StreamGemmKind stream_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                           const float* bias, bool accumulate, float* out, int64_t ldo, int sms,
                           StreamGemmKind kind, const StreamGemmScratch& scratch, cudaStream_t s) {
  if (M <= 0 || N <= 0) return kind;
  int* flags = scratch.counts;
  size_t flag_count = scratch.count_ints;
  const int m = static_cast<int>(M), k = static_cast<int>(K), n = static_cast<int>(N);
  if (kind == StreamGemmKind::kWarpSpec) {
    const bool ok = launch_ws_rows<false>(a, m, k, w, ldw, n, bias, accumulate, out, ldo, sms, scratch, s);
    if (ok) return kind;
    // No tensor-map entry point or no scratch: the one-barrier form, without the counts (it would
    // leave its flags raised in them; the warp-specialised form needs them zero).
    kind = StreamGemmKind::kWgmma;
    flags = nullptr;
    flag_count = 0;
  }
  if (kind == StreamGemmKind::kWgmma) {
    const bool ok =
        M <= 16 ? launch_wg_any<1>(a, m, k, w, ldw, n, bias, accumulate, out, ldo, sms, flags, flag_count, s)
        : M <= 32
            ? launch_wg_any<2>(a, m, k, w, ldw, n, bias, accumulate, out, ldo, sms, flags, flag_count, s)
        : M <= 64
            ? launch_wg_any<4>(a, m, k, w, ldw, n, bias, accumulate, out, ldo, sms, flags, flag_count, s)
            : launch_wg_any<8>(a, m, k, w, ldw, n, bias, accumulate, out, ldo, sms, flags, flag_count, s);
    if (ok) return kind;  // else (no tensor-map entry point): the mma form below
  }
  // VV_CUDA_STREAM_PER_SM=1: one block per SM for the mma form (an A/B knob)
  static const int per_sm = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_PER_SM");
    return e && std::atoi(e) == 1 ? 1 : kBlocksPerSm;
  }();
  const Geometry geo = geometry(N, K, sms, kBN, per_sm);
  if (!accumulate && geo.split > 0) {
    cudaMemset2DAsync(out, static_cast<size_t>(ldo) * sizeof(float), 0,
                      static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M), s);
  }
  const auto* ab = static_cast<const __nv_bfloat16*>(a);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  if (M <= 16) {
    launch<1>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else if (M <= 32) {
    launch<2>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else if (M <= 64) {
    launch<4>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else {
    launch<8>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  }
  return StreamGemmKind::kMma;
}

}  // namespace vv::cuda
