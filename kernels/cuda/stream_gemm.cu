// The weight-streaming GEMM of stream_gemm.cuh. A block: 4 warps; a unit is 128 weight rows (32 per
// warp: two 16-row mma tiles) × 64 of K, against all rows of a (16·NT, zero-padded). The weight is
// the mma's A operand and a's rows its N (swap-AB: few rows of a fill the 8-wide side, not the
// 16-high one). Each unit's weight rows and the matching columns of a come in with cp.async into
// rows padded to 72 elements (ldmatrix's eight row addresses on distinct banks); S units are in
// flight while the warps work on the oldest. A block walks its contiguous run of units, and at the
// end of a tile (or of its run) writes the tile's sums: plainly when it covered all of K, with f32
// atomics when the tile is shared.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/stream_gemm.cuh"

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

// Units [u0, u1) of block b out of G over `units`.
__host__ __device__ inline int64_t unit_begin(int64_t b, int64_t G, int64_t units) {
  return b * units / G;
}

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

struct Geometry {
  int ksteps;
  int64_t units;
  int grid;
};
Geometry geometry(int64_t N, int64_t K, int sms) {
  Geometry g;
  g.ksteps = static_cast<int>((K + kBK - 1) / kBK);
  g.units = (N + kBN - 1) / kBN * g.ksteps;
  g.grid = static_cast<int>(std::min<int64_t>(g.units, int64_t{kBlocksPerSm} * std::max(sms, 1)));
  return g;
}

template <int NT>
void launch(const __nv_bfloat16* a, int M, int K, const __nv_bfloat16* w, int64_t ldw, int N,
            const float* bias, bool accumulate, float* out, int64_t ldo, const Geometry& geo,
            cudaStream_t s) {
  auto* kern = stream_gemm_kernel<NT>;
  static std::atomic<uint64_t> raised{0};  // per instantiation and device
  int dev = 0;
  cudaGetDevice(&dev);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(raised.load(std::memory_order_relaxed) & bit)) {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes(NT)));
    cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
    raised.fetch_or(bit, std::memory_order_relaxed);
  }
  launch_pdl(kern, dim3(static_cast<unsigned>(geo.grid)), kThreads, smem_bytes(NT), s, a, M, K, w, ldw, N,
             geo.ksteps, geo.units, bias, accumulate ? 1 : 0, out, ldo);
}

}  // namespace

int stream_gemm_split_tiles(int64_t N, int64_t K, int sms) {
  const Geometry g = geometry(N, K, sms);
  int split = 0;
  for (int b = 1; b < g.grid; ++b) split += unit_begin(b, g.grid, g.units) % g.ksteps != 0;
  return split;
}

bool stream_gemm_fits(int64_t M, int64_t K, const void* a, const void* w, int64_t ldw) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return M >= 1 && M <= kStreamGemmMaxRows && K > 0 && K % 8 == 0 && ldw % 8 == 0 && ldw >= K && aligned(a) &&
         aligned(w) && K <= (int64_t{1} << 30);
}

void stream_gemm(const void* a, int64_t M, int64_t K, const void* w, int64_t ldw, int64_t N,
                 const float* bias, bool accumulate, float* out, int64_t ldo, int sms, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const Geometry geo = geometry(N, K, sms);
  if (!accumulate && stream_gemm_split_tiles(N, K, sms) > 0) {
    cudaMemset2DAsync(out, static_cast<size_t>(ldo) * sizeof(float), 0,
                      static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M), s);
  }
  const auto* ab = static_cast<const __nv_bfloat16*>(a);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  const int m = static_cast<int>(M), k = static_cast<int>(K), n = static_cast<int>(N);
  if (M <= 16) {
    launch<1>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else if (M <= 32) {
    launch<2>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else if (M <= 64) {
    launch<4>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  } else {
    launch<8>(ab, m, k, wb, ldw, n, bias, accumulate, out, ldo, geo, s);
  }
}

}  // namespace vv::cuda
