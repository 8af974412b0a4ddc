// AVX2/FMA fast paths of the CpuBackend ops (defined in *_avx2.cpp, compiled with -mavx2 -mfma
// -mf16c; call only when the CPU has them). Each function computes the slice it is given; gemm
// splits itself over the pool. Results are deterministic and independent of M and thread count.
#pragma once

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace vv::avx2 {

void gemm(cpu::ThreadPool& pool, const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out);
void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void silu_mul(const Tensor& gate_up, Tensor& out);
void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, int head_begin, int head_end);
void argmax(const Tensor& logits, Tensor& out);
// ref::logprob_at's values (f32 rows: a vector max, then exp sums in 8 lanes, added in double per 1,024
// values; other dtypes: the reference).
void logprob_at(const Tensor& logits, const Tensor& ids, Tensor& logprob);

// Peak f32 FMA throughput of one thread, GFLOP/s, over `iterations` of 12 independent chains.
double fma_peak_one_thread(int64_t iterations);

// Memory-bandwidth probe loops (p, a, b, c 32-byte aligned). read_stream_sum: the sum of p[0..n),
// read as `streams` (1 or 8) equal parts side by side, with 8 optionally a software prefetch per
// line 256 bytes ahead (the GEMV's pattern). stream_triad: a[i] = b[i] + scale·c[i].
float read_stream_sum(const float* p, int64_t n, int streams, bool prefetch);
void stream_triad(float* a, const float* b, const float* c, float scale, int64_t n);

}  // namespace vv::avx2
