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
#include <type_traits>

#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/prefill_attention.cuh"

namespace vv::cuda {
namespace {

// QV query vectors per block (kFlashQueryVectors, or 128 with VV_CUDA_FLASH_QV=128): QV / 16 warps.
template <int QV>
constexpr int kThreadsOf = QV / 16 * 32;
constexpr int kKeys = 64;  // keys per K/V tile

using mma::ldsm_a;
using mma::ldsm_b_kmajor;
using mma::ldsm_b_nmajor;
using mma::mma_bf16;
using mma::pack_bf16;
using mma::quad_max;
using mma::quad_sum;

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
// ldmatrix's eight row addresses on distinct banks); a pass's Q [QV][D+8] is staged in the second
// stage (its K, and its V too at QV = 128) before the key loop starts (its fragments then live in
// registers).
template <int D>
constexpr size_t flash_smem_bytes() {
  return static_cast<size_t>(4) * kKeys * (D + 8) * 2;
}

// Issues the loads of keys [j0, j0 + 64) of the kv head into one stage. A bf16 cache goes through
// cp.async (nothing waits here; zeros past kend); other cache types are rounded to bf16 through
// registers, every load of the thread issued before its first store.
template <typename CT, int D, int kThreads>
__device__ __forceinline__ void flash_load_tile(const int32_t* __restrict__ tables, int64_t ldt, int bs,
                                                int seq, int j0, int kend, const CT* __restrict__ kc,
                                                const CT* __restrict__ vc, int64_t ldc, int kvh,
                                                __nv_bfloat16* Ks, __nv_bfloat16* Vs) {
  constexpr int LD = D + 8;
  constexpr int kChunks = kKeys * (D / 8) / kThreads;  // 16-byte chunks per thread (8 or 4)
  int64_t off[kChunks];
  bool valid[kChunks];
#pragma unroll
  for (int u = 0; u < kChunks; ++u) {
    const int c = threadIdx.x + u * kThreads;
    const int jj = c / (D / 8), d8 = (c % (D / 8)) * 8;
    const int j = j0 + jj;
    valid[u] = j < kend;
    const int64_t sl = valid[u] ? static_cast<int64_t>(tables[seq * ldt + j / bs]) * bs + j % bs : 0;
    off[u] = sl * ldc + static_cast<int64_t>(kvh) * D + d8;
  }
  if constexpr (std::is_same_v<CT, __nv_bfloat16>) {
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int c = threadIdx.x + u * kThreads;
      const int jj = c / (D / 8), d8 = (c % (D / 8)) * 8;
      mma::cp_async16_zfill(Ks + jj * LD + d8, kc + off[u], valid[u]);
      mma::cp_async16_zfill(Vs + jj * LD + d8, vc + off[u], valid[u]);
    }
  } else {
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
// a bf16 cache: 2 blocks per SM. Bounding it to 168 (3 blocks) spills a few hundred bytes and ran no
// faster (prefill 1,024 rows 40,492 against 40,374 tok/s, H200, NOTES session 9).
template <typename CT, int D, int QV>
__global__ void __launch_bounds__(kThreadsOf<QV>)
    flash_prefill_kernel(const float* __restrict__ q, int64_t ldq, const int32_t* __restrict__ row_seq,
                         const int32_t* __restrict__ row_pos, const int32_t* __restrict__ tables, int64_t ldt,
                         int bs, const CT* __restrict__ kc, const CT* __restrict__ vc, int64_t ldc, int64_t n,
                         int G, int QT, float scale_log2, float* __restrict__ out, int64_t ldo) {
  constexpr int LD = D + 8;
  constexpr int KD = D / 16;     // k-steps of Q·Kᵀ
  constexpr int DT = D / 8;      // 8-wide output tiles per row
  constexpr int NT = kKeys / 8;  // 8-wide score tiles per row
  constexpr int kThreads = kThreadsOf<QV>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Stage st's K at stage + 2 * st * kKeys * LD, its V right after; Q shares stage 1's K.
  __nv_bfloat16* stage = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* Qs = stage + 2 * kKeys * LD;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  // The last row tiles (the most keys: rows of a prompt chunk come in position order) start first,
  // so that the light ones fill the tail of a grid larger than one wave.
  const int64_t r0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * QT;
  const int kvh = blockIdx.y;
  const int rows_here = static_cast<int>(n - r0 < QT ? n - r0 : QT);
  const int nq = QT * G;
  uint64_t done = 0;
  while (true) {
    int first = -1;
    for (int i = 0; i < rows_here; ++i) {
      if (!((done >> i) & 1u)) {
        first = i;
        break;
      }
    }
    if (first < 0) break;
    const int32_t seq = row_seq[r0 + first];
    uint64_t active = 0;
    int kend = 0;
    for (int i = first; i < rows_here; ++i) {
      if (!((done >> i) & 1u) && row_seq[r0 + i] == seq) {
        active |= uint64_t{1} << i;
        kend = max(kend, row_pos[r0 + i] + 1);
      }
    }
    done |= active;

    __syncthreads();  // the previous pass is done with Qs and both stages
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
    // Positions of this thread's two query vectors (rows g and g+8 of the warp's 16); −1: none.
    int qp[2];
    int wmax = -1;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int qv = warp * 16 + g + 8 * h;
      const int i = qv / G;
      qp[h] = qv < nq && i < rows_here && ((active >> i) & 1u) ? row_pos[r0 + i] : -1;
      wmax = max(wmax, qp[h]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
    __syncthreads();  // Qs written

    uint32_t qf[KD][4];
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      ldsm_a(Qs + warp * 16 * LD + kd * 16, LD, lane, qf[kd]);
    }
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    __syncthreads();  // every warp holds its Q fragments: stage 1 may be loaded
    // Two stages: the loads of tile t + 1 are in flight while tile t is computed.
    flash_load_tile<CT, D, kThreads>(tables, ldt, bs, seq, 0, kend, kc, vc, ldc, kvh, stage,
                                     stage + kKeys * LD);
    for (int j0 = 0, st = 0; j0 < kend; j0 += kKeys, st ^= 1) {
      if (j0 + kKeys < kend) {
        __nv_bfloat16* nk = stage + 2 * (st ^ 1) * kKeys * LD;
        flash_load_tile<CT, D, kThreads>(tables, ldt, bs, seq, j0 + kKeys, kend, kc, vc, ldc, kvh, nk,
                                         nk + kKeys * LD);
        mma::cp_async_wait<1>();  // this thread's copies of tile t have landed
      } else {
        mma::cp_async_wait<0>();
      }
      __syncthreads();  // everyone's copies of tile t have landed
      const __nv_bfloat16* Ks = stage + 2 * st * kKeys * LD;
      const __nv_bfloat16* Vs = Ks + kKeys * LD;
      // (the barrier at the end of the iteration keeps stage st intact until every warp is done)
      if (j0 <= wmax) {  // warp-uniform: else every key of the tile lies after every query of the warp

        float s[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
        for (int nb = 0; nb < kKeys / 16; ++nb) {
          uint32_t b0, b1, b2, b3;
          ldsm_b_nmajor(Ks + nb * 16 * LD + kd * 16, LD, lane, b0, b1, b2, b3);
          mma_bf16(s[2 * nb], qf[kd], b0, b1);
          mma_bf16(s[2 * nb + 1], qf[kd], b2, b3);
        }
      }
      // Causal mask and online softmax, per query vector (rows g and g+8 of the warp's 16).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = j0 + nt * 8 + 2 * t4 + e;
            float& v = s[nt][2 * h + e];
            v = j > qp[h] ? -INFINITY : v * scale_log2;
            mx = fmaxf(mx, v);
          }
        }
        mx = quad_max(mx);
        const float m_new = fmaxf(m[h], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no key yet: keep every exp at 0
        const float corr = exp2f(m[h] - m_use);
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = s[nt][2 * h + e];
            v = exp2f(v - m_use);
            sum += v;
          }
        }
        l[h] = l[h] * corr + sum;  // this thread's columns; the quad is summed at the end
        m[h] = m_new;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[dt][2 * h] *= corr;
          o[dt][2 * h + 1] *= corr;
        }
      }
      // O += P·V: the score accumulators are already in the A-fragment layout of the next mma.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t a[4];
        a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b0, b1, b2, b3;
          ldsm_b_kmajor(Vs + kk * 16 * LD + dp * 16, LD, lane, b0, b1, b2, b3);
          mma_bf16(o[2 * dp], a, b0, b1);
          mma_bf16(o[2 * dp + 1], a, b2, b3);
        }
      }
      }
      __syncthreads();  // stage st is consumed: the next iteration loads tile t + 2 into it
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
}

