// Causal varlen prefill attention over the paged KV cache on the tensor cores (FlashAttention-2
// style, mma.sync m16n8k16 bf16 with f32 accumulation). One block of 4 warps per (row tile, kv head):
// its 64 query vectors are the (row, query head) pairs of QT = 64/G rows and the G query heads of
// the kv head's group, so each K/V tile read from the cache serves every head of the group. Each
// warp owns 16 query vectors; scores S = Q·Kᵀ and the output O = P·V live in registers, with the
// online softmax in f32 (log2 domain). K/V tiles of 64 keys are gathered through the block table,
// rounded to bf16 into shared memory (any cache dtype), then read with ldmatrix. Rows of a tile that
// belong to different sequences are taken in passes, one sequence at a time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/attention_pass.cuh"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/fast_div.h"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/prefill_attention.cuh"
#include "kernels/cuda/smem_attr.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace vv::cuda {
namespace {

// QV query vectors per block, MT m-tiles of 16 query vectors per warp: QV / (16 · MT) warps. The
// forms: (64, 1) the default, (128, 1) 8 warps sharing each K/V tile (VV_CUDA_FLASH_QV=128), (128, 2)
// 4 warps of 32 query vectors (VV_CUDA_FLASH_QV=128x2): every K/V fragment read from shared memory
// feeds two mmas, and Q stays in shared memory (its fragments are read again for every tile).
template <int QV, int MT>
constexpr int kThreadsOf = QV / (16 * MT) * 32;
constexpr int kKeys = 64;  // keys per K/V tile
constexpr int kRing = kKeys + 1;  // block-table entries a tile of keys can span (block size 1)

// A position's block and offset in it: int divides (the narrow forms, the pipelined wgmma form, whose
// registers are full); FastDiv multiplies and shifts (the other wgmma forms: per tile and thread,
// ≈ 100 fewer instructions in wgf's key loop).
__device__ __forceinline__ int block_div(int bs, int j) {
  return j / bs;
}
__device__ __forceinline__ int block_mod(int bs, int j) {
  return j % bs;
}
__device__ __forceinline__ int block_size(int bs) {
  return bs;
}
__device__ __forceinline__ int block_div(FastDiv bs, int j) {
  return static_cast<int>(bs.div(static_cast<uint32_t>(j)));
}
__device__ __forceinline__ int block_mod(FastDiv bs, int j) {
  return static_cast<int>(bs.mod(static_cast<uint32_t>(j)));
}
__device__ __forceinline__ int block_size(FastDiv bs) {
  return static_cast<int>(bs.d);
}
template <typename BS>
BS block_divisor(int block_size) {
  if constexpr (std::is_same_v<BS, FastDiv>) {
    return FastDiv::of(static_cast<uint32_t>(block_size));
  } else {
    return block_size;
  }
}

using mma::ldsm_a;
using mma::ldsm_x4_at;
using mma::ldsm_x4_t_at;
using mma::mma_bf16;
using mma::pack_bf16;
using mma::quad_max;
using mma::quad_sum;
using mma::smem_addr;

// Eight consecutive cache elements (16-byte aligned) as eight bf16 in one uint4.
__device__ __forceinline__ uint4 load8_bf16(const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
}
__device__ __forceinline__ uint4 load8_bf16(const __half* p) {
  return mma::f16x8_to_bf16x8(*reinterpret_cast<const uint4*>(p));
}

// Shared memory: two stages of K [64][D+8] and V [64][D+8] bf16 (8 elements of padding per row keep
// ldmatrix's eight row addresses on distinct banks). At MT = 1 a pass's Q [QV][D+8] is staged in the
// second stage (its K, and its V too at QV = 128) before the key loop starts (its fragments then live
// in registers); at MT = 2 it has its own region after the stages.
template <int D, int QV, int MT>
constexpr size_t flash_smem_bytes() {
  return static_cast<size_t>(4) * kKeys * (D + 8) * 2 + (MT == 2 ? static_cast<size_t>(QV) * (D + 8) * 2 : 0);
}

// The block-table entries of keys [j0, j0 + 64) (clipped to kend) of sequence seq: entry i of the
// tile is tables[seq][j0 / bs + i]. Each thread below the count loads one (−1 elsewhere); the caller
// stores it into the tile's ring slot a tile's compute later, so the cp.async addresses of a tile
// come from shared memory and no warp waits on a global load before issuing them.
template <typename BS>
__device__ __forceinline__ int32_t flash_table_entry(const int32_t* __restrict__ tables, int64_t ldt, BS bs,
                                                     int seq, int j0, int kend) {
  if (j0 >= kend) return -1;
  const int first = block_div(bs, j0), last = block_div(bs, min(j0 + kKeys, kend) - 1);
  const int i = static_cast<int>(threadIdx.x);
  return i <= last - first ? tables[seq * ldt + first + i] : -1;
}

// Issues the loads of keys [j0, j0 + 64) of the kv head into one stage. A bf16 cache goes through
// cp.async (nothing waits here; zeros past kend); other cache types are rounded to bf16 through
// registers, every load of the thread issued before its first store.
template <typename CT, int D, int kThreads>
__device__ __forceinline__ void flash_load_tile(const int32_t* ring, int bs, int j0, int kend,
                                                const CT* __restrict__ kc, const CT* __restrict__ vc,
                                                int64_t ldc, int kvh, __nv_bfloat16* Ks, __nv_bfloat16* Vs) {
  constexpr int LD = D + 8;
  constexpr int kChunks = kKeys * (D / 8) / kThreads;  // 16-byte chunks per thread (8 or 4)
  const int b0 = j0 / bs;
  if constexpr (std::is_same_v<CT, __nv_bfloat16>) {
    // Each chunk's copy is issued as soon as its address is known (nothing is held across chunks).
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      const int jj = c / (D / 8), d8 = (c % (D / 8)) * 8;
      const int j = j0 + jj;
      const bool valid = j < kend;
      const int64_t sl = valid ? static_cast<int64_t>(ring[j / bs - b0]) * bs + j % bs : 0;
      const int64_t off = sl * ldc + static_cast<int64_t>(kvh) * D + d8;
      mma::cp_async16_zfill(Ks + jj * LD + d8, kc + off, valid);
      mma::cp_async16_zfill(Vs + jj * LD + d8, vc + off, valid);
    }
  } else {
    int64_t off[kChunks];
    bool valid[kChunks];
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      const int jj = c / (D / 8), d8 = (c % (D / 8)) * 8;
      const int j = j0 + jj;
      valid[u] = j < kend;
      const int64_t sl = valid[u] ? static_cast<int64_t>(ring[j / bs - b0]) * bs + j % bs : 0;
      off[u] = sl * ldc + static_cast<int64_t>(kvh) * D + d8;
    }
    uint4 kv[kChunks], vv[kChunks];
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      kv[u] = valid[u] ? load8_bf16(kc + off[u]) : make_uint4(0, 0, 0, 0);
      vv[u] = valid[u] ? load8_bf16(vc + off[u]) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      const int jj = c / (D / 8), d8 = (c % (D / 8)) * 8;
      *reinterpret_cast<uint4*>(Ks + jj * LD + d8) = kv[u];
      *reinterpret_cast<uint4*>(Vs + jj * LD + d8) = vv[u];
    }
  }
  mma::cp_async_commit();  // an empty group for the register path: the waits below count groups
}

