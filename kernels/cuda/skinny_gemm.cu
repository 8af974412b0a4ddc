// The split-K tensor-core GEMM of skinny_gemm.cuh. A block: 4 warps, 128 output columns (32 per
// warp: four 8-wide mma tiles) by all M rows (16·MT, zero-padded), over one slice of K in 64-deep
// stages. Each stage's 128 weight rows and 16·MT rows of a come in with cp.async (zero-filled past
// N, M and the slice's end) into rows padded to 72 elements, so ldmatrix's eight row addresses fall
// on distinct banks; S stages are in flight while the warps work on the oldest. With one slice the
// block applies bias and residual itself; otherwise it writes its f32 partials ([slice][M][N]) and
// skinny_reduce_kernel sums the slices in order, then applies them.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/cuda/smem_attr.h"

namespace vv::cuda {
namespace {

using mma::cp_async16_zfill;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldsm_a;
using mma::ldsm_b_nmajor;
using mma::mma_bf16;

constexpr int kThreads = 128;
constexpr int kBN = 128;      // output columns (weight rows) per block
constexpr int kBK = 64;       // K per stage
constexpr int kLD = kBK + 8;  // shared-memory row stride in elements (144 bytes)

constexpr size_t smem_bytes(int MT, int S) {
  return static_cast<size_t>(S) * (kBN + 16 * MT) * kLD * sizeof(__nv_bfloat16);
}

template <int MT, int S>
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ a, int M, int K, const __nv_bfloat16* __restrict__ w,
                       int64_t ldw, int N, int ks, const float* __restrict__ bias, int accumulate,
                       float* __restrict__ out, int64_t ldo, float* __restrict__ ws) {
  constexpr int MR = 16 * MT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Ws = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // S × [kBN][kLD]
  __nv_bfloat16* As = Ws + S * kBN * kLD;                          // S × [MR][kLD]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int n0 = blockIdx.x * kBN;
  const int split = blockIdx.y;
  const int k_begin = split * ks;
  const int k_end = min(K, k_begin + ks);
  const int steps = (k_end - k_begin + kBK - 1) / kBK;

  // Stage `stage` ← K columns [k0, k0 + 64) of the block's weight rows and of every row of a; 16-byte
  // chunks (K % 8 == 0 and the slice bounds are multiples of 8, so a chunk is all in or all out).
  auto load = [&](int stage, int step) {
    const int k0 = k_begin + step * kBK;
    __nv_bfloat16* wst = Ws + stage * kBN * kLD;
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, k = k0 + (c & 7) * 8;
      const bool valid = n0 + r < N && k < k_end;
      cp_async16_zfill(wst + r * kLD + (c & 7) * 8, valid ? w + static_cast<int64_t>(n0 + r) * ldw + k : w,
                       valid);
    }
    __nv_bfloat16* ast = As + stage * MR * kLD;
#pragma unroll
    for (int i = 0; i < MR * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, k = k0 + (c & 7) * 8;
      const bool valid = r < M && k < k_end;
      cp_async16_zfill(ast + r * kLD + (c & 7) * 8, valid ? a + static_cast<int64_t>(r) * K + k : a, valid);
    }
  };

  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < steps) load(st, st);
    cp_async_commit();  // empty groups too: the wait below counts groups
  }
  for (int i = 0; i < steps; ++i) {
    cp_async_wait<S - 2>();  // step i's group has landed (this thread's copies)...
    __syncthreads();   // ...and everyone's; and every warp is done with step i - 1's stage
    if (i + S - 1 < steps) load((i + S - 1) % S, i + S - 1);
    cp_async_commit();
    const __nv_bfloat16* wst = Ws + (i % S) * kBN * kLD + warp * 32 * kLD;
    const __nv_bfloat16* ast = As + (i % S) * MR * kLD;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t b[4][2];
      ldsm_b_nmajor(wst + kk, kLD, lane, b[0][0], b[0][1], b[1][0], b[1][1]);
      ldsm_b_nmajor(wst + 16 * kLD + kk, kLD, lane, b[2][0], b[2][1], b[3][0], b[3][1]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldsm_a(ast + mt * 16 * kLD + kk, kLD, lane, af);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_bf16(acc[mt][nt], af, b[nt][0], b[nt][1]);
      }
    }
  }
  cp_async_wait<0>();

  // C fragment: c0, c1 at (row g, columns 2t, 2t + 1) of the 16 × 8 tile, c2, c3 at row g + 8.
  const bool single = gridDim.y == 1;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = mt * 16 + g + 8 * h;
      if (m >= M) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int n = n0 + warp * 32 + nt * 8 + 2 * t4 + j;
          if (n >= N) continue;
          const float v = acc[mt][nt][2 * h + j];
          if (single) {
            const float r = bias ? v + bias[n] : v;
            float* o = out + static_cast<int64_t>(m) * ldo + n;
            *o = accumulate ? *o + r : r;
          } else {
            ws[(static_cast<int64_t>(split) * M + m) * N + n] = v;
          }
        }
      }
    }
  }
}

