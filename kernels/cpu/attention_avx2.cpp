#include <immintrin.h>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"

namespace vv::avx2 {

void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, int head_begin, int head_end) {
  ref::paged_attention(q, rows, cache, shape, out, head_begin, head_end);
}

}  // namespace vv::avx2