// One kernel for the whole data flow of a tile (load, scores, softmax, P·V): splitting it would
// put S and P through memory, which is what the kernel exists to avoid. 241 registers at D = 128 over
// a bf16 cache (MT = 1): 2 blocks per SM. Bounding it to 168 (3 blocks) spills a few hundred bytes and
// ran no faster (prefill 1,024 rows 40,492 against 40,374 tok/s, H200, NOTES session 9).
template <typename CT, int D, int QV, int MT>
__global__ void __launch_bounds__(kThreadsOf<QV, MT>)
    flash_prefill_kernel(const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
                         const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt,
                         int bs, const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc, int64_t n,
                         int G, int QT, float scale_log2, float* __restrict__ out, int64_t ldo,
                         const float* /*rope_freq: the wgmma forms only; null here*/) {
  constexpr int LD = D + 8;
  constexpr int KD = D / 16;     // k-steps of Q·Kᵀ
  constexpr int DT = D / 8;      // 8-wide output tiles per row
  // Keys per softmax step: the whole tile at MT = 1; half of it at MT = 2, where scores of 64 keys
  // for two m-tiles next to their 128 accumulators would not fit in the registers.
  constexpr int kSub = MT == 1 ? kKeys : kKeys / 2;
  constexpr int NT = kSub / 8;  // 8-wide score tiles per row
  constexpr int kThreads = kThreadsOf<QV, MT>;
  static_assert(kThreads >= kRing, "one thread per block-table entry of a tile");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Stage st's K at stage + 2 * st * kKeys * LD, its V right after; Q shares stage 1's K at MT = 1
  // and follows the stages at MT = 2.
  __nv_bfloat16* stage = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* Qs = stage + (MT == 1 ? 2 : 4) * kKeys * LD;
  // Block-table entries of the next tiles: ring[t & 1] holds tile t's (see flash_table_entry).
  __shared__ int32_t ring[2][kRing];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  // The last row tiles (the most keys: rows of a prompt chunk come in position order) start first,
  // so that the light ones fill the tail of a grid larger than one wave.
  const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * QT;
  const int kvh = blockIdx.y;
  const int rows_here = static_cast<int>(n - r0 < QT ? n - r0 : QT);
  const int nq = QT * G;
  uint64_t done = 0;
  while (true) {
    uint64_t active;
    int32_t seq;
    int kend;
    if (!next_attention_pass(row_seq, row_pos, r0, rows_here, done, active, seq, kend)) break;

    __syncthreads();  // the previous pass is done with Qs, both stages and the ring
    {
      const int32_t e0 = flash_table_entry(tables, ldt, bs, seq, 0, kend);
      const int32_t e1 = flash_table_entry(tables, ldt, bs, seq, kKeys, kend);
      if (threadIdx.x < kRing) {
        ring[0][threadIdx.x] = e0;
        ring[1][threadIdx.x] = e1;
      }
    }
    for (int idx = threadIdx.x; idx < QV * (D / 2); idx += kThreads) {
      const int qv = idx / (D / 2), d = (idx % (D / 2)) * 2;
      const int i = qv / G, gg = qv % G;
      float2 v = make_float2(0.f, 0.f);
      if (qv < nq && i < rows_here && ((active >> i) & 1u)) {
        const float* src = q + (r0 + i) * ldq + static_cast<int64_t>(kvh * G + gg) * D + d;
        v = make_float2(src[0], src[1]);
      }
      *reinterpret_cast<uint32_t*>(Qs + qv * LD + d) = pack_bf16(v.x, v.y);
    }
    // Positions of this thread's query vectors (rows g and g+8 of each of the warp's m-tiles); −1: none.
    int qp[MT][2];
    int wmax = -1, wmin = INT32_MAX;  // over the warp's query vectors that have a row
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int qv = (warp * MT + mt) * 16 + g + 8 * h;
        const int i = qv / G;
        qp[mt][h] = qv < nq && i < rows_here && ((active >> i) & 1u) ? row_pos[r0 + i] : -1;
        wmax = max(wmax, qp[mt][h]);
        if (qp[mt][h] >= 0) wmin = min(wmin, qp[mt][h]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
      wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    }
    // Tile 2's entries, loaded now and stored into the ring after tile 0's compute.
    int32_t next_entry = flash_table_entry(tables, ldt, bs, seq, 2 * kKeys, kend);
    __syncthreads();  // Qs and the ring's first two tiles written

    uint32_t qf[MT == 1 ? KD : 1][4];
    if constexpr (MT == 1) {
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        ldsm_a(Qs + warp * 16 * LD + kd * 16, LD, lane, qf[kd]);
      }
    }
    // Lane addresses (bytes, shared space) of the warp's Q rows and of the K and V fragments' rows in
    // stage 0; fragments are at constant offsets from them.
    const uint32_t q_lane = mma::smem_addr(Qs + warp * MT * 16 * LD + mma::ldsm_a_lane(LD, lane));
    const uint32_t k_lane = mma::smem_addr(stage + mma::ldsm_b_nmajor_lane(LD, lane));
    const uint32_t v_lane = mma::smem_addr(stage + kKeys * LD + mma::ldsm_b_kmajor_lane(LD, lane));
    float o[MT][DT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    }
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
    if constexpr (MT == 1) __syncthreads();  // every warp holds its Q fragments: stage 1 may be loaded
    // Two stages: the loads of tile t + 1 are in flight while tile t is computed.
    flash_load_tile<CT, D, kThreads>(ring[0], bs, 0, kend, kc, vc, ldc, kvh, stage, stage + kKeys * LD);
    for (int j0 = 0, st = 0; j0 < kend; j0 += kKeys, st ^= 1) {
      if (j0 + kKeys < kend) {
        __nv_bfloat16* nk = stage + 2 * (st ^ 1) * kKeys * LD;
        flash_load_tile<CT, D, kThreads>(ring[st ^ 1], bs, j0 + kKeys, kend, kc, vc, ldc, kvh, nk,
                                         nk + kKeys * LD);
        mma::cp_async_wait<1>();  // this thread's copies of tile t have landed
      } else {
        mma::cp_async_wait<0>();
      }
      __syncthreads();  // everyone's copies of tile t have landed
      const uint32_t st_bytes = static_cast<uint32_t>(st * 2 * kKeys * LD * 2);
      // (the barrier at the end of the iteration keeps stage st intact until every warp is done)
#pragma unroll
      for (int sub = 0; sub < kKeys / kSub; ++sub) {
        const int js = j0 + sub * kSub;
        const uint32_t kt = k_lane + st_bytes + sub * kSub * LD * 2;
        const uint32_t vt = v_lane + st_bytes + sub * kSub * LD * 2;
        if (js <= wmax) {  // warp-uniform: else every key here lies after every query of the warp
          float s[MT][NT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
          }
#pragma unroll
          for (int kd = 0; kd < KD; ++kd) {
            uint32_t qa[MT][4];
            if constexpr (MT == 1) {
#pragma unroll
              for (int r = 0; r < 4; ++r) qa[0][r] = qf[kd][r];
            } else {
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) ldsm_x4_at(q_lane + (mt * 16 * LD + kd * 16) * 2, qa[mt]);
            }
#pragma unroll
            for (int nb = 0; nb < kSub / 16; ++nb) {
              uint32_t b[4];
              ldsm_x4_at(kt + (nb * 16 * LD + kd * 16) * 2, b);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(s[mt][2 * nb], qa[mt], b[0], b[1]);
                mma_bf16(s[mt][2 * nb + 1], qa[mt], b[2], b[3]);
              }
            }
          }
          // Causal mask (only where a key here may lie after a query of the warp) and online softmax,
          // per query vector (rows g and g+8 of each m-tile). The running max m is in the scaled log2
          // domain; max(raw) · scale equals max(raw · scale) (a positive scale keeps the order).
          const bool masked = js + kSub - 1 > wmin;  // warp-uniform
          bool rescale = false;
          float corr[MT][2];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (masked) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                  for (int e = 0; e < 2; ++e) {
                    float& v = s[mt][nt][2 * h + e];
                    v = js + nt * 8 + 2 * t4 + e > qp[mt][h] ? -INFINITY : v;
                  }
                }
              }
              // Pairwise (tree) max and sum: short dependency chains.
              float mx[NT];
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) mx[nt] = fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]);
#pragma unroll
              for (int w = NT / 2; w > 0; w >>= 1) {
#pragma unroll
                for (int nt = 0; nt < w; ++nt) mx[nt] = fmaxf(mx[nt], mx[nt + w]);
              }
              const float m_new = fmaxf(m[mt][h], quad_max(mx[0]) * scale_log2);
              const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no key yet: keep every exp at 0
              corr[mt][h] = exp2f(m[mt][h] - m_use);
              rescale |= corr[mt][h] != 1.f;
              float sum[NT];
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  float& v = s[mt][nt][2 * h + e];
                  v = exp2f(fmaf(v, scale_log2, -m_use));
                }
                sum[nt] = s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
              }
