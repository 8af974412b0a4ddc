// How the weight-streaming GEMM (stream_gemm.cuh) splits its work over a persistent grid, as plain
// constexpr functions that the kernels and a host test (tests/unit/kernels/stream_gemm_plan_test.cpp)
// share. A unit is one weight tile × one 64-deep step of K, numbered tile by tile (unit u is step
// u % ksteps of tile u / ksteps); G blocks take contiguous runs of them. A run cut by tile boundaries
// is a sequence of segments; a tile whose units fall to several blocks has one segment in each.
// No CUDA headers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VV_HD __host__ __device__
#else
#define VV_HD
#endif

namespace vv::cuda::stream_plan {

// The first unit of block b's run: runs [unit_begin(b), unit_begin(b + 1)) of units / G each, ±1.
VV_HD constexpr int64_t unit_begin(int64_t b, int64_t G, int64_t units) {
  return b * units / G;
}

// The block whose run holds unit u: the largest b with unit_begin(b) ≤ u, i.e. b·units < (u + 1)·G.
VV_HD constexpr int64_t block_of(int64_t u, int64_t G, int64_t units) {
  return ((u + 1) * G - 1) / units;
}

// The end of the segment that starts at unit `seg` of a run ending at u1: the tile's end or the run's.
VV_HD constexpr int64_t segment_end(int64_t seg, int64_t u1, int64_t ksteps) {
  const int64_t tile_end = (seg / ksteps + 1) * ksteps;
  return tile_end < u1 ? tile_end : u1;
}

// Where block b leaves its partial sums of `tile` (one of its segments; the tile is not whole in its
// run): slot 2b for the segment that opens its run, 2b + 1 for the one that closes it. A block's
// other segments cover whole tiles, so the 2G slots never collide.
VV_HD constexpr int64_t segment_slot(int64_t b, int64_t tile, int64_t G, int64_t units, int64_t ksteps) {
  return 2 * b + (tile == unit_begin(b, G, units) / ksteps ? 0 : 1);
}

// A slot for every segment, whole or not (the SwiGLU form's): tile + b. Unique, because a later
// block's tiles are never before an earlier block's: b < b' gives tile ≤ tile' and so a smaller sum,
// and one block's segments have distinct tiles. Fewer than tiles + G.
VV_HD constexpr int64_t every_segment_slot(int64_t b, int64_t tile) {
  return tile + b;
}

}  // namespace vv::cuda::stream_plan

#undef VV_HD
