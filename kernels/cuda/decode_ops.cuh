// Decode-step kernels of the CUDA backend (one token per sequence): a bandwidth-bound one-row GEMV
// that streams each weight row once with 16-byte loads, with the fusions a decoder layer allows
// (RMSNorm prologue, several weights sharing the input row, SwiGLU epilogue, residual add), RoPE of
// q and k fused with the KV-cache write, and a multi-block argmax. Every fused form computes each
// value with the same operations in the same order as the unfused ops of the backend, so a step
// whose ops the recorder fused (graph replay) is bitwise equal to the same ops launched one by one.
// Kernels are launched with programmatic dependent launch where the device allows it (VV_CUDA_PDL=0
// turns it off): a GEMV issues the loads of its first weights before waiting for the previous
// kernel, so the weight stream does not stop at kernel boundaries.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/kernel_trace.h"

namespace vv::cuda {

// The decode GEMV applies: one activation row of F32 with K % 8 == 0 and 16-byte aligned rows, a
// contiguous-column weight (F32, BF16 or F16) with ldw % 8 == 0 and a 16-byte aligned base.
bool decode_gemv_fits(const Tensor& a, const Tensor& w);

constexpr int kMaxDecodeJobs = 4;
struct DecodeGemvJob {
  const void* w = nullptr;  // [N, K], row stride ldw
  int64_t ldw = 0, N = 0;
  const float* bias = nullptr;  // F32 [N] or nullptr
  float* out = nullptr;         // [1, N]
  int ep = 0;                   // Epilogue::kNone or kAddResidual
  int64_t task_begin = 0;       // filled by decode_gemv
};

// out_j[n] (=|+=) act · w_j[n,:] + bias_j[n] for every job j, one launch.
struct DecodeGemv {
  const float* x = nullptr;  // the input row [K]; with norm_w, the RMSNorm's input
  int64_t K = 0;
  DType wt = DType::kBF16;  // every job's weight dtype
  // RMSNorm prologue (norm_w set): act = (x · inv) · norm_w with inv = 1/sqrt(mean(x²) + eps) summed
  // in the order of the backend's rms_norm; act is also written to norm_out (the op's output).
  const float* norm_w = nullptr;  // F32 [K]
  float eps = 0;
  float* norm_out = nullptr;
  // SwiGLU epilogue (silu_out set; one job of N = 2I rows, no residual): the warp that computes row
  // n < I also computes row I + n, stores both, and writes silu(out[n]) · out[I + n] to silu_out[n].
  float* silu_out = nullptr;
  // SwiGLU prologue (swiglu_in set; the bulk kernel only, no norm prologue or SwiGLU epilogue): the
  // activation is silu(swiglu_in[c]) · swiglu_in[K + c] (silu_mul's arithmetic) instead of x, and the
  // blocks also write it to swiglu_act between them (the op's output, which x may name: x is not read). The
  // caller sets it only where decode_gemv_bulk_takes (no other kernel has the prologue).
  const float* swiglu_in = nullptr;  // F32 [2K]
  float* swiglu_act = nullptr;
  DecodeGemvJob j[kMaxDecodeJobs];
  int count = 0;
  int sms = 132;
  // balance (the backend's default; VV_CUDA_GEMV_BALANCE=0: off): a one-row-per-warp launch without the norm
  // prologue whose rows fit the resident warps in one round (batch-1's o and down: 3,584 rows) takes as many
  // rows a block as spread them evenly over the resident blocks (7 a block in 512 blocks: at most 28 rows an
  // SM) instead of 8 (448 blocks; 52 SMs with a fourth block: 32 rows); and so does the paired launch
  // (pair_rows: the 7B's fused norm + q/k/v, 2,304 pairs in 384 blocks of 6 warps, 2-3 an SM, instead of
  // 288 blocks of 8: 24 SMs with 24 warps against 16 on the others; Nsight, H100: 25.3 µs for 33 MB, 0.73
  // waves, 40 % of DRAM peak). A row's sum does not change.
  bool balance = false;
  int tpb = 0;  // set by the launch: rows a block where balance spreads them
  // Unless VV_CUDA_GEMV_PAIR=0: a launch without the SwiGLU epilogue whose rows need a second round of the
  // warps resident at the default blocks per SM but fit one round two a warp (the fused norm + q/k/v:
  // 4,608 rows against 3,168 warps), every job of an even row count, 16-bit weights, the rolled
  // schedule: the warp that computes row n of a job also computes row N/2 + n (a row's sum keeps its
  // order: the same bits).
  bool pair_rows = false;
  // bulk (VV_CUDA_GEMV_BULK=1; the caller sets it only on sm_90): the weights stream through shared
  // memory by cp.async.bulk (decode_gemv_bulk_takes: 16-bit weights with contiguous rows, K a
  // multiple of 8 up to 24,576, or 8,192 with the norm prologue or the SwiGLU epilogue; 16-byte
  // aligned rows and input). A row's sum then has that kernel's order, which depends on K only.
  bool bulk = false;
  // min_blocks = 4 (VV_CUDA_GEMV_NORM_LONE=4, the default; the backend sets it for the final norm + LM head
  // only): a launch with the norm prologue, one row a warp and 16-bit weights on the instance compiled for 4
  // blocks an SM, as the lone GEMV's, instead of 3 (the rolled schedule only). A row's sum does not change.
  int min_blocks = 0;
};
void decode_gemv(DecodeGemv g, cudaStream_t s);
// Whether decode_gemv takes the balanced launch for g (DecodeGemv::balance and its conditions).
bool decode_gemv_balances(const DecodeGemv& g);
// Whether decode_gemv pairs g's rows (DecodeGemv::pair_rows).
bool decode_gemv_pairs(const DecodeGemv& g);
// Whether decode_gemv streams g's weights by cp.async.bulk (DecodeGemv::bulk and its conditions).
bool decode_gemv_bulk_takes(const DecodeGemv& g);

// rope(q, pos, q_heads), rope(k, pos, kv_heads), then kv_write(k, v) in one kernel (the unfused
// ops' arithmetic). pos doubles as rows.row_pos (the model passes the same tensor).
void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& pos, int q_heads,
                   const float* inv_freq, const AttentionRows& rows, KvLayer& cache,
                   const AttentionShape& shape, cudaStream_t s);