#pragma unroll
              for (int w = NT / 2; w > 0; w >>= 1) {
#pragma unroll
                for (int nt = 0; nt < w; ++nt) sum[nt] += sum[nt + w];
              }
              l[mt][h] =
                  l[mt][h] * corr[mt][h] + sum[0];  // this thread's columns; the quad's summed at the end
              m[mt][h] = m_new;
            }
          }
          // The accumulators are rescaled only when some running max of the warp moved (a factor of
          // exactly 1 elsewhere): past the first tiles of a long prompt, seldom.
          if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
              for (int dt = 0; dt < DT; ++dt) {
                o[mt][dt][0] *= corr[mt][0];
                o[mt][dt][1] *= corr[mt][0];
                o[mt][dt][2] *= corr[mt][1];
                o[mt][dt][3] *= corr[mt][1];
              }
            }
          }
          // O += P·V: the score accumulators are already in the A-fragment layout of the next mma.
#pragma unroll
          for (int kk = 0; kk < kSub / 16; ++kk) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma::pack_a_from_c(s[mt][2 * kk], s[mt][2 * kk + 1], a[mt]);
            }
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
              uint32_t b[4];
              ldsm_x4_t_at(vt + (kk * 16 * LD + dp * 16) * 2, b);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(o[mt][2 * dp], a[mt], b[0], b[1]);
                mma_bf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
              }
            }
          }
        }
      }
      // Tile t + 2's entries into the slot tile t's were in (read when tile t was issued, an
      // iteration ago); then the load of tile t + 3's, which has a tile's compute to arrive.
      if (threadIdx.x < kRing) ring[st][threadIdx.x] = next_entry;
      next_entry = flash_table_entry(tables, ldt, bs, seq, j0 + 3 * kKeys, kend);
      __syncthreads();  // stage st is consumed: the next iteration loads tile t + 2 into it
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float lt = quad_sum(l[mt][h]);
        if (qp[mt][h] < 0) continue;
        const int qv = (warp * MT + mt) * 16 + g + 8 * h;
        const int64_t row = r0 + qv / G;
        const int head = kvh * G + qv % G;
        const float inv = 1.0f / lt;
        float* dst = out + row * ldo + static_cast<int64_t>(head) * D + 2 * t4;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          dst[dt * 8] = o[mt][dt][2 * h] * inv;
          dst[dt * 8 + 1] = o[mt][dt][2 * h + 1] * inv;
        }
      }
    }
  }
}

