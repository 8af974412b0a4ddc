// The decode chain (decode_ops.cuh, VV_CUDA_DECODE_CHAIN=1): a run of one-row bulk GEMVs, and
// optionally rope_kv_write, as one persistent kernel with one weight stream.
//
// Why: at batch 1 every weight byte of a token is read once, and the step is as fast as the weights
// stream. Launched one by one, each GEMV ramps its stream up and down at its kernel boundary and the
// small ops between them leave HBM idle; the bulk GEMV alone streams at 4.1-4.3 TB/s on the H200,
// the whole step only at ≈ 3.5 (kernels/cuda/NOTES.md). Here one block per SM streams the tiles of
// every phase through one ring of shared-memory stages: the weights do not depend on the activations,
// so thread 0 refills a stage with the next tile of this block, in whatever phase it lies, as soon as
// the stage is read, and the copies keep landing while the grid waits at the barrier between two
// phases (whose outputs the next phase reads) and, through programmatic dependent launch, while the
// kernel before this one (the attention) still runs.
//
// Each phase computes exactly what the bulk GEMV kernel computes (decode_bulk.cuh: the same
// activation chunks a thread, the same per-row chains, the same warp and block order): a row's sum
// depends on K alone, so every output has the bits of the phases launched one by one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/decode_bulk.cuh"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

using dec::bulk_xc;
using dec::kBulkMaxRows;
using dec::kBulkMaxStages;
using dec::kBulkThreads;

static_assert(sizeof(DecodeChain) + 16 <= 4096, "the chain's descriptor is a kernel parameter (4 KB)");
constexpr size_t kChainBudget = 190 * 1024;  // five 37.9 KB stages at the 7B's down projection

// The trace's words (DecodeChain::trace; kChainTraceWords of them): launches, clock64 cycles and
// %globaltimer ns of thread 0 of block 0 over the whole kernel, and its cycles in each part: waiting
// for the kernel before (PDL), the attention phase, then per GEMV phase p the barrier before it, the
// phase itself and, inside it, the waits for tiles not yet landed; the rope phase's barrier and work.
enum ChainTrace : int {
  kTraceLaunches,
  kTraceCycles,
  kTraceNs,
  kTraceWait,
  kTraceAttn,
  kTraceRopeBarrier,
  kTraceRope,
  kTracePhase,  // 3 words a phase: barrier, phase, stalls
};
static_assert(kTracePhase + 3 * kMaxChainPhases <= kChainTraceWords, "trace words");

// Weight rows a tile for XC activation chunks a thread: the bulk GEMV's, but 5 at XC = 2 (K 2,049 to
// 4,096), so that the 7B's K = 3,584 tiles (35.8 KB) nearly fill the stages its down projection's
// 18,944-weight rows size (37.9 KB): more bytes in flight through the barriers and the attention. A
// row's sum does not depend on the rows beside it in a tile.
__host__ __device__ constexpr int chain_tile_rows(int xc) {
  return xc == 2 ? 5 : dec::bulk_tile_rows(xc, false);
}

// A phase's form: its activation chunks a thread (XC) and prologue.
// Pair: gate/up rows paired with the SwiGLU epilogue (the bulk GEMV's kPair), with or without the norm.
enum ChainForm : int {
  kPlain1,
  kPlain2,
  kPlain4,
  kPlain8,
  kPlain12,
  kNorm1,
  kNorm2,
  kNorm4,
  kSilu1,
  kSilu2,
  kSilu4,
  kSilu8,
  kSilu12,
  kPair1,
  kPair2,
  kPair4,
  kNormPair1,
  kNormPair2,
  kNormPair4,
};
int chain_form(int xc, bool norm, bool silu, bool pair) {
  const int k = xc == 1 ? 0 : xc == 2 ? 1 : xc == 4 ? 2 : xc == 8 ? 3 : 4;
  if (pair) return norm ? kNormPair1 + k : kPair1 + k;
  return norm ? kNorm1 + k : silu ? kSilu1 + k : kPlain1 + k;
}
// Weight rows (row pairs with the pairing) a tile: chain_tile_rows, or the bulk GEMV's pairs.
__host__ __device__ constexpr int chain_tile_rows(int xc, bool pair) {
  return pair ? dec::bulk_tile_rows(xc, true) : chain_tile_rows(xc);
}