// A paged KV layer as the decode kernels address it: row r's sequence row_seq[r], whose block table is
// row row_seq[r] of tables (row stride ldt, bs positions a block); K and V [slots, kv_heads · D] of dtype
// ct, row stride ldc.
struct PagedKv {
  const int32_t* row_seq = nullptr;
  const int32_t* tables = nullptr;
  int64_t ldt = 0;
  int bs = 0;
  void* kc = nullptr;
  void* vc = nullptr;
  int64_t ldc = 0;
  DType ct = DType::kBF16;
};
PagedKv paged_kv(const AttentionRows& rows, const KvLayer& cache);

// rope(q), rope(k) and kv_write inside a decode attention kernel (VV_CUDA_ROPE_ATTN; the stream mma kernel
// and the SIMT one): q is unrotated on entry and each unit (split) rotates it as it loads it (q's memory is
// left as it was); the unit holding a row's last key rotates that row's new k (in place in k, as
// rope_kv_write leaves it) and writes it and v into the cache before any read of that key. Every other
// unit reads keys of earlier steps only, so the call must have one row per sequence
// (AttentionRows::one_row_per_seq). The rotation is rope_kv_write's arithmetic (rope_rotate, the same
// cosf/sinf of the same angles), so the bits are those of the ops. inv_freq null: none.
struct DecodeRope {
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float* k = nullptr;               // f32 [rows, kv_heads·head_dim]
  int64_t ldk = 0;
  const float* v = nullptr;  // f32 [rows, kv_heads·head_dim]
  int64_t ldv = 0;
  void* kc = nullptr;  // the cache's K and V (the attention's own, writable)
  void* vc = nullptr;
  // The SIMT kernel (unless VV_CUDA_ATTN_PRE=0): what does not depend on the kernel before (the block
  // table's slots, the first round's K and V rows of every key but the new one) is loaded before the
  // PDL wait.
  bool pre = false;
  // With `pre`: the rotation's cosines and sines are taken before the PDL wait too (the position and the
  // frequency table do not depend on the kernel before), and the new key's rows reach the block's own
  // scores through shared memory, not back from the cache (VV_CUDA_ATTN_TRIG_PRE=0: neither). Same bits.
  bool trig_pre = false;
  // With `pre`, bf16 cache (the default; VV_CUDA_ATTN_XPOSE=0: off): the block's scores summed over the
  // lanes by a transposing butterfly (a lane keeps half its values at each of warp_sum's xor distances),
  // 62 shuffles a warp instead of 5 a score, and the merge's split maxima and sums in one trip to L2
  // instead of two; the same operations in the same order, so the same bits.
  bool xpose = false;
  // With `xpose` (the backend's default; VV_CUDA_ATTN_MERGE_EARLY=0: off): the merging block loads the first
  // splits' maxima and sums, then their partials, before the split weights are known (decode_bulk.cuh's
  // kEarly). Same bits.
  bool early_merge = false;
  // With `xpose` (VV_CUDA_ATTN_L2PF=1 or 2, opt-in): each block prefetches the K and V rows of its split's
  // rounds after the first to L2 (a split of several rounds: the one-wave plan past 2,112 keys on 132 SMs):
  // 1 before the PDL wait (under the q/k/v GEMV's stream), 2 right after it (under the attention's own
  // latency, when HBM is otherwise idle). A hint: the same bits.
  int kv_prefetch = 0;
  // With `xpose` and `early_merge`, not stamped (the backend's default; VV_CUDA_ATTN_PIPE=0: off): a plan
  // whose splits have several rounds runs the kernel that loads each round's K and V a round ahead
  // (decode_bulk.cuh's kPipe); splits of one round keep the other kernel (no gain, 16 more registers). Same
  // bits.
  bool pipe = false;
  // VV_CUDA_ATTN_STAMPS=1 (a probe; with `pre`, bf16 cache): each block's thread 0 stamps its stages into
  // recs[atomicAdd(count, 1) % cap] (AttnStamp, kernel_trace.h). recs null: no stamps.
  AttnStamp* stamp_recs = nullptr;
  unsigned* stamp_count = nullptr;
  unsigned stamp_cap = 0;
};
// The stamp sink of VV_CUDA_ATTN_STAMPS (allocated on the current device on the first call; call it outside
// graph capture). False where it cannot be allocated. A call from another device gets no sink (*recs null):
// only the first device's blocks are stamped.
bool attn_stamp_sink(AttnStamp** recs, unsigned** count, unsigned* cap);
// decode_attention's operands (its kernel's and the chain's attention phase's).
struct DecodeAttnArgs {
  const float* q = nullptr;
  int64_t ldq = 0;
  const int32_t* row_pos = nullptr;
  PagedKv kv;
  int64_t n = 0;
  int heads = 0, kv_heads = 0, D = 0;
  float scale = 0;
  int chunk = 64, pstride = 64, splits = 1;
  float* out = nullptr;
  int64_t ldo = 0;
  float* ws = nullptr;
  unsigned* counters = nullptr;
  bool lean = false;
  bool wide_merge = false;  // decode_attention's wide_merge
  size_t smem = 0;  // the block's dynamic shared memory (DecodeAttentionPlan::smem)
  DecodeRope rope;  // decode_attention's rope (the chain's attention phase: none)
};