// ---- The Hopper form (FlashForm::kWgmma, sm_90a): S = Q·Kᵀ by wgmma -------------------------------
// Two warpgroups per block, 64 query vectors each (128 per block, as kWide): each computes its
// 64 × 64 scores of a tile with wgmma.mma_async m64n64k16 straight from shared memory (Q and K
// K-major in 128-byte-swizzled atoms of 64 rows × 64 elements), so no Q fragments live in registers
// and no K fragments are loaded through ldmatrix; the scores land in each warp's registers in the
// mma.sync C layout (wgmma_util.cuh), and the softmax and P·V (mma.sync from the padded V stage) are
// the narrow form's. The scores' summation order over d differs from mma.sync's, so a row's bits
// depend on the form, never on the rows it shares a call with.
constexpr int kWgGroups = 2;
constexpr int kWgThreads = kWgGroups * 128;
// The wgmma kernels' block-size divisor (block_div): FastDiv in the lean form (kMode 3), int in the others.
template <int kMode>
using WgBlockDiv = std::conditional_t<kMode == 3, FastDiv, int>;
constexpr uint32_t kAtomBytes = 64 * 128;  // 64 rows × 128 bytes (64 bf16): one swizzle atom column

// kMode: 0 the wgmma form (kWgmma), 1 pipelined (kWgmmaPipelined), 2 pipelined with P·V through
// wgmma too (kWgmmaFull), 3 that with fewer instructions a tile (kWgmmaLean).
template <int D, int kMode>
constexpr size_t flash_wg_smem_bytes() {
  // 1,024 of slack to align the swizzled atoms, Q (each warpgroup's D / 64 atoms), the K stages
  // (D / 64 atoms each; two, three when pipelined), as many V stages: [64][D + 8] for ldmatrix, or
  // swizzled atoms like K's when P·V runs on wgmma.
  constexpr size_t stages = kMode >= 1 ? 3 : 2;
  constexpr size_t v_stage = kMode >= 2 ? (D / 64) * kAtomBytes : static_cast<size_t>(kKeys) * (D + 8) * 2;
  return 1024 + (kWgGroups + stages) * (D / 64) * kAtomBytes + stages * v_stage;
}

#ifdef VV_WGMMA
// Keys [j0, j0 + 64) of the kv head: K into the swizzled stage (chunk d8 of key jj: atom d8 / 8,
// chunk d8 % 8 of row jj), V into the padded stage, as flash_load_tile does.
// kSwV: V into swizzled atoms too (the same layout as K: for P·V on wgmma it is the MN-major B).
template <typename CT, int D, bool kSwV, typename BS>
__device__ __forceinline__ void flash_wg_load_tile(const int32_t* ring, BS bs, int j0, int kend,
                                                   const CT* __restrict__ kc, const CT* __restrict__ vc,
                                                   int64_t ldc, int kvh, unsigned char* Kst,
                                                   __nv_bfloat16* Vs) {
  constexpr int LD = D + 8;
  constexpr int kChunks = kKeys * (D / 8) / kWgThreads;
  const int b0 = block_div(bs, j0);
#pragma unroll
  for (int u = 0; u < kChunks; ++u) {
    const int c = threadIdx.x + u * kWgThreads;
    const int jj = c / (D / 8), d8 = c % (D / 8);
    const int j = j0 + jj;
    const bool valid = j < kend;
    const int64_t sl =
        valid ? static_cast<int64_t>(ring[block_div(bs, j) - b0]) * block_size(bs) + block_mod(bs, j) : 0;
    const int64_t off = sl * ldc + static_cast<int64_t>(kvh) * D + d8 * 8;
    unsigned char* kd = Kst + (d8 / 8) * kAtomBytes + sw128_offset(jj, d8 % 8);
    void* vd = kSwV ? static_cast<void*>(reinterpret_cast<unsigned char*>(Vs) + (d8 / 8) * kAtomBytes +
                                         sw128_offset(jj, d8 % 8))
                    : static_cast<void*>(Vs + jj * LD + d8 * 8);
    if constexpr (std::is_same_v<CT, __nv_bfloat16>) {
      mma::cp_async16_zfill(kd, kc + off, valid);
      mma::cp_async16_zfill(vd, vc + off, valid);
    } else {
      const uint4 kv = valid ? load8_bf16(kc + off) : make_uint4(0, 0, 0, 0);
      const uint4 vv = valid ? load8_bf16(vc + off) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(kd) = kv;
      *reinterpret_cast<uint4*>(vd) = vv;
    }
  }
  mma::cp_async_commit();
}
#endif

