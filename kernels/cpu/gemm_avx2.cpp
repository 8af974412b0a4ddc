// AVX2/FMA GEMM: out[M,N] (=|+=) epilogue(a[M,K]·w[N,K]ᵀ + bias), w in F32/BF16/F16.
//
// Determinism: every output element is computed the same way on every path, whatever M, the tile
// it falls in or the thread that runs it: 8 f32 partial sums p_l = Σ_i a[8i+l]·w[8i+l] (FMA chain,
// i ascending), reduced as ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)), then the K%8 tail k ascending by
// FMA, then + bias, then the epilogue. K is never split across threads.
//
// Three paths share that order:
//  * gemv (M = 1, decode of one sequence): tiles of 8 w rows, each read once front to back over the
//    whole K with its own FMA chain in a register; memory bound, see gemv_rows.
//  * direct (2 ≤ M ≤ 8, batched decode): reads w rows in place (prefetched), converts bf16/f16 in
//    registers, K in chunks of 512 with the partial sums parked between chunks so a stays in L1.
//  * blocked (larger M, prefill): per (M block, N block) task, w is converted to f32 one K chunk at a
//    time into a scratch buffer and the 8 partial sums of each element live in a buffer between
//    chunks, so the FMA chains continue exactly as in the direct path.
// This file is one kernel family; the tile kernels stay beside their drivers to keep the data flow
// visible.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/vector_math_avx2.h"

namespace vv::avx2 {
namespace {

// Tile sizes, tuned on a 2-core AMD EPYC (Zen 3, AVX2) with tests/bench/kernels_bench.cpp.
constexpr int64_t kPrefetch = 256;  // direct path: elements of each w row prefetched ahead
constexpr int64_t kMc = 96;         // blocked path: rows of a per task
constexpr int64_t kNc = 48;         // blocked path: rows of w per task
constexpr int64_t kKc = 512;        // blocked path: k per chunk (multiple of 8)
constexpr int kMr = 4;              // blocked path register tile: rows of a
constexpr int kNr = 3;              // blocked path register tile: rows of w

template <DType WT>
inline __m256 load_w8(const void* w, int64_t k) {
  if constexpr (WT == DType::kBF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (WT == DType::kF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k));
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(w) + k);
  }
}

template <DType WT>
inline float load_w1(const void* w, int64_t k) {
  if constexpr (WT == DType::kBF16) {
    return bf16_to_f32(static_cast<const uint16_t*>(w)[k]);
  } else if constexpr (WT == DType::kF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(w)[k]);
  } else {
    return static_cast<const float*>(w)[k];
  }
}

// The fixed reduction + tail + bias + epilogue shared by every path.
template <DType WT>
inline void finish(__m256 acc, const float* a_row, const void* w_row, int64_t k8, int64_t K, const float* bias,
                   int64_t n, Epilogue ep, float* out) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // p_j + p_{j+4}
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                      // (s0+s2), (s1+s3)
  __m128 r = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  for (int64_t k = k8; k < K; ++k) r = _mm_fmadd_ss(_mm_set_ss(a_row[k]), _mm_set_ss(load_w1<WT>(w_row, k)), r);
  float v = _mm_cvtss_f32(r);
  if (bias) v += bias[n];
  switch (ep) {
    case Epilogue::kNone: *out = v; break;
    case Epilogue::kGelu: *out = v; break;  // activated afterwards by gelu_inplace, the same on every path
    case Epilogue::kAddResidual: *out += v; break;
  }
}

struct GemmArgs {
  const float* a;
  int64_t a_stride;
  const void* w;
  int64_t w_stride;  // elements
  const float* bias;
  float* out;
  int64_t out_stride;
  int64_t M, N, K, k8;
  Epilogue ep;
};

template <DType WT>
inline const void* w_row(const GemmArgs& g, int64_t n) {
  return static_cast<const char*>(g.w) + n * g.w_stride * static_cast<int64_t>(dtype_size(WT));
}

// ---- gemv path (M = 1) -------------------------------------------------------------------------

constexpr int kGemvRows = 8;            // w rows per tile: 8 independent FMA chains cover the FMA latency
constexpr int64_t kGemvPrefetch = 256;  // bytes ahead of each row's read position
constexpr int64_t kGemvChunksPerThread = 4;       // equal chunks per thread: balance when a core is shared
constexpr int64_t kGemvMinChunkBytes = 64 << 10;  // below this a chunk is not worth a thread hand-off

