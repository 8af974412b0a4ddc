// The stream GEMM's split of its units over a persistent grid (kernels/cuda/stream_gemm_plan.h), on
// the host, as the warp-specialised form walks it: every unit in exactly one block's run; each tile's
// segments, found by the block that adds them up from block_of alone, are exactly the blocks whose
// runs cut it; their workspace slots are those the blocks wrote and never shared (the SwiGLU form's
// slot for every segment too); and the segments' sums give every tile's total. Over the 7B's decode
// shapes on 132 and 114 SMs, and odd ones. (Whether the kernel does what this walk does is the gpu
// tests' part: CudaStreamGemm.WarpSpecialised*, CudaStreamGemm.SwiGlu*.)
#include "kernels/cuda/stream_gemm_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace vv::test {
namespace {

using cuda::stream_plan::block_of;
using cuda::stream_plan::every_segment_slot;
using cuda::stream_plan::segment_end;
using cuda::stream_plan::segment_slot;
using cuda::stream_plan::unit_begin;

struct Shape {
  int64_t N, K;
  int sms;
};

void check_plan(const Shape& sh) {
  const int64_t bn = 256, ksteps = (sh.K + 63) / 64, tiles = (sh.N + bn - 1) / bn, units = tiles * ksteps;
  const int64_t G = std::min<int64_t>(units, sh.sms);
  const std::string what =
      "N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K) + " SMs=" + std::to_string(sh.sms);
  // Unit u adds u + 1 to its tile's sums, so each tile's total is a known arithmetic series.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> written;  // tile → (block, slot) in order
  std::map<int64_t, int64_t> sums;                                      // slot → its partial sum
  std::map<int64_t, int64_t> whole_sum;                                 // tile → sum of a whole segment
  std::vector<int> covered(static_cast<size_t>(units), 0);
  std::set<int64_t> every_slots;  // the SwiGLU form's: one for every segment
  for (int64_t b = 0; b < G; ++b) {
    const int64_t u0 = unit_begin(b, G, units), u1 = unit_begin(b + 1, G, units);
    ASSERT_LT(u0, u1) << what << ": block " << b << " has no unit";
    int split_segments = 0;
    for (int64_t seg = u0; seg < u1;) {
      const int64_t end = segment_end(seg, u1, ksteps), tile = seg / ksteps;
      ASSERT_GT(end, seg) << what;
      ASSERT_EQ((end - 1) / ksteps, tile) << what << ": a segment crosses a tile";
      int64_t s = 0;
      for (int64_t u = seg; u < end; ++u) {
        ++covered[static_cast<size_t>(u)];
        EXPECT_EQ(block_of(u, G, units), b) << what << ": unit " << u;
        s += u + 1;
      }
      const int64_t any_slot = every_segment_slot(b, tile);
      EXPECT_TRUE(every_slots.insert(any_slot).second)
          << what << ": slot " << any_slot << " of every segment twice";
      EXPECT_LT(any_slot, tiles + G) << what;
      const bool whole = seg % ksteps == 0 && end % ksteps == 0;
      if (whole) {
        EXPECT_FALSE(whole_sum.count(tile)) << what << ": tile " << tile << " whole twice";
        whole_sum[tile] = s;
      } else {
        ++split_segments;
        const int64_t slot = segment_slot(b, tile, G, units, ksteps);
        EXPECT_GE(slot, 2 * b) << what;
        EXPECT_LT(slot, 2 * b + 2) << what;
        EXPECT_FALSE(sums.count(slot)) << what << ": slot " << slot << " written twice";
        sums[slot] = s;
        written[tile].emplace_back(b, slot);
      }
      seg = end;
    }
    EXPECT_LE(split_segments, 2) << what << ": block " << b;
  }
  for (int64_t u = 0; u < units; ++u) ASSERT_EQ(covered[static_cast<size_t>(u)], 1) << what << ": unit " << u;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t first = tile * ksteps + 1, last = (tile + 1) * ksteps;
    const int64_t want = (first + last) * ksteps / 2;
    if (whole_sum.count(tile)) {
      EXPECT_FALSE(written.count(tile)) << what << ": tile " << tile << " both whole and shared";
      EXPECT_EQ(whole_sum[tile], want) << what << ": tile " << tile;
      continue;
    }
    // The finisher's view: the blocks from block_of(first unit) to block_of(last unit), in order.
    const int64_t b_first = block_of(tile * ksteps, G, units),
                  b_last = block_of((tile + 1) * ksteps - 1, G, units);
    const auto& segs = written[tile];
    ASSERT_EQ(static_cast<int64_t>(segs.size()), b_last - b_first + 1) << what << ": tile " << tile;
    int64_t total = 0;
    for (int64_t b = b_first; b <= b_last; ++b) {
      const auto& [wb, wslot] = segs[static_cast<size_t>(b - b_first)];
      EXPECT_EQ(wb, b) << what << ": tile " << tile;
      EXPECT_EQ(segment_slot(b, tile, G, units, ksteps), wslot)
          << what << ": tile " << tile << " block " << b;
      total += sums[wslot];
    }
    EXPECT_EQ(total, want) << what << ": tile " << tile;
  }
}

TEST(StreamGemmPlan, SegmentsSlotsAndSumsCoverEveryTileOnce) {
  const std::vector<Shape> shapes = {
      {3584, 3584, 132},    // o: 14 tiles over 132 blocks, ~9 segments a tile
      {4608, 3584, 132},    // q|k|v
      {37888, 3584, 132},   // gate_up: 148 tiles, at most two segments a tile
      {3584, 18944, 132},   // down: 296 steps a tile
      {152064, 3584, 132},  // LM head: several tiles a run
      {37888, 3584, 114},   // an H100 PCIe's SM count
      {3584, 3584, 78},     // a smaller part
      {8, 8, 132},          // one unit: one block, one whole tile
      {257, 1000, 132},     // two tiles, K not a multiple of the step
      {4104, 511, 7},       // few blocks, many tiles each
      {1031, 2056, 1},      // one block: every tile whole
      {300, 776, 2},        // two blocks, a tile cut once
      {5000, 70, 13},       // two steps a tile, prime grid
  };
  for (const Shape& sh : shapes) check_plan(sh);
}

TEST(StreamGemmPlan, BlockOfInvertsUnitBegin) {
  for (const auto& [units, G] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {7, 7}, {784, 132}, {4144, 132}, {5000, 13}, {131, 131}}) {
    for (int64_t u = 0; u < units; ++u) {
      const int64_t b = block_of(u, G, units);
      ASSERT_GE(b, 0);
      ASSERT_LT(b, G);
      EXPECT_LE(unit_begin(b, G, units), u) << "units " << units << " G " << G << " u " << u;
      EXPECT_GT(unit_begin(b + 1, G, units), u) << "units " << units << " G " << G << " u " << u;
    }
  }
}

}  // namespace
}  // namespace vv::test