#ifdef VV_WGMMA
// 2^x in one MUFU.EX2, results below 2^-126 flushed to zero (exp2f spends three more instructions a
// value on those: a compare and two predicated scalings). In the softmax every weight is 2^(≤ 0) next
// to a row maximum's 2^0 = 1, so a flushed 2^-126 changes neither l nor, at f32, o.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The narrow form's online softmax and P·V for one warp's 16 query vectors over a 64-key tile whose
// scores s (raw, the mma.sync C layout) start at key j0; vt: the lane's ldmatrix address of the tile's
// padded V stage.
template <int D, bool kBranchless = false, bool kPv = true, bool kMask = true, bool kFtzExp = false>
__device__ __forceinline__ void flash_wg_softmax_pv(float (&s)[kKeys / 8][4], float (&o)[D / 8][4],
                                                    float (&m)[2], float (&l)[2], const int (&qp)[2],
                                                    int wmin, int j0, float scale_log2, uint32_t vt, int t4) {
  constexpr int LD = D + 8;
  constexpr int DT = D / 8;
  constexpr int NT = kKeys / 8;
  // kBranchless (while wgmmas are in flight, where ptxas serialises them over any branch): the mask
  // and the rescale always (exact either way: unmasked keys keep their scores, a factor of 1 is 1).
  // (kBranchless with kMask false: the caller knows no key of the tile lies past any query.)
  const bool masked = kBranchless ? kMask : j0 + kKeys - 1 > wmin;
  bool rescale = false;
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (masked) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[nt][2 * h + e];
          v = j0 + nt * 8 + 2 * t4 + e > qp[h] ? -INFINITY : v;
        }
      }
    }
    float mx[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
    for (int w = NT / 2; w > 0; w >>= 1) {
#pragma unroll
      for (int nt = 0; nt < w; ++nt) mx[nt] = fmaxf(mx[nt], mx[nt + w]);
    }
    const float m_new = fmaxf(m[h], quad_max(mx[0]) * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    corr[h] = kFtzExp ? exp2_ftz(m[h] - m_use) : exp2f(m[h] - m_use);
    rescale |= corr[h] != 1.f;
    float sum[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& v = s[nt][2 * h + e];
        v = kFtzExp ? exp2_ftz(fmaf(v, scale_log2, -m_use)) : exp2f(fmaf(v, scale_log2, -m_use));
      }
      sum[nt] = s[nt][2 * h] + s[nt][2 * h + 1];
    }
#pragma unroll
    for (int w = NT / 2; w > 0; w >>= 1) {
#pragma unroll
      for (int nt = 0; nt < w; ++nt) sum[nt] += sum[nt + w];
    }
    l[h] = l[h] * corr[h] + sum[0];
    m[h] = m_new;
  }
  if (kBranchless || __any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[0];
      o[dt][2] *= corr[1];
      o[dt][3] *= corr[1];
    }
  }
  if constexpr (kPv) {  // (else P·V is the caller's, on wgmma)
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
      mma::pack_a_from_c(s[2 * kk], s[2 * kk + 1], a);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_t_at(vt + (kk * 16 * LD + dp * 16) * 2, b);
        mma_bf16(o[2 * dp], a, b[0], b[1]);
        mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
}

#endif