// The device side exists for sm_90 only (the kernel is empty elsewhere).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block of the grid arrives before any leaves; what a block wrote before it is visible to all
// after it. bar[0] counts the arrivals (the last one resets it), bar[1] is the generation the last one
// advances; both persist across launches, so a graph replays the kernel as it is.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned gen = ld_acquire(bar + 1);
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      const uint64_t t0 = global_ns();
      while (ld_acquire(bar + 1) == gen) {
        if (global_ns() - t0 > 10000000000ull) {
          printf("vibevoice decode chain: grid barrier timed out (blocks not resident together?)\n");
          __trap();
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// The ring: `stages` stages of `stride` bytes at base, their mbarriers at bars. Thread 0 issues this
// block's tiles in order (phase by phase, each phase's run [t0, t1) of its tiles); tile number i of the
// block goes to stage i mod stages and completes that stage's barrier phase (i / stages) mod 2.
struct Ring {
  const unsigned char* mem;  // the stages (generic address)
  uint32_t base, bars, stride;
  int stages;
  // thread 0's cursor: the next tile to issue (phase p, tile t, the phase's end t1)
  int p;
  int64_t t, t1;
  uint32_t issued;
};

__device__ __forceinline__ void phase_range(const DecodeChain& c, int p, int64_t& t0, int64_t& t1) {
  const int64_t n = c.tiles[p], g = gridDim.x, b = blockIdx.x;
  t0 = n * b / g;
  t1 = n * (b + 1) / g;
}

// The job, first row and rows of tile t of phase p.
__device__ __forceinline__ void locate(const DecodeChain& c, int p, int64_t t, int& jx, int64_t& n0,
                                       int& rows) {
  const DecodeGemv& g = c.ph[p];
  jx = 0;
#pragma unroll
  for (int q = 1; q < kMaxDecodeJobs; ++q)
    if (q < g.count && t >= g.j[q].task_begin) jx = q;
  const int tr = c.tr[p];
  n0 = (t - g.j[jx].task_begin) * tr;
  const int64_t nr = c.pair[p] ? g.j[jx].N / 2 : g.j[jx].N;
  rows = static_cast<int>(nr - n0 < tr ? nr - n0 : tr);
}

// Thread 0: moves the cursor past exhausted phases; false when no tile is left.
__device__ __forceinline__ bool cursor_valid(const DecodeChain& c, Ring& r) {
  while (r.t >= r.t1) {
    if (++r.p >= c.phases) return false;
    phase_range(c, r.p, r.t, r.t1);
  }
  return true;
}

// Tile t of phase p's weights: their first byte, and their bytes in *bytes (its rows are contiguous);
// with the pairing, *up: the first byte of the up rows (as many bytes).
template <typename WT>
__device__ __forceinline__ const WT* tile_src(const DecodeChain& c, int p, int64_t t, uint32_t* bytes,
                                              const WT** up) {
  int jx, rows;
  int64_t n0;
  locate(c, p, t, jx, n0, rows);
  const DecodeGemv& g = c.ph[p];
  *bytes = static_cast<uint32_t>(static_cast<size_t>(g.K) * sizeof(WT) * static_cast<size_t>(rows));
  const WT* w = static_cast<const WT*>(g.j[jx].w);
  *up = c.pair[p] ? w + (g.j[jx].N / 2 + n0) * g.K : nullptr;
  return w + n0 * g.K;
}

// Thread 0: issues the cursor's tile into the next stage (if a tile is left) and advances.
template <typename WT>
__device__ __forceinline__ void issue_next(const DecodeChain& c, Ring& r) {
  if (!cursor_valid(c, r)) return;
  uint32_t bytes;
  const WT* up;
  const WT* src = tile_src<WT>(c, r.p, r.t, &bytes, &up);
  const int st = static_cast<int>(r.issued % static_cast<uint32_t>(r.stages));
  const uint32_t bar = r.bars + 8 * st, dst = r.base + static_cast<uint32_t>(st) * r.stride;
  mbar::expect_tx(bar, up ? 2 * bytes : bytes);
  mbar::bulk_copy(dst, src, bytes, bar);
  if (up) {  // the up rows after the tile's TR gate rows, as the bulk GEMV's pairing lays them out
    const uint32_t half =
        static_cast<uint32_t>(static_cast<size_t>(c.ph[r.p].K) * sizeof(WT) * static_cast<size_t>(c.tr[r.p]));
    mbar::bulk_copy(dst + half, up, bytes, bar);
  }
  ++r.t;
  ++r.issued;
}

// One phase: the activation (with its prologue), then this block's tiles of the phase as the bulk GEMV
// computes them. i: the block's tile count so far (its ring position).
template <typename WT, int XC, bool kNorm, bool kSilu, bool kPair = false>
__device__ __forceinline__ void run_phase(const DecodeChain& c, int p, Ring& ring, uint32_t& i, float* red,
                                          float* nred, uint64_t& stall) {
  constexpr int TR = chain_tile_rows(XC, kPair);
  constexpr int SR = kPair ? 2 * TR : TR;  // weight rows a stage
  static_assert(SR <= kBulkMaxRows, "a stage's rows");
  const DecodeGemv& g = c.ph[p];
  const int tid = threadIdx.x;
  const int64_t K = g.K;
  float inv = 0.f;
  if constexpr (kNorm) {
    inv = dec::rms_inv<true>(g.x, K, g.eps, nred);
    if (blockIdx.x == 0) {
      for (int64_t c8 = tid; c8 < K; c8 += kBulkThreads)
        g.norm_out[c8] = (__ldcg(g.x + c8) * inv) * g.norm_w[c8];
    }
  }
  float xr[XC][8];
  dec::bulk_load_act<XC, kNorm, kSilu, true>(g, inv, xr);
  int64_t t0, t1;
  phase_range(c, p, t0, t1);
  for (int64_t t = t0; t < t1; ++t, ++i) {
    const int st = static_cast<int>(i % static_cast<uint32_t>(ring.stages));
    const uint64_t w0 = c.trace ? clock64() : 0;
    mbar::wait(ring.bars + 8 * st, (i / static_cast<uint32_t>(ring.stages)) & 1u);
    if (c.trace) stall += clock64() - w0;  // (thread 0 of block 0's is the one kept)
    int jx, rows;
    int64_t n0;
    locate(c, p, t, jx, n0, rows);
    const WT* sw = reinterpret_cast<const WT*>(ring.mem + static_cast<size_t>(st) * ring.stride);
    float* rb = red + (i & 1u) * 8 * kBulkMaxRows;
    float acc[SR];
    dec::bulk_tile_sums<WT, XC, SR, TR>(sw, K, rows, xr, acc);
    dec::bulk_store_sums<SR>(rb, acc);
    __syncthreads();  // the stage is read and the warps' sums are in rb
    if (tid == 0) issue_next<WT>(c, ring);
    if (tid < rows) dec::bulk_finish_row<kPair, true>(g.j[jx], g.silu_out, n0, rb, tid, TR);
  }
}

template <typename WT>
__device__ __forceinline__ void dispatch_phase(const DecodeChain& c, int p, Ring& ring, uint32_t& i,
                                               float* red, float* nred, uint64_t& stall) {
  switch (c.form[p]) {
    case kPlain1:
      return run_phase<WT, 1, false, false>(c, p, ring, i, red, nred, stall);
    case kPlain2:
      return run_phase<WT, 2, false, false>(c, p, ring, i, red, nred, stall);
    case kPlain4:
      return run_phase<WT, 4, false, false>(c, p, ring, i, red, nred, stall);
    case kPlain8:
      return run_phase<WT, 8, false, false>(c, p, ring, i, red, nred, stall);
    case kPlain12:
      return run_phase<WT, 12, false, false>(c, p, ring, i, red, nred, stall);
    case kNorm1:
      return run_phase<WT, 1, true, false>(c, p, ring, i, red, nred, stall);
    case kNorm2:
      return run_phase<WT, 2, true, false>(c, p, ring, i, red, nred, stall);
    case kNorm4:
      return run_phase<WT, 4, true, false>(c, p, ring, i, red, nred, stall);
    case kSilu1:
      return run_phase<WT, 1, false, true>(c, p, ring, i, red, nred, stall);
    case kSilu2:
      return run_phase<WT, 2, false, true>(c, p, ring, i, red, nred, stall);
    case kSilu4:
      return run_phase<WT, 4, false, true>(c, p, ring, i, red, nred, stall);
    case kSilu8:
      return run_phase<WT, 8, false, true>(c, p, ring, i, red, nred, stall);
    case kSilu12:
      return run_phase<WT, 12, false, true>(c, p, ring, i, red, nred, stall);
    case kPair1:
      return run_phase<WT, 1, false, false, true>(c, p, ring, i, red, nred, stall);
    case kPair2:
      return run_phase<WT, 2, false, false, true>(c, p, ring, i, red, nred, stall);
    case kPair4:
      return run_phase<WT, 4, false, false, true>(c, p, ring, i, red, nred, stall);
    case kNormPair1:
      return run_phase<WT, 1, true, false, true>(c, p, ring, i, red, nred, stall);
    case kNormPair2:
      return run_phase<WT, 2, true, false, true>(c, p, ring, i, red, nred, stall);
    default:
      return run_phase<WT, 4, true, false, true>(c, p, ring, i, red, nred, stall);
  }
}

#endif  // sm_90

template <typename WT>
__global__ void __launch_bounds__(kBulkThreads, 1)
    decode_chain_kernel(const __grid_constant__ DecodeChain c, int stages, uint32_t stride,
                        uint32_t attn_offset) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char chain_smem[];
  Ring ring;
  ring.mem = chain_smem;
  ring.base = mma::smem_addr(chain_smem);
  ring.stages = stages;
  ring.stride = stride;
  ring.bars = ring.base + static_cast<uint32_t>(stages) * stride;
  float* red =
      reinterpret_cast<float*>(chain_smem + static_cast<size_t>(stages) * stride + 8 * kBulkMaxStages);
  float* nred = red + 2 * 8 * kBulkMaxRows;  // rms_inv's 16 floats
  ring.p = 0;
  phase_range(c, 0, ring.t, ring.t1);
  ring.issued = 0;
  // VV_CUDA_CHAIN_TRACE: thread 0 of block 0 times the kernel's parts (clock64) into c.trace.
  const bool tracer = c.trace && blockIdx.x == 0 && threadIdx.x == 0;
  const uint64_t ns0 = tracer ? global_ns() : 0, k0 = tracer ? clock64() : 0;
  uint64_t mark = k0;
  auto add = [&](int word, uint64_t v) {
    atomicAdd(reinterpret_cast<unsigned long long*>(c.trace + word), static_cast<unsigned long long>(v));
  };
  auto lap = [&](int word) {  // the tracer's cycles since the last mark into the trace's word
    if (!tracer) return;
    const uint64_t now = clock64();
    add(word, now - mark);
    mark = now;
  };
  if (threadIdx.x == 0) {
    for (int st = 0; st < stages; ++st) mbar::init1(ring.bars + 8 * st);
    mbar::fence_init();
    // The weights do not depend on the kernels before: in flight before the wait.
    for (int st = 0; st < stages; ++st) issue_next<WT>(c, ring);
    // And up to l2_ahead bytes of the tiles after those into L2, while the kernel before still runs.
    Ring look = ring;
    for (int64_t left = c.l2_ahead; left > 0 && cursor_valid(c, look); ++look.t) {
      uint32_t bytes;
      const WT* up;
      const WT* src = tile_src<WT>(c, look.p, look.t, &bytes, &up);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
      if (up) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(up), "r"(bytes) : "memory");
      left -= up ? 2 * bytes : bytes;
    }
  }
  __syncthreads();
  pdl_wait();
  lap(kTraceWait);
  if (c.attn) {  // the attention's blocks (split, kv head, row), spread over the grid
    __shared__ float mls[2][dec::kAttnMaxG];
    __shared__ int last;
    const DecodeAttnArgs& a = c.at;
    float* asm_ = reinterpret_cast<float*>(chain_smem + attn_offset);
    const int64_t units = static_cast<int64_t>(a.splits) * a.kv_heads * a.n;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
      const int split = static_cast<int>(u % a.splits);
      const int kvh = static_cast<int>(u / a.splits % a.kv_heads);
      const int64_t r = u / (static_cast<int64_t>(a.splits) * a.kv_heads);
      if (a.kv.ct == DType::kF16) {
        dec::decode_attn_block<__half, true>(a, split, kvh, r, asm_, mls, last);
      } else {
        dec::decode_attn_block<__nv_bfloat16, true>(a, split, kvh, r, asm_, mls, last);
      }
      __syncthreads();  // the block's shared state is free for its next unit
    }
    lap(kTraceAttn);
  }
  uint32_t i = 0;
  for (int p = 0; p < c.phases; ++p) {
    if (p > 0 || c.attn) grid_barrier(c.barrier);
    lap(kTracePhase + 3 * p);
    if (p == c.phases - 1 && !c.rope) pdl_trigger();
    uint64_t stall = 0;
    dispatch_phase<WT>(c, p, ring, i, red, nred, stall);
    lap(kTracePhase + 3 * p + 1);
    if (tracer) add(kTracePhase + 3 * p + 2, stall);
  }
  if (c.rope) {
    grid_barrier(c.barrier);
    lap(kTraceRopeBarrier);
    pdl_trigger();
    const RopeKvArgs& a = c.r;
    const int64_t n = a.R * (a.qh + a.kh) * (a.D / 2);
    for (int64_t it = static_cast<int64_t>(blockIdx.x) * kBulkThreads + threadIdx.x; it < n;
         it += static_cast<int64_t>(gridDim.x) * kBulkThreads) {
      if (a.kv.ct == DType::kBF16) {
        dec::rope_kv_item<__nv_bfloat16, true>(a, it);
      } else if (a.kv.ct == DType::kF16) {
        dec::rope_kv_item<__half, true>(a, it);
      } else {
        dec::rope_kv_item<float, true>(a, it);
      }
    }
    lap(kTraceRope);
  }
  if (tracer) {
    add(kTraceLaunches, 1);
    add(kTraceCycles, clock64() - k0);
    add(kTraceNs, global_ns() - ns0);
  }