// R rows n + r·lane (r < R) of w against the single row of a, over the whole K: one cache line of
// every row per step (bf16: 32 elements), one software prefetch per line kGemvPrefetch bytes ahead.
// Past a row's end the prefetch runs on into the next row in memory, which is the same lane's row of
// the next tile, so each lane streams without a restart.
template <DType WT, int R>
void gemv_tile(const GemmArgs& g, int64_t n, int64_t lane) {
  constexpr int64_t es = static_cast<int64_t>(dtype_size(WT));
  constexpr int64_t kLine = 64 / es;  // elements per cache line
  const char* wr[R];
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    wr[r] = static_cast<const char*>(w_row<WT>(g, n + r * lane));
    acc[r] = _mm256_setzero_ps();
  }
  const int64_t kl = g.k8 / kLine * kLine;
  int64_t k = 0;
  for (; k < kl; k += kLine) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm_prefetch(wr[r] + k * es + kGemvPrefetch, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int64_t j = 0; j < kLine; j += 8) {
      const __m256 av = _mm256_loadu_ps(g.a + k + j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(av, load_w8<WT>(wr[r], k + j), acc[r]);
    }
  }
  for (; k < g.k8; k += 8) {
    const __m256 av = _mm256_loadu_ps(g.a + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(av, load_w8<WT>(wr[r], k), acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int64_t nr = n + r * lane;
    finish<WT>(acc[r], g.a, wr[r], g.k8, g.K, g.bias, nr, g.ep, g.out + nr);
  }
}

// Rows n0..n1 as kGemvRows lanes of consecutive rows; tile t takes row t of every lane. Each lane
// is then one long sequential stream through memory (8 per thread, as the read probe's best case)
// instead of 8 short rows that start cold at every tile: +10–15 % at K = 3584 (NOTES.md). The rows
// left over (fewer than kGemvRows) go one at a time. Which tile computes a row does not change its
// arithmetic.
template <DType WT>
void gemv_rows(const GemmArgs& g, int64_t n0, int64_t n1) {
  const int64_t lane = (n1 - n0) / kGemvRows;
  for (int64_t t = 0; t < lane; ++t) gemv_tile<WT, kGemvRows>(g, n0 + t, lane);
  for (int64_t n = n0 + kGemvRows * lane; n < n1; ++n) gemv_tile<WT, 1>(g, n, 0);
  if (g.ep == Epilogue::kGelu) gelu_inplace(g.out + n0, n1 - n0);
}

// Rows are split, never K: each thread streams its own contiguous ranges of w. The chunks are equal
// and their count a multiple of the thread count, so an idle machine splits the bytes evenly, while
// a thread that loses its core for a while leaves its later chunks to the others.
template <DType WT>
void gemv_typed(cpu::ThreadPool& pool, const GemmArgs& g) {
  const int64_t row_bytes = g.K * static_cast<int64_t>(dtype_size(WT));
  const int64_t max_chunks = std::max<int64_t>(1, g.N * row_bytes / kGemvMinChunkBytes);
  const int64_t threads = pool.size();
  int64_t chunks = threads * kGemvChunksPerThread;
  while (chunks > threads && chunks > max_chunks) chunks -= threads;
  chunks = std::min({chunks, max_chunks, g.N});
  pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) gemv_rows<WT>(g, g.N * c / chunks, g.N * (c + 1) / chunks);
  });
}

// ---- direct path -------------------------------------------------------------------------------

constexpr int64_t kDirectNb = 24;   // rows of w per block
constexpr int64_t kDirectKc = 512;  // k per chunk: the chunk of a (≤ 8 rows) stays in L1

// Partial sums of (m, n) of the current w block live in part[(m·kDirectNb + n)·8 .. +8] between chunks.
template <DType WT, int MR, int NR>
void direct_tile(const GemmArgs& g, int64_t m0, int64_t n0, int64_t nrel, int64_t k0, int64_t kc, float* part,
                 bool first) {
  __m256 acc[MR][NR];
  const float* ar[MR];
  const void* wr[NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    ar[m] = g.a + (m0 + m) * g.a_stride;
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n)
      acc[m][n] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + ((m0 + m) * kDirectNb + nrel + n) * 8);
  }