template <typename CT, int D, int kMode, bool kRope = false>
__global__ void __launch_bounds__(kWgThreads, 1)
    flash_wg_kernel(const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
                    const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt,
                    WgBlockDiv<kMode> bs, const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc,
                    int64_t n, int G, int QT, float scale_log2, float* __restrict__ out, int64_t ldo,
                    const float* __restrict__ rope_freq) {
#ifdef VV_WGMMA
  constexpr int LD = D + 8;
  constexpr int DT = D / 8;      // 8-wide output tiles per row
  constexpr int NT = kKeys / 8;  // 8-wide score tiles per row
  constexpr int kA = D / 64;     // swizzle atoms along d
  constexpr int QV = 64 * kWgGroups;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr bool kPipe = kMode >= 1, kPvWg = kMode >= 2;
  // kMode 3 (kWgmmaLean): kMode 2 with the block size divided by FastDiv, 2^x from one ex2.approx.ftz and
  // no causal mask on tiles that end at or before the block's first query.
  constexpr bool kLean = kMode == 3;
  constexpr int kStages = kPipe ? 3 : 2;
  constexpr int kVStage = kPvWg ? kA * kAtomBytes / 2 : kKeys * LD;  // bf16 elements per V stage
  __shared__ int32_t ring[kStages][kRing];
  __shared__ int span[kWgGroups * 4];      // each warp's largest query position
  __shared__ int span_min[kWgGroups * 4];  // and its smallest (INT32_MAX: none)
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t q_addr = (raw + 1023) & ~1023u;  // warpgroup w's Q atoms at q_addr + w·kA·kAtomBytes
  const uint32_t k_addr = q_addr + kWgGroups * kA * kAtomBytes;  // stage st at + st·kA·kAtomBytes
  unsigned char* Qb = smem_raw + (q_addr - raw);
  unsigned char* Kb = smem_raw + (k_addr - raw);
  // V stage st at Vb + st·kVStage (elements); its shared address at v_addr + 2·st·kVStage.
  __nv_bfloat16* Vb = reinterpret_cast<__nv_bfloat16*>(Kb + kStages * kA * kAtomBytes);
  const uint32_t v_addr = k_addr + kStages * kA * kAtomBytes;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3, wg = warp >> 2;
  const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * QT;
  const int kvh = blockIdx.y;
  const int rows_here = static_cast<int>(n - r0 < QT ? n - r0 : QT);
  const int nq = QT * G;
  const uint32_t v_lane = mma::smem_addr(Vb + mma::ldsm_b_kmajor_lane(LD, lane));
  uint64_t done = 0;
  while (true) {
    uint64_t active;
    int32_t seq;
    int kend;
    if (!next_attention_pass(row_seq, row_pos, r0, rows_here, done, active, seq, kend)) break;

    __syncthreads();  // the previous pass is done with Q, both stages, the ring and span
    {
#pragma unroll
      for (int t = 0; t < kStages; ++t) {
        const int32_t e = flash_table_entry(tables, ldt, bs, seq, t * kKeys, kend);
        if (threadIdx.x < kRing) ring[t][threadIdx.x] = e;
      }
    }
    // Q as bf16 into each warpgroup's swizzled atoms: vector qv is row qv % 64 of warpgroup qv / 64.
    auto q_store = [&](int qv, int d, float x0, float x1) {  // elements d, d + 1 of vector qv
      unsigned char* dst =
          Qb + ((qv >> 6) * kA + d / 64) * kAtomBytes + sw128_offset(qv & 63, (d % 64) / 8) + (d % 8) * 2;
      *reinterpret_cast<uint32_t*>(dst) = pack_bf16(x0, x1);
    };
    if constexpr (!kRope) {
      (void)rope_freq;
      for (int idx = threadIdx.x; idx < QV * (D / 2); idx += kWgThreads) {
        const int qv = idx / (D / 2), d = (idx % (D / 2)) * 2;
        const int i = qv / G, gg = qv % G;
        float2 v = make_float2(0.f, 0.f);
        if (qv < nq && i < rows_here && ((active >> i) & 1u)) {
          const float* src = q + (r0 + i) * ldq + static_cast<int64_t>(kvh * G + gg) * D + d;
          v = make_float2(src[0], src[1]);
        }
        q_store(qv, d, v.x, v.y);
      }
    } else {
      // rope fused in (the caller skipped q's): per (row, frequency pair) the cos/sin once for the G
      // heads of the row, then rope_rotate on each, the bits of rope_kv_kernel's.
      constexpr int kHalf = D / 2;
      for (int idx = threadIdx.x; idx < QT * (D / 4); idx += kWgThreads) {
        const int i = idx / (D / 4), f = (idx % (D / 4)) * 2;
        const bool live = i < rows_here && ((active >> i) & 1u);
        float c0 = 0.f, s0 = 0.f, c1 = 0.f, s1 = 0.f;
        if (live) {
          const float p = static_cast<float>(row_pos[r0 + i]);
          const float phi0 = p * rope_freq[f], phi1 = p * rope_freq[f + 1];
          c0 = cosf(phi0), s0 = sinf(phi0), c1 = cosf(phi1), s1 = sinf(phi1);
        }
        for (int gg = 0; gg < G; ++gg) {
          float y[4] = {0.f, 0.f, 0.f, 0.f};  // elements f, f + 1, f + D/2, f + 1 + D/2
          if (live) {
            const float* src = q + (r0 + i) * ldq + static_cast<int64_t>(kvh * G + gg) * D + f;
            rope_rotate(src[0], src[kHalf], c0, s0, y[0], y[2]);
            rope_rotate(src[1], src[kHalf + 1], c1, s1, y[1], y[3]);
          }
          q_store(i * G + gg, f, y[0], y[1]);
          q_store(i * G + gg, f + kHalf, y[2], y[3]);
        }
      }
      for (int idx = threadIdx.x; idx < (QV - nq) * (D / 2); idx += kWgThreads) {  // past QT·G: zeros
        q_store(nq + idx / (D / 2), (idx % (D / 2)) * 2, 0.f, 0.f);
      }
    }
    int qp[2];
    int wmax = -1, wmin = INT32_MAX;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qv = warp * 16 + g + 8 * h;
      const int i = qv / G;
      qp[h] = qv < nq && i < rows_here && ((active >> i) & 1u) ? row_pos[r0 + i] : -1;
      wmax = max(wmax, qp[h]);
      if (qp[h] >= 0) wmin = min(wmin, qp[h]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
      wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    }
    if (lane == 0) {
      span[warp] = wmax;
      if constexpr (kLean) span_min[warp] = wmin;
    }
    int32_t next_entry = flash_table_entry(tables, ldt, bs, seq, kStages * kKeys, kend);
    fence_proxy_async_shared();  // Q's stores, for wgmma
    __syncthreads();             // Q, the ring's first two tiles and span written
    int gmax = -1;               // the warpgroup's: its wgmmas are collective
#pragma unroll
    for (int w = 0; w < 4; ++w) gmax = max(gmax, span[wg * 4 + w]);

    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    if constexpr (!kPipe) {
      flash_wg_load_tile<CT, D, kPvWg>(ring[0], bs, 0, kend, kc, vc, ldc, kvh, Kb, Vb);
      for (int j0 = 0, st = 0; j0 < kend; j0 += kKeys, st ^= 1) {
        if (j0 + kKeys < kend) {
          flash_wg_load_tile<CT, D, kPvWg>(ring[st ^ 1], bs, j0 + kKeys, kend, kc, vc, ldc, kvh,
                                           Kb + (st ^ 1) * kA * kAtomBytes, Vb + (st ^ 1) * kVStage);
          mma::cp_async_wait<1>();
        } else {
          mma::cp_async_wait<0>();
        }
        fence_proxy_async_shared();  // this thread's K copies, for wgmma
        __syncthreads();             // everyone's copies of tile t have landed
        if (j0 <= gmax) {            // warpgroup-uniform
          float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
        wgmma_fence_operands<NT * 4>(&s[0][0]);
        wgmma_fence();
        const uint32_t qa = q_addr + wg * kA * kAtomBytes, ka = k_addr + st * kA * kAtomBytes;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {  // 32 bytes of each 128-byte row per k16 step
          const uint32_t off = (kk / 4) * kAtomBytes + 32 * (kk % 4);
          wgmma_bf16<64>(&s[0][0], sw128_desc(qa + off), sw128_desc(ka + off));
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands<NT * 4>(&s[0][0]);
        if (j0 <= wmax) {  // warp-uniform: else every key of the tile lies after every query of the warp
          flash_wg_softmax_pv<D>(s, o, m, l, qp, wmin, j0, scale_log2,
                                 v_lane + static_cast<uint32_t>(st * kKeys * LD * 2), t4);
        }
        }
        if (threadIdx.x < kRing) ring[st][threadIdx.x] = next_entry;
        next_entry = flash_table_entry(tables, ldt, bs, seq, j0 + 3 * kKeys, kend);
        __syncthreads();  // stage st is consumed (the wgmmas waited for): the next iteration refills it
      }
    } else {
      // Three stages: tile t's V is read by P·V while tile t + 1's scores are computed (issued before
      // tile t's softmax, waited for in the next iteration) and tile t + 2 is loading. Ring slot
      // t mod 3 holds tile t's block-table entries.
      float s[NT][4], sn[NT][4];  // tile t's scores; tile t + 1's, in flight
      flash_wg_load_tile<CT, D, kPvWg>(ring[0], bs, 0, kend, kc, vc, ldc, kvh, Kb, Vb);
      if (kKeys < kend) {
        flash_wg_load_tile<CT, D, kPvWg>(ring[1], bs, kKeys, kend, kc, vc, ldc, kvh, Kb + kA * kAtomBytes,
                                         Vb + kVStage);
        mma::cp_async_wait<1>();
      } else {
        mma::cp_async_wait<0>();
      }
      fence_proxy_async_shared();
      __syncthreads();  // tile 0 has landed
      const uint32_t qa = q_addr + wg * kA * kAtomBytes;
      auto issue_scores = [&](int stage) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) sn[nt][0] = sn[nt][1] = sn[nt][2] = sn[nt][3] = 0.f;
        wgmma_fence_operands<NT * 4>(&sn[0][0]);
        wgmma_fence();
        const uint32_t ka = k_addr + stage * kA * kAtomBytes;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          const uint32_t off = (kk / 4) * kAtomBytes + 32 * (kk % 4);
          wgmma_bf16<64>(&sn[0][0], sw128_desc(qa + off), sw128_desc(ka + off));
        }
        wgmma_commit();
      };
      issue_scores(0);
      // Tile t at keys j0: kMask false where no key of the tile lies past any query of the block.
      auto tile = [&](int j0, int t, auto mask_tag) {
        constexpr bool kMask = decltype(mask_tag)::value;
        const int st = t % 3;
        mma::cp_async_wait<0>();  // tile t + 1 (this thread's copies)
        // wgf: tile t − 1's P·V wgmmas read the V stage this iteration refills: done before the
        // barrier, so that no warpgroup's are still reading when any thread's copies start.
        if constexpr (kPvWg) wgmma_wait<0>();
        fence_proxy_async_shared();
        __syncthreads();  // tile t + 1 has landed; every warp is done with tile t − 1's stage
        if (j0 + 2 * kKeys < kend) {
          const int s2 = (t + 2) % 3;
          flash_wg_load_tile<CT, D, kPvWg>(ring[s2], bs, j0 + 2 * kKeys, kend, kc, vc, ldc, kvh,
                                           Kb + s2 * kA * kAtomBytes, Vb + s2 * kVStage);
        }
        wgmma_wait<0>();  // tile t's scores (and tile t − 1's P·V)
        wgmma_fence_operands<NT * 4>(&sn[0][0]);
        if constexpr (kPvWg) wgmma_fence_operands<DT * 4>(&o[0][0]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) s[nt][r] = sn[nt][r];
        }
        // Tile t + 3's entries into tile t's slot (read when tile t was issued, two iterations ago).
        if (threadIdx.x < kRing) ring[st][threadIdx.x] = next_entry;
        next_entry = flash_table_entry(tables, ldt, bs, seq, j0 + 4 * kKeys, kend);
        // Unconditional (a wgmma in a branch, waited for outside it, is serialised by ptxas): past the
        // last tile the scores of a stale stage are computed and never read.
        issue_scores((t + 1) % 3);
        // Every warp takes every tile, branch-free (no branch while the next scores are in flight,
        // which ptxas answers by serialising the wgmmas): past a warp's last query the mask makes the
        // tile's weights exact zeros and leaves m, l and o as they were.
        if constexpr (!kPvWg) {
          flash_wg_softmax_pv<D, true, true, kMask>(s, o, m, l, qp, wmin, j0, scale_log2,
                                                    v_lane + static_cast<uint32_t>(st * kKeys * LD * 2), t4);
        } else {
          // The softmax (it rescales o: the previous tile's P·V was waited for above), then
          // O += P·V on wgmma: P (bf16, the score registers' A layout) from registers, V's swizzled
          // stage as the MN-major B (rows of 64 d at one key; the next 64 d a 8,192-byte atom on).
          flash_wg_softmax_pv<D, true, false, kMask, kLean>(s, o, m, l, qp, wmin, j0, scale_log2, 0, t4);
          uint32_t pa[kKeys / 16][4];
#pragma unroll
          for (int kk = 0; kk < kKeys / 16; ++kk) {
            mma::pack_a_from_c(s[2 * kk], s[2 * kk + 1], pa[kk]);
          }
          wgmma_fence_operands<DT * 4>(&o[0][0]);
          wgmma_fence();
          const uint32_t vs = v_addr + static_cast<uint32_t>(st * kVStage * 2);
#pragma unroll
          for (int kk = 0; kk < kKeys / 16; ++kk) {  // keys 16kk..16kk+15: two 8-row groups, 2,048 bytes
            wgmma_bf16_rs_mn<D>(&o[0][0], pa[kk], sw128_desc_mn(vs + 2048 * kk, kAtomBytes));
          }
          wgmma_commit();
        }
      };
      // The block's rows all lie at or past bmin: tiles ending at or before it need no causal mask
      // (both loops are block-uniform: every thread passes the same barriers).
      int j_plain = 0;
      if constexpr (kLean) {
        int bmin = INT32_MAX;
#pragma unroll
        for (int w = 0; w < kWgGroups * 4; ++w) bmin = min(bmin, span_min[w]);
        j_plain = bmin < INT32_MAX ? min(kend, (bmin + 1) / kKeys * kKeys) : 0;
      }
      int j0 = 0, t = 0;
      for (; j0 < j_plain; j0 += kKeys, ++t) tile(j0, t, std::false_type{});
      for (; j0 < kend; j0 += kKeys, ++t) tile(j0, t, std::true_type{});
      wgmma_wait<0>();  // the scores issued past the last tile (and the last P·V)
      if constexpr (kPvWg) wgmma_fence_operands<DT * 4>(&o[0][0]);
      __syncthreads();  // every warp is done with the stages before the next pass refills them
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float lt = quad_sum(l[h]);
      if (qp[h] < 0) continue;
      const int qv = warp * 16 + g + 8 * h;
      const int64_t row = r0 + qv / G;
      const int head = kvh * G + qv % G;
      const float inv = 1.0f / lt;
      float* dst = out + row * ldo + static_cast<int64_t>(head) * D + 2 * t4;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        dst[dt * 8] = o[dt][2 * h] * inv;
        dst[dt * 8 + 1] = o[dt][2 * h + 1] * inv;
      }
    }
  }