#endif
}

}  // namespace

size_t decode_chain_budget() {
  static const size_t b = [] {
    const char* e = std::getenv("VV_CUDA_CHAIN_KB");
    return e ? static_cast<size_t>(std::clamp(std::atoi(e), 64, 226)) * 1024 : kChainBudget;
  }();
  return b;
}

static bool chain_coop() {
  static const bool b =
      std::getenv("VV_CUDA_CHAIN_COOP") && std::string(std::getenv("VV_CUDA_CHAIN_COOP")) == "1";
  return b;
}

static int64_t decode_chain_l2_ahead() {
  static const int64_t b = [] {
    const char* e = std::getenv("VV_CUDA_CHAIN_L2_KB");
    return e ? static_cast<int64_t>(std::clamp(std::atoi(e), 0, 4096)) * 1024 : int64_t{0};
  }();
  return b;
}

// The ring's bytes beside `attn` bytes of the attention's shared memory: the budget, or what a block's
// shared memory (smem_max) leaves, less the barriers, the row sums and the static shared memory.
static size_t chain_ring_bytes(size_t attn, size_t smem_max) {
  const size_t room = smem_max > 2048 ? smem_max - 2048 : 0;
  return std::min(decode_chain_budget(), attn < room ? room - attn : 0);
}

// The stage bytes a phase needs: TR rows (2·TR with the pairing) of K 16-bit weights, in 128-byte units.
static size_t chain_stage_bytes(const DecodeGemv& g) {
  const bool pair = g.silu_out != nullptr;
  const int rows = chain_tile_rows(bulk_xc(g.K), pair) * (pair ? 2 : 1);
  return (static_cast<size_t>(g.K) * 2 * static_cast<size_t>(rows) + 127) / 128 * 128;
}