#pragma GCC unroll 8
  for (int n = 0; n < NR; ++n) wr[n] = w_row<WT>(g, n0 + n);
  for (int64_t k = k0; k < k0 + kc; k += 8) {
    __m256 av[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) av[m] = _mm256_loadu_ps(ar[m] + k);
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) {
      _mm_prefetch(static_cast<const char*>(wr[n]) + (k + kPrefetch) * static_cast<int64_t>(dtype_size(WT)),
                   _MM_HINT_T0);
      const __m256 wv = load_w8<WT>(wr[n], k);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(av[m], wv, acc[m][n]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) _mm256_store_ps(part + ((m0 + m) * kDirectNb + nrel + n) * 8, acc[m][n]);
}

template <DType WT, int MR>
void direct_rows(const GemmArgs& g, int64_t m0, int64_t nb, int64_t ne, int64_t k0, int64_t kc, float* part,
                 bool first) {
  constexpr int NR = MR == 1 ? 8 : MR == 2 ? 6 : MR == 3 ? 4 : 3;
  int64_t n = nb;
  for (; n + NR <= ne; n += NR) direct_tile<WT, MR, NR>(g, m0, n, n - nb, k0, kc, part, first);
  for (; n < ne; ++n) direct_tile<WT, MR, 1>(g, m0, n, n - nb, k0, kc, part, first);
}

template <DType WT>
void direct_block(const GemmArgs& g, int64_t n0, int64_t n1) {
  // Row tiles of ≤4 pass over a block of w rows one K chunk at a time.
  alignas(32) float part[8 * kDirectNb * 8];
  for (int64_t nb = n0; nb < n1; nb += kDirectNb) {
    const int64_t ne = std::min(n1, nb + kDirectNb);
    for (int64_t k0 = 0; k0 < g.k8; k0 += kDirectKc) {
      const int64_t kc = std::min(kDirectKc, g.k8 - k0);
      const bool first = k0 == 0;
      int64_t m = 0;
      for (; m + 4 <= g.M; m += 4) direct_rows<WT, 4>(g, m, nb, ne, k0, kc, part, first);
      switch (g.M - m) {
        case 3: direct_rows<WT, 3>(g, m, nb, ne, k0, kc, part, first); break;
        case 2: direct_rows<WT, 2>(g, m, nb, ne, k0, kc, part, first); break;
        case 1: direct_rows<WT, 1>(g, m, nb, ne, k0, kc, part, first); break;
        default: break;
      }
    }
    for (int64_t m = 0; m < g.M; ++m) {
      for (int64_t n = nb; n < ne; ++n) {
        const __m256 acc = g.k8 ? _mm256_load_ps(part + (m * kDirectNb + n - nb) * 8) : _mm256_setzero_ps();
        finish<WT>(acc, g.a + m * g.a_stride, w_row<WT>(g, n), g.k8, g.K, g.bias, n, g.ep, g.out + m * g.out_stride + n);
      }
      if (g.ep == Epilogue::kGelu) gelu_inplace(g.out + m * g.out_stride + nb, ne - nb);
    }
  }
}

// ---- blocked path ------------------------------------------------------------------------------


// Partial sums of (m, n): part[(m·kNc + n)·8 .. +8].
template <int MR, int NR>
inline void blocked_tile(const float* const* ar, const float* wc, int64_t kc, float* part, bool first) {
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n)
      acc[m][n] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + (m * kNc + n) * 8);
  for (int64_t k = 0; k < kc; k += 8) {
    __m256 av[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) av[m] = _mm256_loadu_ps(ar[m] + k);
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) {
      const __m256 wv = _mm256_load_ps(wc + n * kKc + k);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(av[m], wv, acc[m][n]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NR; ++n) _mm256_store_ps(part + (m * kNc + n) * 8, acc[m][n]);
}

template <int MR>
void blocked_row_tile(const float* const* ar, const float* wc, int64_t kc, float* part, int64_t nn, bool first) {
  constexpr int NR = kNr;
  int64_t n = 0;
  for (; n + NR <= nn; n += NR) blocked_tile<MR, NR>(ar, wc + n * kKc, kc, part + n * 8, first);
  for (; n < nn; ++n) blocked_tile<MR, 1>(ar, wc + n * kKc, kc, part + n * 8, first);
}

struct Scratch {
  float* wc = nullptr;    // [kNc][kKc] f32
  float* ac = nullptr;    // [kMc][kKc] f32: this chunk of a, rows contiguous
  float* part = nullptr;  // [kMc][kNc][8]
  Scratch() {
    wc = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kNc * kKc));
    ac = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMc * kKc));
    part = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kMc * kNc * 8));
  }
  ~Scratch() {
    std::free(wc);
    std::free(ac);
    std::free(part);
  }
};

Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

