// AVX2 paged attention: per row and group of query heads sharing a kv head (each k/v row loaded
// once for the group), keys are visited in blocks of 64 positions with an online (flash-style) f32
// softmax: scores of a block, its max, one rescale of the running sum and output, then
// exp(s − max)·v accumulated. Memory is O(group·head_dim) per task whatever the context.
// The order of every sum is fixed by (row, head) alone, so results are deterministic.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/vector_math_avx2.h"

namespace vv::avx2 {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kBlock = 64;
constexpr int kMaxGroup = 16;             // query heads processed together
constexpr int kMaxGroupFloats = 16 * 128;  // their output accumulators

template <DType T>
inline __m256 load8(const void* p, int64_t i) {
  if constexpr (T == DType::kBF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

// sc[i] = q·k_i for 8 key rows: 8-lane partial sums over d (FMA, d ascending), reduced by a fixed
// hadd tree, then the D%8 tail added in order.
template <DType KT>
inline void dot8(const float* q, const void* const* k, int D, float* sc) {
  const int d8 = D / 8 * 8;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int d = 0; d < d8; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    a0 = _mm256_fmadd_ps(qv, load8<KT>(k[0], d), a0);
    a1 = _mm256_fmadd_ps(qv, load8<KT>(k[1], d), a1);
    a2 = _mm256_fmadd_ps(qv, load8<KT>(k[2], d), a2);
    a3 = _mm256_fmadd_ps(qv, load8<KT>(k[3], d), a3);
    a4 = _mm256_fmadd_ps(qv, load8<KT>(k[4], d), a4);
    a5 = _mm256_fmadd_ps(qv, load8<KT>(k[5], d), a5);
    a6 = _mm256_fmadd_ps(qv, load8<KT>(k[6], d), a6);
    a7 = _mm256_fmadd_ps(qv, load8<KT>(k[7], d), a7);
  }
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  const __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_store_ps(sc, r);
  for (int d = d8; d < D; ++d)
    for (int i = 0; i < 8; ++i) sc[i] = std::fma(q[d], ref::load_as_f32(k[i], KT, d), sc[i]);
}

// Query heads [h0, h0+G) of one row, all sharing one kv head: each key/value row is loaded once
// for the G heads. Per head the arithmetic is the same whatever G is.
template <DType KT, DType VT>
void attend_group(const float* q_row, int h0, int G, const AttentionRows& rows, const KvLayer& cache, int32_t seq,
                  int32_t pos, int64_t kv_off, int D, float scale, float* out_row) {
  const int d8 = D / 8 * 8;
  const size_t kes = dtype_size(KT), ves = dtype_size(VT);
  alignas(32) float acc[kMaxGroupFloats];
  for (int i = 0; i < G * D; ++i) acc[i] = 0.0f;
  float run_max[kMaxGroup], run_sum[kMaxGroup], s[kMaxGroup][kBlock];
  for (int g = 0; g < G; ++g) run_max[g] = -INFINITY, run_sum[g] = 0.0f;
  const int64_t L = static_cast<int64_t>(pos) + 1;
  const int64_t bs = rows.block_size;
  const int32_t* table = rows.block_tables.ptr<const int32_t>() + seq * rows.block_tables.row_stride();
  for (int64_t j0 = 0; j0 < L; j0 += kBlock) {
    const int nb = static_cast<int>(std::min<int64_t>(kBlock, L - j0));
    const void* vrow[kBlock + 8];
    const void* krow[kBlock + 8];
    float bmax[kMaxGroup];
    for (int g = 0; g < G; ++g) bmax[g] = -INFINITY;
    for (int j = 0; j < nb; ++j) {
      const int64_t p = j0 + j;
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      krow[j] = static_cast<const char*>(cache.k.data) + (slot * cache.k.row_stride() + kv_off) * kes;
      vrow[j] = static_cast<const char*>(cache.v.data) + (slot * cache.v.row_stride() + kv_off) * ves;
    }
    for (int j = nb; j < kBlock + 8; ++j) krow[j] = krow[nb - 1];  // padding: scores computed and dropped
    for (int g = 0; g < G; ++g) {
      const float* q = q_row + static_cast<int64_t>(h0 + g) * D;
      for (int j = 0; j < nb; j += 8) {
        alignas(32) float sc[8];
        dot8<KT>(q, krow + j, D, sc);
        for (int i = 0; i < 8 && j + i < nb; ++i) {
          s[g][j + i] = sc[i] * scale;
          bmax[g] = std::max(bmax[g], s[g][j + i]);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      float* ag = acc + g * D;
      const float new_max = std::max(run_max[g], bmax[g]);
      const float corr = std::exp(run_max[g] - new_max);  // 0 on the first block
      run_sum[g] *= corr;
      const __m256 c8 = _mm256_set1_ps(corr);
      for (int d = 0; d < d8; d += 8) _mm256_storeu_ps(ag + d, _mm256_mul_ps(_mm256_loadu_ps(ag + d), c8));
      for (int d = d8; d < D; ++d) ag[d] *= corr;
      const __m256 m8 = _mm256_set1_ps(new_max);
      int j = 0;
      for (; j + 8 <= nb; j += 8) _mm256_storeu_ps(s[g] + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s[g] + j), m8)));
      if (j < nb) {  // the tail through the same 8-lane function
        alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = j; i < nb; ++i) tmp[i - j] = s[g][i];
        _mm256_store_ps(tmp, exp8(_mm256_sub_ps(_mm256_load_ps(tmp), m8)));
        for (int i = j; i < nb; ++i) s[g][i] = tmp[i - j];
      }
      run_max[g] = new_max;
    }
    for (int g = 0; g < G; ++g) {
      float* ag = acc + g * D;
      for (int j = 0; j < nb; ++j) run_sum[g] += s[g][j];
      // Output columns in register chunks; each element still adds p_j·v_j in j order.
      int d = 0;
      for (; d + 32 <= d8; d += 32) {
        __m256 o0 = _mm256_loadu_ps(ag + d), o1 = _mm256_loadu_ps(ag + d + 8);
        __m256 o2 = _mm256_loadu_ps(ag + d + 16), o3 = _mm256_loadu_ps(ag + d + 24);
        for (int j = 0; j < nb; ++j) {
          const __m256 p8 = _mm256_set1_ps(s[g][j]);
          o0 = _mm256_fmadd_ps(p8, load8<VT>(vrow[j], d), o0);
          o1 = _mm256_fmadd_ps(p8, load8<VT>(vrow[j], d + 8), o1);
          o2 = _mm256_fmadd_ps(p8, load8<VT>(vrow[j], d + 16), o2);
          o3 = _mm256_fmadd_ps(p8, load8<VT>(vrow[j], d + 24), o3);
        }
        _mm256_storeu_ps(ag + d, o0);
        _mm256_storeu_ps(ag + d + 8, o1);
        _mm256_storeu_ps(ag + d + 16, o2);
        _mm256_storeu_ps(ag + d + 24, o3);
      }
      for (; d < d8; d += 8) {
        __m256 o0 = _mm256_loadu_ps(ag + d);
        for (int j = 0; j < nb; ++j) o0 = _mm256_fmadd_ps(_mm256_set1_ps(s[g][j]), load8<VT>(vrow[j], d), o0);
        _mm256_storeu_ps(ag + d, o0);
      }
      for (; d < D; ++d)
        for (int j = 0; j < nb; ++j) ag[d] = std::fma(s[g][j], ref::load_as_f32(vrow[j], VT, d), ag[d]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const float inv = 1.0f / run_sum[g];
    float* o = out_row + static_cast<int64_t>(h0 + g) * D;
    for (int d = 0; d < D; ++d) o[d] = acc[g * D + d] * inv;
  }
}

template <DType KT, DType VT>
void attend(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape, Tensor& out,
            int head_begin, int head_end) {
  const int D = shape.head_dim;
  const int group = shape.heads / shape.kv_heads;
  for (int64_t r = 0; r < q.rows(); ++r) {
    const int32_t seq = rows.row_seq.ptr<const int32_t>()[r], pos = rows.row_pos.ptr<const int32_t>()[r];
    // Runs of consecutive heads that share a kv head, at most kMaxGroup heads and kMaxGroupFloats floats.
    for (int h = head_begin; h < head_end;) {
      const int kv = h / group;
      int G = std::min({head_end, (kv + 1) * group, h + kMaxGroup}) - h;
      G = std::max(1, std::min(G, kMaxGroupFloats / D));
      attend_group<KT, VT>(q.ptr<const float>() + r * q.row_stride(), h, G, rows, cache, seq, pos,
                           static_cast<int64_t>(kv) * D, D, shape.scale, out.ptr<float>() + r * out.row_stride());
      h += G;
    }
  }
}

}  // namespace

void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, int head_begin, int head_end) {
  if (shape.head_dim > kMaxHeadDim || cache.k.dtype != cache.v.dtype) {
    ref::paged_attention(q, rows, cache, shape, out, head_begin, head_end);
    return;
  }
  switch (cache.k.dtype) {
    case DType::kBF16: attend<DType::kBF16, DType::kBF16>(q, rows, cache, shape, out, head_begin, head_end); break;
    case DType::kF16: attend<DType::kF16, DType::kF16>(q, rows, cache, shape, out, head_begin, head_end); break;
    default: attend<DType::kF32, DType::kF32>(q, rows, cache, shape, out, head_begin, head_end); break;
  }
}

}  // namespace vv::avx2