bool decode_chain_takes(const DecodeChain& c) {
  if (c.phases < 1 || c.phases > kMaxChainPhases || c.barrier == nullptr || c.sms < 1) return false;
  if (c.phases + (c.rope ? 1 : 0) < 2) return false;
  size_t stride = 0;
  for (int p = 0; p < c.phases; ++p) {
    const DecodeGemv& g = c.ph[p];
    if (!g.bulk || g.wt != c.ph[0].wt || !decode_gemv_bulk_takes(g)) return false;
    stride = std::max(stride, chain_stage_bytes(g));
  }
  if (c.rope && (c.r.D % 2 != 0 || c.r.R < 1)) return false;
  if (c.attn && (c.at.n < 1 || c.at.splits < 1 || c.at.kv_heads < 1 ||
                 (c.at.kv.ct != DType::kBF16 && c.at.kv.ct != DType::kF16)))
    return false;
  return 2 * stride <= chain_ring_bytes(c.attn ? (c.at.smem + 15) / 16 * 16 : 0, c.smem_max);
}

std::string decode_chain_trace_report(const uint64_t* w) {
  const uint64_t launches = w[kTraceLaunches];
  if (launches == 0 || w[kTraceCycles] == 0) return {};
  // clock64 cycles to µs by the traced launches' own ratio of cycles to %globaltimer time
  const double us_per_cycle = static_cast<double>(w[kTraceNs]) / static_cast<double>(w[kTraceCycles]) / 1e3;
  auto us = [&](int word) {
    return static_cast<double>(w[word]) * us_per_cycle / static_cast<double>(launches);
  };
  char line[256];
  std::snprintf(
      line, sizeof line,
      "  decode chain trace (thread 0 of block 0, µs a launch over %llu launches, %.2f GHz): total %.2f, "
      "PDL wait %.2f, attention %.2f, rope barrier %.2f, rope %.2f\n",
      static_cast<unsigned long long>(launches), 1e-3 / us_per_cycle, us(kTraceCycles), us(kTraceWait),
      us(kTraceAttn), us(kTraceRopeBarrier), us(kTraceRope));
  std::string out = line;
  for (int p = 0; p < kMaxChainPhases; ++p) {
    const int b = kTracePhase + 3 * p;
    if (w[b] == 0 && w[b + 1] == 0) continue;
    std::snprintf(line, sizeof line,
                  "    phase %d: barrier before %.2f, phase %.2f (of it waiting for tiles %.2f)\n", p, us(b),
                  us(b + 1), us(b + 2));
    out += line;
  }
  return out;
}