template <typename CT, int D, int QV>
void launch(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
            Tensor& out, int sms, cudaStream_t s) {
  constexpr size_t smem = flash_smem_bytes<D>();
  static bool raised = false;  // per instantiation: allow > 48 KB of dynamic shared memory
  if (!raised) {
    cudaFuncSetAttribute(flash_prefill_kernel<CT, D, QV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem));
    raised = true;
  }
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
  flash_prefill_kernel<CT, D, QV><<<grid, kThreadsOf<QV>, smem, s>>>(
      q.ptr<const float>(), q.row_stride(), rows.row_seq.ptr<const int32_t>(),
      rows.row_pos.ptr<const int32_t>(), rows.block_tables.ptr<const int32_t>(),
      rows.block_tables.row_stride(), rows.block_size, static_cast<const CT*>(cache.k.data),
      static_cast<const CT*>(cache.v.data), cache.k.row_stride(), n, G, QT, scale_log2, out.ptr<float>(),
      out.row_stride());
}

template <typename CT>
void launch_d(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
              Tensor& out, int sms, cudaStream_t s, int qv) {
  // 128 query vectors per block only where a tile has at most 64 rows (the pass bitmask's width).
  const bool wide = qv == 128 && shape.heads / shape.kv_heads >= 2;
  if (shape.head_dim == 64) {
    if (wide) {
      launch<CT, 64, 128>(q, rows, cache, shape, out, sms, s);
    } else {
      launch<CT, 64, kFlashQueryVectors>(q, rows, cache, shape, out, sms, s);
    }
  } else if (wide) {
    launch<CT, 128, 128>(q, rows, cache, shape, out, sms, s);
  } else {
    launch<CT, 128, kFlashQueryVectors>(q, rows, cache, shape, out, sms, s);
  }
}

}  // namespace

void flash_prefill_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                             const AttentionShape& shape, Tensor& out, cudaStream_t s, int sms, int qv) {
  if (q.rows() == 0) return;
  switch (cache.k.dtype) {
    case DType::kBF16:
      launch_d<__nv_bfloat16>(q, rows, cache, shape, out, sms, s, qv);
      break;
    case DType::kF16:
      launch_d<__half>(q, rows, cache, shape, out, sms, s, qv);
      break;
    default:
      launch_d<float>(q, rows, cache, shape, out, sms, s, qv);
      break;
  }
}

}  // namespace vv::cuda
