// Launcher of the tensor-core prefill attention (internal to kernels/cuda; see prefill_attention.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/prefill_attention.h"

namespace vv::cuda {

// paged_attention for many rows on the tensor cores (flash_prefill_applies said yes): q and the
// cached K/V are rounded to bf16, scores and the online softmax stay f32, P is rounded to bf16 for
// P·V, accumulation is f32. K/V rows must be 16-byte aligned (kv_heads·head_dim a multiple of 8).
// `sms` (the GPU's SM count; 0: not given) lets a decode-shaped call too small to fill the GPU run
// one row per block (the same bits per row). form: the block form (FlashForm, prefill_attention.h;
// flash_form_taken decides what runs); a row's bits depend on it, not on the other rows of the call.
// rope_freq (inv_freq of rope, head_dim / 2 floats; null: none): q holds the rows before rope, which
// the kernel applies at row_pos as it loads them (the bits of rope_kv_write's rotation), leaving q
// as it was; only the forms flash_form_ropes names (the caller checks).
void flash_prefill_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                             const AttentionShape& shape, Tensor& out, cudaStream_t s, int sms = 0,
                             FlashForm form = FlashForm::kNarrow, const float* rope_freq = nullptr);

}  // namespace vv::cuda