// rope_kv_write's operands (one thread per (row, head, frequency) over the q heads then the k heads).
struct RopeKvArgs {
  float* q = nullptr;
  int64_t ldq = 0;
  float* k = nullptr;
  int64_t ldk = 0;
  const float* v = nullptr;
  int64_t ldv = 0;
  const int32_t* pos = nullptr;
  const float* inv_freq = nullptr;
  int64_t R = 0;
  int qh = 0, kh = 0, D = 0;
  PagedKv kv;
};
RopeKvArgs rope_kv_args(Tensor& q, Tensor& k, const Tensor& v, const Tensor& pos, int q_heads,
                        const float* inv_freq, const AttentionRows& rows, KvLayer& cache,
                        const AttentionShape& shape);

// The decode chain (VV_CUDA_DECODE_CHAIN=1; sm_90; decode_chain.cu): a run of one-row GEMV launches
// that each read what the one before wrote (a decoder layer from its o projection to the next
// layer's q/k/v: o + residual → norm + gate_up → SwiGLU + down + residual → norm + q|k|v), optionally
// followed by rope_kv_write, as one persistent kernel: one block per SM, its weight tiles streamed by
// cp.async.bulk through one ring of shared-memory stages that runs across the phases (the next
// phase's first tiles are in flight while this one finishes and while the grid waits at the barrier
// between phases), a grid-wide barrier between phases. Each phase is the bulk GEMV's arithmetic
// (decode_bulk.cuh), so every output has the bits of the phases launched one by one on the bulk
// kernel. All blocks must be resident at once (one per SM: grid = sms); a barrier that waits longer
// than 10 s traps (the launch then fails) rather than hang.
constexpr int kMaxChainPhases = 6;
constexpr int kChainTraceWords = 32;
struct DecodeChain {
  DecodeGemv ph[kMaxChainPhases];  // each one decode_gemv_bulk_takes (bulk set)
  int phases = 0;
  bool rope = false;  // rope_kv_write after the last phase
  RopeKvArgs r;
  // The SIMT decode attention before the first phase (its blocks' work spread over the grid; then a
  // barrier): a whole layer in one launch.
  bool attn = false;
  DecodeAttnArgs at;
  unsigned* barrier = nullptr;  // 2 unsigned ints of device memory, zeroed before the first launch
  int sms = 132;
  size_t smem_max = 227 * 1024;  // a block's shared memory on the device (sharedMemPerBlockOptin)
  // Filled by decode_chain: each phase's tiles, rows a tile and form.
  int64_t tiles[kMaxChainPhases] = {};
  int tr[kMaxChainPhases] = {};
  int form[kMaxChainPhases] = {};
  bool pair[kMaxChainPhases] = {};  // gate/up rows paired with the SwiGLU epilogue (silu_out set)
  // VV_CUDA_CHAIN_L2_KB: bytes of each block's tiles after its ring's first fill prefetched into L2
  // before the kernel waits for the one before it (0: none; filled by decode_chain).
  int64_t l2_ahead = 0;
  // VV_CUDA_CHAIN_TRACE=1: kChainTraceWords zeroed 64-bit words of device memory that thread 0 of block 0
  // adds its timings to at the end of each launch (decode_chain_trace_report reads them); null: off.
  uint64_t* trace = nullptr;
};
// The chain's trace words as text: per launch, the µs of each part as thread 0 of block 0 saw them;
// empty when no launch was traced.
std::string decode_chain_trace_report(const uint64_t* words);
// Whether decode_chain takes c (its phases bulk GEMVs of one weight dtype).
bool decode_chain_takes(const DecodeChain& c);
void decode_chain(DecodeChain c, cudaStream_t s);
// What decode_chain launches for c (host arithmetic only; c's per-phase fields are filled): the ring's
// stages of `stride` bytes, the attention's shared memory at attn_offset, `smem` bytes in all a block.
struct DecodeChainLaunch {
  int stages = 0;
  size_t stride = 0, attn_offset = 0, smem = 0;
};
DecodeChainLaunch decode_chain_launch(DecodeChain& c);
// The shared-memory bytes of the chain's ring (VV_CUDA_CHAIN_KB, 64 to 226; 190 by default).
size_t decode_chain_budget();

