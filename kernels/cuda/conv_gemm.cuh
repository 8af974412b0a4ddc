// The encoders' strided convolutions as one tensor-core pass over their f32 input (VV_CUDA_CONV_GEMM=1).
//
// A strided conv reaches the backend as a GEMM whose A rows overlap: row t of A is the input's rows
// t·stride .. t·stride + kernel − 1, flattened (row stride stride·C_in, K = kernel·C_in). gemm_lt
// first packs those windows into a bf16 copy (down0 at 60 s: 184 MB written, then read back by
// cuBLASLt); here each warp rounds its rows' values to bf16 as it loads them (the same rounding) and
// multiplies them on the tensor cores with the weights resident in shared memory.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace vv::cuda {

// Whether conv_gemm takes these operands: a F32 (any row stride, rows may overlap), w BF16 [N, K]
// with N ∈ {32, 64, 128} and N·ceil16(K) bf16 values in at most 96 KB, out F32 [M, N] with an even
// row stride and 8-byte aligned rows.
bool conv_gemm_fits(const Tensor& a, const Tensor& w, const Tensor& out);

// out[M, N] = bf16(a)[M, K]·wᵀ + bias (bias F32 [N] or nullptr). Per row the products are summed in
// f32 on the tensor cores 16 values of k at a time, in k order, so a row's bits depend on K only,
// not on M or on the rows beside it. sms: the device's multiprocessors (the persistent grid's size).
void conv_gemm(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, int sms, cudaStream_t s);

}  // namespace vv::cuda
