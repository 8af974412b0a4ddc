// Scalar reference implementation of every Backend op: plain loops, f32 accumulation in a fixed
// order (k ascending), no SIMD intrinsics. It is the yardstick every fast path is tested against,
// and the backend's kScalar ISA. Stateless free functions; any thread, on disjoint outputs.
#pragma once

#include <cstdint>

#include "kernels/backend.h"

namespace vv::ref {

// Element i of a weight/scale vector or matrix row stored as F32, BF16 or F16.
inline float load_as_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}
// Stores v into element i of an F32, BF16 or F16 array (round to nearest even).
void store_from_f32(void* base, DType t, int64_t i, float v);

float gelu_erf(float x);  // x·0.5·(1 + erf(x/√2)) in f32
float silu(float x);      // x / (1 + exp(−x)) in f32

void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out);
void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void silu_mul(const Tensor& gate_up, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void copy(const Tensor& src, Tensor& dst);
void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta);
void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
              const AttentionShape& shape);
// Query heads [head_begin, head_end) of every row (head_end < 0: all heads). Memory per call is
// O(context), never O(rows × context).
void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, int head_begin = 0, int head_end = -1);
void argmax(const Tensor& logits, Tensor& out);
// Backend::argmax_logprob's logprob of the ids already in `ids` (max and sum in double).
void logprob_at(const Tensor& logits, const Tensor& ids, Tensor& logprob);

// Physical cache row (slot) of position `pos` of sequence `seq`: block_tables[seq, pos/bs]·bs + pos%bs.
int64_t kv_slot(const AttentionRows& rows, int32_t seq, int32_t pos);

}  // namespace vv::ref