#else
  __trap();  // launched only on sm_90 (FlashForm::kWgmma is taken there)
#endif
}

// Launches one form's kernel: QV query vectors per block of `threads`, `smem` bytes of dynamic shared
// memory (allowed on the current device on first use).
template <typename CT, typename BS = int, typename Kernel>
void launch_kernel(Kernel kernel, size_t smem, int threads, int QV, const Tensor& q,
                   const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape, Tensor& out,
                   int sms, cudaStream_t s, const float* rope_freq = nullptr) {
  allow_dynamic_smem(kernel, smem);
  const int G = shape.heads / shape.kv_heads;
  const int64_t n = q.rows();
  // A decode-shaped call (at most one row per sequence: deterministic mode sends those here too)
  // too small to fill the GPU takes one row per block instead of a tile of QT rows from several
  // sequences, taken in passes. A row's bits do not change: its query vectors are computed alone
  // (the mma rows of others do not mix in) and the keys past it that its tile mates brought in are
  // masked to exact zeros (scale 1, P = 0).
  int QT = QV / G;
  if (sms > 0 && (n + QT - 1) / QT * shape.kv_heads < sms && n <= rows.block_tables.rows()) QT = 1;
  const dim3 grid(static_cast<unsigned>((n + QT - 1) / QT), static_cast<unsigned>(shape.kv_heads));
  const float scale_log2 = shape.scale * 1.4426950408889634f;
  kernel<<<grid, threads, smem, s>>>(q.ptr<const float>(), q.row_stride(), rows.row_seq.ptr<const int32_t>(),
                                     rows.row_pos.ptr<const int32_t>(),
                                     rows.block_tables.ptr<const int32_t>(), rows.block_tables.row_stride(),
                                     block_divisor<BS>(rows.block_size), static_cast<const CT*>(cache.k.data),
                                     static_cast<const CT*>(cache.v.data), cache.k.row_stride(), n, G, QT,
                                     scale_log2, out.ptr<float>(), out.row_stride(), rope_freq);
}