DecodeChainLaunch decode_chain_launch(DecodeChain& c) {
  DecodeChainLaunch l;
  for (int p = 0; p < c.phases; ++p) {
    DecodeGemv& g = c.ph[p];
    const int xc = bulk_xc(g.K);
    const bool pair = g.silu_out != nullptr;
    const int tr = chain_tile_rows(xc, pair);
    int64_t tiles = 0;
    for (int q = 0; q < g.count; ++q) {
      g.j[q].task_begin = tiles;
      tiles += ((pair ? g.j[q].N / 2 : g.j[q].N) + tr - 1) / tr;
    }
    c.tiles[p] = tiles;
    c.tr[p] = tr;
    c.pair[p] = pair;
    c.form[p] = chain_form(xc, g.norm_w != nullptr, g.swiglu_in != nullptr, pair);
    l.stride = std::max(l.stride, chain_stage_bytes(g));
  }
  c.l2_ahead = decode_chain_l2_ahead();
  const size_t attn = c.attn ? (c.at.smem + 15) / 16 * 16 : 0;
  l.stages = l.stride ? static_cast<int>(std::clamp<size_t>(chain_ring_bytes(attn, c.smem_max) / l.stride, 2,
                                                            kBulkMaxStages))
                      : 0;
  // stages, kBulkMaxStages mbarriers, the warps' row sums [2][8][kBulkMaxRows], rms_inv's 16 floats, then
  // the attention's shared memory
  l.attn_offset = static_cast<size_t>(l.stages) * l.stride + 8 * kBulkMaxStages +
                  (2 * 8 * kBulkMaxRows + 16) * sizeof(float);
  l.smem = l.attn_offset + attn;
  return l;
}