// out[m, n] (=|+=) Σ_s ws[s][m][n] (s in order) + bias[n]: the same arithmetic for a row whatever M.
__global__ void skinny_reduce_kernel(const float* __restrict__ ws, int splits, int M, int N,
                                     const float* __restrict__ bias, int accumulate, float* __restrict__ out,
                                     int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(M) * N) return;
  const int m = static_cast<int>(i / N), n = static_cast<int>(i % N);
  const int64_t plane = static_cast<int64_t>(M) * N;
  float v = ws[i];
  for (int s = 1; s < splits; ++s) v += ws[s * plane + i];
  const float r = bias ? v + bias[n] : v;
  float* o = out + static_cast<int64_t>(m) * ldo + n;
  *o = accumulate ? *o + r : r;
}

template <int MT, int S>
void launch(const __nv_bfloat16* a, int M, int K, const __nv_bfloat16* w, int64_t ldw, int N,
            const SkinnyGemmPlan& p, const float* bias, bool accumulate, float* out, int64_t ldo, float* ws,
            cudaStream_t s) {
  auto* kern = skinny_gemm_kernel<MT, S>;
  allow_dynamic_smem(kern, smem_bytes(MT, S), /*max_carveout=*/true);
  const dim3 grid(static_cast<unsigned>((N + kBN - 1) / kBN), static_cast<unsigned>(p.splits));
  kern<<<grid, kThreads, smem_bytes(MT, S), s>>>(a, M, K, w, ldw, N, static_cast<int>(p.ks), bias,
                                                 accumulate ? 1 : 0, out, ldo, ws);
  if (p.splits > 1) {
    const int64_t n = static_cast<int64_t>(M) * N;
    skinny_reduce_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(ws, p.splits, M, N, bias,
                                                                                accumulate ? 1 : 0, out, ldo);
  }
}

}  // namespace

SkinnyGemmPlan plan_skinny_gemm(int64_t N, int64_t K, int sms, int per_sm) {
  const int64_t tiles = std::max<int64_t>((N + kBN - 1) / kBN, 1);
  const int64_t slots = std::max(per_sm, 1) * static_cast<int64_t>(std::max(sms, 1));
  int64_t splits = std::max<int64_t>(1, (slots + tiles - 1) / tiles);
  splits = std::min(splits, std::max<int64_t>(1, K / 256));
  SkinnyGemmPlan p;
  p.ks = std::max<int64_t>(((K + splits - 1) / splits + kBK - 1) / kBK * kBK, kBK);
  p.splits = static_cast<int>(std::max<int64_t>((K + p.ks - 1) / p.ks, 1));
  return p;
}

size_t skinny_gemm_ws_bytes(int64_t M, int64_t N, const SkinnyGemmPlan& p) {
  return p.splits > 1 ? static_cast<size_t>(p.splits) * static_cast<size_t>(M * N) * sizeof(float) : 0;
}

size_t skinny_gemm_ws_max_bytes(int sms, int per_sm) {
  // More than one slice only while tiles < slots, where splits·N ≤ (slots + tiles)·128 < 2·slots·128.
  const size_t slots = static_cast<size_t>(std::max(per_sm, 1)) * static_cast<size_t>(std::max(sms, 1));
  return static_cast<size_t>(kSkinnyGemmMaxRows) * 2 * slots * kBN * sizeof(float);
}

bool skinny_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return M >= 1 && M <= kSkinnyGemmMaxRows && K > 0 && K % 8 == 0 && ldw % 8 == 0 && ldw >= K && aligned(a) &&
         aligned(w) && K <= (int64_t{1} << 30);
}

void skinny_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                 const float* bias, bool accumulate, float* out, int64_t ldo, const SkinnyGemmPlan& p,
                 float* ws, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const auto* ab = static_cast<const __nv_bfloat16*>(a);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  const int m = static_cast<int>(M), k = static_cast<int>(K), n = static_cast<int>(N);
  if (M <= 16) {
    launch<1, 4>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
  } else if (M <= 32) {
    launch<2, 4>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
  } else if (M <= 64) {
    // 108 KB of stages; one stage fewer where a block cannot have that much (sm_86/89: 99 KB). The
    // stage count is the copies' depth only: a row's sums are the same.
    if (smem_bytes(4, 4) <= device_smem_optin()) {
      launch<4, 4>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
    } else {
      launch<4, 3>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
    }
  } else {
    if (smem_bytes(8, 3) <= device_smem_optin()) {
      launch<8, 3>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
    } else {
      launch<8, 2>(ab, m, k, wb, ldw, n, p, bias, accumulate, out, ldo, ws, s);
    }
  }
}

}  // namespace vv::cuda