// Bulk prefetch of [p, p + bytes) into L2 (sm_90: cp.async.bulk.prefetch.L2; p and bytes multiples of
// 16) by a small PDL-chained kernel, so that HBM streams the next GEMV's weights while a latency-bound
// kernel runs. after_wait: the prefetches are issued once the previous kernel has finished (during the
// kernel after this one); otherwise as soon as this kernel starts. Either way the kernel finishes only
// after the previous one, so the next kernel's wait still covers what that wrote. A hint only: it
// changes no result. Off sm_90 it launches nothing.
void l2_prefetch(const void* p, size_t bytes, bool after_wait, int sms, cudaStream_t s);

// argmax over each row (ties to the lowest index, the first NaN wins) in two launches: a slice of a
// row per block (16-byte loads where the rows allow them), then a warp a row over its slices. The
// result does not depend on the plan. ws: decode_argmax_ws_bytes(rows) bytes of device memory.
// logprob (F32 [rows], optional): Backend::argmax_logprob's, each slice's block also summing exp(x − its
// running max) (online, rescaled as the max rises; NaN and −inf add nothing), the final warp merging the
// slices' (max, sum) pairs: x[id] − (max + log sum), at most 0, −inf without a finite value. With it
// the slices are planned as for one row whatever the row count, so a row's logprob has one sum order.
size_t decode_argmax_ws_bytes(int64_t rows);
// The slices: about four blocks an SM over all rows, at least 1,024 elements a slice, at most 256 a row;
// len a multiple of vec (elements a load: 16 / elem_bytes where the data is 16-byte aligned and ld a
// multiple of it, else 1). parts = 0: nothing to do.
struct ArgmaxPlan {
  int parts = 0;
  int vec = 1;
  int64_t len = 0;
};
ArgmaxPlan plan_argmax(int64_t rows, int64_t V, int64_t elem_bytes, int64_t ld, bool aligned, int sms);
void decode_argmax(const Tensor& logits, Tensor& out, void* ws, int sms, cudaStream_t s,
                   float* logprob = nullptr);