void decode_chain(DecodeChain c, cudaStream_t s) {
  const DecodeChainLaunch l = decode_chain_launch(c);
  const int stages = l.stages;
  const size_t stride = l.stride, attn_offset = l.attn_offset, smem = l.smem;
  auto go = [&](auto* kern) {
    allow_dynamic_smem(kern, smem);
    // VV_CUDA_CHAIN_COOP=1: a cooperative launch, which the runtime refuses (an error, not a hang) where
    // the grid cannot be resident at once (an MPS client held to part of the SMs); no PDL then.
    const dim3 grid(static_cast<unsigned>(c.sms));
    if (chain_coop()) {
      cudaLaunchAttribute coop;
      coop.id = cudaLaunchAttributeCooperative;
      coop.val.cooperative = 1;
      launch_with(&coop, kern, grid, kBulkThreads, smem, s, c, stages, static_cast<uint32_t>(stride),
                  static_cast<uint32_t>(attn_offset));
    } else {
      launch_pdl(kern, grid, kBulkThreads, smem, s, c, stages, static_cast<uint32_t>(stride),
                 static_cast<uint32_t>(attn_offset));
    }
  };
  if (c.ph[0].wt == DType::kF16) {
    go(decode_chain_kernel<__half>);
  } else {
    go(decode_chain_kernel<__nv_bfloat16>);
  }
}

}  // namespace vv::cuda
