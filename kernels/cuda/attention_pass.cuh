// The passes of the attention kernels that take a tile of rows from several sequences: each pass
// serves the rows of one sequence (they share its keys), the first row not yet done choosing it.
#pragma once

#include <cstdint>

namespace vv::cuda {

// The next pass over rows [r0, r0 + rows_here) (at most the bits of Mask): the rows not in `done`
// whose sequence is that of the first of them go into `active` (and `done`), their sequence into
// `seq` and one past their largest position into `kend`. False when every row is done.
template <typename Mask>
__device__ __forceinline__ bool next_attention_pass(const int32_t* __restrict__ row_seq,
                                                    const int32_t* __restrict__ row_pos, int64_t r0,
                                                    int rows_here, Mask& done, Mask& active, int32_t& seq,
                                                    int& kend) {
  int first = -1;
  for (int i = 0; i < rows_here; ++i) {
    if (!((done >> i) & 1u)) {
      first = i;
      break;
    }
  }
  if (first < 0) return false;
  seq = row_seq[r0 + first];
  active = 0;
  kend = 0;
  for (int i = first; i < rows_here; ++i) {
    if (!((done >> i) & 1u) && row_seq[r0 + i] == seq) {
      active |= Mask{1} << i;
      kend = max(kend, row_pos[r0 + i] + 1);
    }
  }
  done |= active;
  return true;
}

}  // namespace vv::cuda