template <typename CT, int D, int QV, int MT>
void launch(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
            Tensor& out, int sms, cudaStream_t s) {
  launch_kernel<CT>(flash_prefill_kernel<CT, D, QV, MT>, flash_smem_bytes<D, QV, MT>(), kThreadsOf<QV, MT>,
                    QV, q, rows, cache, shape, out, sms, s);
}

// rope_freq: the kRope instantiation (bf16 caches only; flash_form_ropes), which applies rope to q.
template <typename CT, int D, int kMode>
void launch_wg(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
               Tensor& out, int sms, cudaStream_t s, const float* rope_freq) {
  if constexpr (std::is_same_v<CT, __nv_bfloat16>) {
    if (rope_freq != nullptr) {
      launch_kernel<CT, WgBlockDiv<kMode>>(flash_wg_kernel<CT, D, kMode, true>,
                                           flash_wg_smem_bytes<D, kMode>(), kWgThreads, 64 * kWgGroups, q,
                                           rows, cache, shape, out, sms, s, rope_freq);
      return;
    }
  }
  launch_kernel<CT, WgBlockDiv<kMode>>(flash_wg_kernel<CT, D, kMode>, flash_wg_smem_bytes<D, kMode>(),
                                       kWgThreads, 64 * kWgGroups, q, rows, cache, shape, out, sms, s,
                                       nullptr);
}

template <typename CT, int D>
void launch_form(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                 const AttentionShape& shape, Tensor& out, int sms, cudaStream_t s, FlashForm form,
                 const float* rope_freq) {
  switch (form) {
    case FlashForm::kWide:
      launch<CT, D, 128, 1>(q, rows, cache, shape, out, sms, s);
      break;
    case FlashForm::kTwoTiles:
      launch<CT, D, 128, 2>(q, rows, cache, shape, out, sms, s);
      break;
    case FlashForm::kWgmma:
      launch_wg<CT, D, 0>(q, rows, cache, shape, out, sms, s, rope_freq);
      break;
    case FlashForm::kWgmmaPipelined:
      launch_wg<CT, D, 1>(q, rows, cache, shape, out, sms, s, rope_freq);
      break;
    case FlashForm::kWgmmaFull:
      launch_wg<CT, D, 2>(q, rows, cache, shape, out, sms, s, rope_freq);
      break;
    case FlashForm::kWgmmaLean:
      launch_wg<CT, D, 3>(q, rows, cache, shape, out, sms, s, rope_freq);
      break;
    default:
      launch<CT, D, kFlashQueryVectors, 1>(q, rows, cache, shape, out, sms, s);
      break;
  }
}

template <typename CT>
void launch_d(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
              Tensor& out, int sms, cudaStream_t s, FlashForm form, const float* rope_freq) {
  form = flash_form_taken(form, shape.heads, shape.kv_heads);
  if (shape.head_dim == 64) {
    launch_form<CT, 64>(q, rows, cache, shape, out, sms, s, form, rope_freq);
  } else {
    launch_form<CT, 128>(q, rows, cache, shape, out, sms, s, form, rope_freq);
  }
}

}  // namespace

void flash_prefill_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                             const AttentionShape& shape, Tensor& out, cudaStream_t s, int sms,
                             FlashForm form, const float* rope_freq) {
  if (q.rows() == 0) return;
  if (rope_freq != nullptr &&
      !flash_form_ropes(flash_form_taken(form, shape.heads, shape.kv_heads), cache.k.dtype == DType::kBF16)) {
    std::fprintf(stderr, "vibevoice: flash_prefill_attention: rope fused into a form that cannot apply it\n");
    std::abort();  // a caller's bug (the backend asks flash_form_ropes first): never a wrong result
  }
  switch (cache.k.dtype) {
    case DType::kBF16:
      launch_d<__nv_bfloat16>(q, rows, cache, shape, out, sms, s, form, rope_freq);
      break;
    case DType::kF16:
      launch_d<__half>(q, rows, cache, shape, out, sms, s, form, rope_freq);
      break;
    default:
      launch_d<float>(q, rows, cache, shape, out, sms, s, form, rope_freq);
      break;
  }
}

}  // namespace vv::cuda