template <DType WT>
void convert_w_chunk(const GemmArgs& g, int64_t n0, int64_t nn, int64_t k0, int64_t kc, float* wc) {
  for (int64_t n = 0; n < nn; ++n) {
    const void* wr = w_row<WT>(g, n0 + n);
    float* dst = wc + n * kKc;
    for (int64_t k = 0; k < kc; k += 8) _mm256_store_ps(dst + k, load_w8<WT>(wr, k0 + k));
  }
}

template <DType WT>
void blocked_task(const GemmArgs& g, int64_t m0, int64_t mm, int64_t n0, int64_t nn) {
  Scratch& s = thread_scratch();
  for (int64_t k0 = 0; k0 < g.k8; k0 += kKc) {
    const int64_t kc = std::min(kKc, g.k8 - k0);
    convert_w_chunk<WT>(g, n0, nn, k0, kc, s.wc);
    for (int64_t m = 0; m < mm; ++m) std::memcpy(s.ac + m * kKc, g.a + (m0 + m) * g.a_stride + k0, sizeof(float) * kc);
    const bool first = k0 == 0;
    int64_t m = 0;
    for (; m + kMr <= mm; m += kMr) {
      const float* ar[kMr];
      for (int i = 0; i < kMr; ++i) ar[i] = s.ac + (m + i) * kKc;
      blocked_row_tile<kMr>(ar, s.wc, kc, s.part + m * kNc * 8, nn, first);
    }
    for (; m < mm; ++m) {
      const float* ar[1] = {s.ac + m * kKc};
      blocked_row_tile<1>(ar, s.wc, kc, s.part + m * kNc * 8, nn, first);
    }
  }
  for (int64_t m = 0; m < mm; ++m) {
    const float* ar = g.a + (m0 + m) * g.a_stride;
    float* orow = g.out + (m0 + m) * g.out_stride;
    for (int64_t n = 0; n < nn; ++n) {
      const __m256 acc = g.k8 ? _mm256_load_ps(s.part + (m * kNc + n) * 8) : _mm256_setzero_ps();
      finish<WT>(acc, ar, w_row<WT>(g, n0 + n), g.k8, g.K, g.bias, n0 + n, g.ep, orow + n0 + n);
    }
    if (g.ep == Epilogue::kGelu) gelu_inplace(orow + n0, nn);
  }
}

template <DType WT>
void gemm_typed(cpu::ThreadPool& pool, const GemmArgs& g) {
  if (g.M == 1) {
    gemv_typed<WT>(pool, g);
    return;
  }
  if (g.M <= 8) {
    constexpr int64_t kRows = 48;  // rows of w per task
    pool.parallel_for((g.N + kRows - 1) / kRows, std::max<int64_t>(1, 256 / std::max<int64_t>(1, g.K / 64)),
                      [&](int64_t b, int64_t e) { direct_block<WT>(g, b * kRows, std::min(g.N, e * kRows)); });
    return;
  }
  const int64_t mt = (g.M + kMc - 1) / kMc, nt = (g.N + kNc - 1) / kNc;
  pool.parallel_for(mt * nt, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t m0 = (t / nt) * kMc, n0 = (t % nt) * kNc;
      blocked_task<WT>(g, m0, std::min(kMc, g.M - m0), n0, std::min(kNc, g.N - n0));
    }
  });
}

}  // namespace

void gemm(cpu::ThreadPool& pool, const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) {
  GemmArgs g;
  g.a = a.ptr<const float>();
  g.a_stride = a.row_stride();
  g.w = w.data;
  g.w_stride = w.row_stride();
  g.bias = bias && bias->data ? bias->ptr<const float>() : nullptr;
  g.out = out.ptr<float>();
  g.out_stride = out.row_stride();
  g.M = out.rows();
  g.N = out.cols();
  g.K = a.cols();
  g.k8 = g.K / 8 * 8;
  g.ep = ep;
  switch (w.dtype) {
    case DType::kBF16: gemm_typed<DType::kBF16>(pool, g); break;
    case DType::kF16: gemm_typed<DType::kF16>(pool, g); break;
    default: gemm_typed<DType::kF32>(pool, g); break;
  }
}

}  // namespace vv::avx2