// Decode attention (rows that each attend their own sequence's cache; decode steps, batched or not):
// splits of the keys per (row, kv head), merged by the last block of each pair. Used for up to
// kDecodeAttentionMaxRows rows, GQA groups up to 8 and head_dim up to 128 (a multiple of 4); `use`
// is false otherwise. ws: ws_floats floats; counters: `counters` zeroed unsigned ints (left zeroed).
// `lean`: splits past a row's length leave at once and stay out of its merge, a warp's first-round V
// rows are loaded with its K rows, and the merge issues 8 splits' loads for all of a thread's outputs
// at once; each output's sum keeps the split order, so the bits are those without it. `wide_merge`
// (the backend's default; VV_CUDA_ATTN_WIDE_MERGE=0 turns it off): that merge, over every split as without
// `lean` (the others add zeros), and nothing else of `lean`: the same bits.
constexpr int64_t kDecodeAttentionMaxRows = 256;
struct DecodeAttentionPlan {
  bool use = false;
  int splits = 1, chunk = 64, pstride = 64;
  size_t ws_floats = 0, counters = 0, smem = 0;
};
// `one_wave` (the backend's default; VV_CUDA_ATTN_WAVE=0: off): for one row (what was measured) and no more
// kv heads than `sms`, splits of whole 64-key rounds, as few as keep its splits within `sms` blocks (a block
// of the SIMT kernel takes a SM's registers: more blocks run in waves, and the merge makes a trip to L2 for
// every 8 or 24 splits); at a 1,024-row prompt of the 7B on 132 SMs the same 21 splits, at 4,096 rows 23 of
// 192 keys instead of 69 of 64; the splits no longer than a block's shared memory (`smem_limit` bytes: the
// scores and slots grow with them) allows. Other splits, other rounding: not the bits without it.
DecodeAttentionPlan plan_decode_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape,
                                          int sms, bool one_wave = false, size_t smem_limit = 48 * 1024);
// rope (null: none): DecodeRope.
void decode_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                      const AttentionShape& shape, Tensor& out, const DecodeAttentionPlan& p, float* ws,
                      unsigned* counters, bool lean, cudaStream_t s, const DecodeRope* rope = nullptr,
                      bool wide_merge = false);
// decode_attention's operands as its kernel takes them.
DecodeAttnArgs decode_attn_args(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                                const AttentionShape& shape, Tensor& out, const DecodeAttentionPlan& p,
                                float* ws, unsigned* counters, bool lean, bool wide_merge = false);

// Decode attention on the tensor cores (bf16 mode; decode_attention.h says which shapes): one warp
// per unit of kMmaDecodeChunk keys of one (row, kv head), the GQA group as the M side of m16n8k16
// bf16 mmas (q, K, V and the softmax weights rounded to bf16; scores, softmax and sums in f32),
// K and V fragments loaded straight from the paged cache into registers. A row with more than one
// unit leaves per-unit (acc, max, sum) in ws; the last unit of the (row, kv head) to finish merges
// them in unit order. Units past a row's own length exit at once, so a row's result depends only
// on its own q, cache and length. ws: ws_floats floats; counters: zeroed, left zeroed.
// MmaDecodeConfig (decode_attention.h) picks the kernel: the fragments loaded into registers 16
// keys at a time (default), or streamed through per-warp shared-memory stages with cp.async.
// plan_mma_decode_attention: row_invariant (deterministic mode) keeps the configured form at every row
// count (MmaDecodeConfig::share_min_pairs does not apply). share: the stream kernel's unit is a block's.
// cfg (null: the process-wide mma_decode_config()): the variant; the plan keeps it, and
// mma_decode_attention launches that variant.
struct MmaDecodePlan {
  bool use = false;
  bool share = false;
  int chunk = 64, splits = 1;
  size_t ws_floats = 0, counters = 0;
  MmaDecodeConfig cfg;
};
MmaDecodePlan plan_mma_decode_attention(int64_t n, const AttentionRows& rows, const AttentionShape& shape,
                                        bool row_invariant = false, const MmaDecodeConfig* cfg = nullptr);
// pack (stream kernel only: MmaDecodeConfig::stream; null: none): out's values also rounded to bf16 into
// pack, [rows, heads·head_dim] contiguous, 4-byte aligned: the bits pack_rows4 makes of out, for the bf16
// GEMM that reads out next (VV_CUDA_ATTN_PACK). rope (stream kernel only; null: none): DecodeRope.
void mma_decode_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                          const AttentionShape& shape, Tensor& out, const MmaDecodePlan& p, float* ws,
                          unsigned* counters, cudaStream_t s, void* pack = nullptr,
                          const DecodeRope* rope = nullptr);

// The shared rotation of rope: x1' = x1·c − x2·s, x2' = x2·c + x1·s, rounded per operation (no FMA
// contraction), so every kernel that applies rope gets the same bits.
#ifdef __CUDACC__
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}
#endif

}  // namespace vv::cuda
