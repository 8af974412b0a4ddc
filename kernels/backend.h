// The op set: the seam between the model (engine/model) and the hardware (kernels/cpu, kernels/cuda).
// A Backend owns its buffers and its worker threads/stream; Tensors are non-owning views into
// Buffers. One Backend is driven by one thread at a time (the engine loop); ops are issued in
// order and complete in order. Nothing here knows about VibeVoice: only shapes, dtypes and math.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vv {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8, kI8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kI8: return 1;
  }
  return 0;
}
const char* dtype_name(DType t);  // "F32", "BF16", ... (safetensors spelling)

// bf16 <-> f32 on the host. bf16 is the upper half of an f32; rounding is to nearest even.
inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t v);

// A view: up to 4 dims, row-major by default. Strides are in elements. Most ops take 2-D
// matrices [rows, cols] whose rows may be strided (stride[0] >= cols) but whose columns are
// contiguous (stride[1] == 1).
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> stride{};

  static Tensor matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride = -1) {
    Tensor t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 2;
    t.shape = {rows, cols, 0, 0};
    t.stride = {row_stride < 0 ? cols : row_stride, 1, 0, 0};
    return t;
  }
  static Tensor vector(void* data, DType dtype, int64_t n) {
    Tensor t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 1;
    t.shape = {n, 0, 0, 0};
    t.stride = {1, 0, 0, 0};
    return t;
  }
  int64_t rows() const { return ndim >= 2 ? shape[0] : 1; }
  int64_t cols() const { return ndim >= 2 ? shape[1] : shape[0]; }
  int64_t row_stride() const { return ndim >= 2 ? stride[0] : shape[0]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Rows [begin, begin+count) of a 2-D view.
  Tensor row_slice(int64_t begin, int64_t count) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * stride[0] * static_cast<int64_t>(dtype_size(dtype));
    t.shape[0] = count;
    return t;
  }
  // Columns [begin, begin+count) of a 2-D view (rows keep their stride).
  Tensor col_slice(int64_t begin, int64_t count) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * static_cast<int64_t>(dtype_size(dtype));
    t.shape[1] = count;
    return t;
  }
};

// Memory owned by a Backend (host memory for the CPU, device memory for CUDA).
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, void (*release)(void*, size_t)) : data_(data), bytes_(bytes), release_(release) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = o.data_;
      bytes_ = o.bytes_;
      release_ = o.release_;
      o.data_ = nullptr;
      o.bytes_ = 0;
      o.release_ = nullptr;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset() {
    if (data_ && release_) release_(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Tensor matrix(DType dtype, int64_t rows, int64_t cols) const { return Tensor::matrix(data_, dtype, rows, cols); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  void (*release_)(void*, size_t) = nullptr;
};

// Fused tail of a GEMM: out = epilogue(a·wᵀ + bias).
enum class Epilogue : uint8_t {
  kNone,         // out = a·wᵀ + bias
  kGelu,         // out = gelu_erf(a·wᵀ + bias)
  kAddResidual,  // out += a·wᵀ + bias        (out is read, then written)
};

// Paged KV cache for one layer: [num_blocks, block_size, kv_heads, head_dim], K and V separate.
struct KvLayer {
  Tensor k;  // data/dtype used; logical shape [num_blocks*block_size, kv_heads*head_dim]
  Tensor v;
};

// Rows of one step, each belonging to a sequence with a block table. Row r of sequence s sits at
// absolute position row_pos[r] and attends to positions 0..row_pos[r] of s (causal).
struct AttentionRows {
  Tensor row_seq;       // I32 [n]: sequence index of each row (into block_tables)
  Tensor row_pos;       // I32 [n]: absolute position of each row
  Tensor block_tables;  // I32 [num_seqs, max_blocks_per_seq]: physical block of each logical block
  int block_size = 16;
  // Set by the caller when every sequence of block_tables has exactly one row in the call (a decode step):
  // each row's own k/v are then the only ones of the call its sequence's attention reads, so a backend may
  // write them inside the attention (the CUDA backend's VV_CUDA_ROPE_ATTN). False: no such promise.
  bool one_row_per_seq = false;
};

struct AttentionShape {
  int heads = 0;     // query heads
  int kv_heads = 0;  // query head h uses kv head h / (heads / kv_heads)
  int head_dim = 0;
  float scale = 0;   // softmax scale, 1/sqrt(head_dim) for Qwen2
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu-avx2 (2 threads)", "cuda:0 (NVIDIA H200)"

  // --- memory ---------------------------------------------------------------------------------
  virtual Buffer allocate(size_t bytes) = 0;  // zero-filled
  // Copies in order with the ops. `host_src` may be rewritten as soon as upload returns, unless it is
  // allocate_host memory: that is read when the copy runs, so it must stay unchanged until a host
  // sync (synchronize, download) has seen the copy done (CUDA: pinned memory, copied asynchronously).
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // The first device error since creation ("" = none): a launch or library call that failed (the
  // CUDA backend records it; CUDA errors are sticky). Work issued since cannot be trusted, so the
  // runner fails the step rather than return its ids.
  virtual std::string device_error() const { return {}; }

  // --- memory accounting and streaming (memory caps, layer streaming: engine/runner) -------------
  // Bytes held now by Buffers from allocate(), and the most held at once since creation or the
  // last reset_peak(). 0 from a backend that does not count.
  virtual size_t allocated_bytes() const { return 0; }
  virtual size_t peak_allocated_bytes() const { return 0; }
  virtual void reset_peak() {}
  // The device's free and total memory as its driver reports them (every allocation of every
  // process, the context included); false where there is no such figure (the CPU).
  virtual bool device_memory(size_t* free_bytes, size_t* total_bytes) {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }
  // Host memory the device can copy from asynchronously (CUDA: pinned), zero-filled. The default
  // is ordinary host memory, which every backend's upload() accepts.
  virtual Buffer allocate_host(size_t bytes);
  // Starts copying `bytes` from host memory (allocate_host) to device memory `dst` once every op
  // issued before has finished (so `dst` may still be read by them), and returns at once with a
  // ticket; ops issued after wait_copy(ticket) see the copied bytes, ops issued in between may run
  // while it copies. `host_src` must stay unchanged until then. The default copies in order on the
  // op stream (upload); the CUDA backend copies on a second stream.
  virtual uint64_t copy_async(void* dst, const void* host_src, size_t bytes) {
    upload(dst, host_src, bytes);
    return 0;
  }
  virtual void wait_copy(uint64_t ticket) { (void)ticket; }

  // --- a second op stream (the two speech encoders run side by side) ---------------------------
  // A backend on the same device whose ops run on a stream of their own, concurrently with this
  // one's; its Buffers and this one's are usable by both. nullptr where ops cannot overlap (the
  // default; the caller then runs everything here, in order). The lane must not outlive this backend.
  virtual std::unique_ptr<Backend> make_lane() { return nullptr; }
  // Orders two backends of one device: ops issued here after the call run after every op issued to
  // `other` before it. The default (no lanes) has nothing to order.
  virtual void wait_for(Backend& other) { (void)other; }

  // --- replaying a step (backends that defer ops and replay repeated sequences: CUDA graphs) ---
  // A handle to the op sequence that the last host sync launched, when it ran from a graph that can
  // be launched again as it is; 0 when there is none (the CPU, a sequence seen for the first time,
  // graphs off).
  virtual uint64_t last_flush_handle() const { return 0; }
  // Launches that sequence again after every op issued before, standing in for recording the same
  // ops on the same operands once more (only the contents of device memory may differ: the caller
  // promises that). False when the handle is no longer held (the graphs were dropped): nothing ran.
  virtual bool replay_flush(uint64_t handle) {
    (void)handle;
    return false;
  }

  // --- dense ops (activations are F32 unless stated) ------------------------------------------
  // out[M,N] (=|+=) a[M,K]·w[N,K]ᵀ + bias[N]. a: F32 rows (row stride may differ from K, even be
  // smaller than K: overlapping rows express a convolution); w: F32, BF16 or F16 contiguous;
  // bias: F32 [N] or nullptr.
  virtual void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) = 0;

  // out[r,:] = round_f32(x[r,:] / sqrt(mean(x[r,:]²) + eps)) * weight. weight: F32 or BF16 [cols].
  // Sum of squares in f32 (the reference's order differs only at the ulp level). out may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;

  // Causal depthwise conv over time, x laid out [time, channels]:
  //   out[t,c] = bias[c] + Σ_k w[c,k] · x[t + k − (K−1), c],   x rows before row 0 come from
  // `history` ([K−1, C], the previous segment's last inputs; zeros at the start of a stream).
  // w: [C, K] F32/BF16; bias F32 [C]. out must not alias x.
  virtual void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w,
                                       const Tensor& bias, Tensor& out) = 0;

  // x[r,c] += scale[c] * y[r,c]   (layer scale; scale F32/BF16 [cols])
  virtual void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) = 0;
  // out = a + b (elementwise, same shape). out may alias a or b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // A ConvNeXt mixer branch in place: u = rms_norm(x), x += gamma ⊙ depthwise_conv1d_causal(u, history).
  // u F32 [T, C]: only its last min(T, K−1) rows are an output (the caller carries them as the next
  // segment's history); the rest of u and v F32 [T, C] are scratch. The default is exactly that
  // sequence of the ops above; a backend may fuse it (then only u's last rows are defined).
  virtual void conv_mixer(Tensor& x, const Tensor& norm_w, float eps, const Tensor& history, const Tensor& w,
                          const Tensor& bias, const Tensor& gamma, Tensor& u, Tensor& v) {
    rms_norm(x, norm_w, eps, u);
    depthwise_conv1d_causal(u, history, w, bias, v);
    add_scaled(x, gamma, v);
  }

  // A ConvNeXt FFN branch in place, pointwise over the rows of x [T, C]:
  //   x += gamma ⊙ (gelu_erf(rms_norm(x)·w1ᵀ + b1)·w2ᵀ + b2)
  // w1 [E, C], w2 [C, E] (F32/BF16/F16), b1 F32 [E], b2 F32 [C], norm_w and gamma [C]. Scratch:
  // u and v F32 [T, C], h F32 [tile, E]. The default is exactly this sequence of the ops above, the
  // hidden rows `tile` = h.rows() at a time (so a backend without a fused kernel gives the same
  // bytes as the unfused ops); a backend may fuse it, leaving u, v and h unspecified.
  virtual void conv_ffn(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                        const Tensor& w2, const Tensor& b2, const Tensor& gamma, Tensor& u, Tensor& v, Tensor& h) {
    rms_norm(x, norm_w, eps, u);
    const int64_t t = x.rows(), tile = h.rows() > 0 ? h.rows() : 1;
    for (int64_t r0 = 0; r0 < t; r0 += tile) {
      const int64_t n = t - r0 < tile ? t - r0 : tile;
      Tensor ht = h.row_slice(0, n);
      gemm(u.row_slice(r0, n), w1, &b1, ht, Epilogue::kGelu);
      Tensor vt = v.row_slice(r0, n);
      gemm(ht, w2, &b2, vt, Epilogue::kNone);
      Tensor xt = x.row_slice(r0, n);
      add_scaled(xt, gamma, vt);
    }
  }
  // One ConvNeXt block of the encoders: the mixer branch (conv_mixer) then the FFN branch (conv_ffn) on
  // the same rows x [T, C], both norms with eps. A backend that runs the whole block as one fused
  // operation takes it and returns true: x is then as the two ops leave it, and u's last min(T, K−1)
  // rows hold the mixer's normalised rows (the next segment's history, as conv_mixer leaves them); the
  // rest of u and v and all of h are scratch. The default takes nothing and returns false; the caller
  // then runs conv_mixer and conv_ffn itself (the FFN may then run over several clips' rows at once).
  struct ConvBlockWeights {
    Tensor norm_w, mixer_w, mixer_b, gamma;        // mixer branch: norm weight, taps [C, K], bias, scale
    Tensor ffn_norm_w, w1, b1, w2, b2, ffn_gamma;  // FFN branch, as conv_ffn takes them
  };
  virtual bool conv_block(Tensor& x, float eps, const Tensor& history, const ConvBlockWeights& wt, Tensor& u,
                          Tensor& v, Tensor& h) {
    (void)x, (void)eps, (void)history, (void)wt, (void)u, (void)v, (void)h;
    return false;
  }
  // out[r,c] = silu(gate_up[r,c]) * gate_up[r, I + c], gate_up [n, 2I] → out [n, I]
  virtual void silu_mul(const Tensor& gate_up, Tensor& out) = 0;
  // The caller will not read t's contents again before overwriting them: a backend may leave t
  // unwritten (or holding other bytes) by the ops issued since the last synchronize(). A no-op
  // unless a backend fuses across it (the CUDA backend's prefill MLP).
  virtual void discard(const Tensor& t) { (void)t; }
  // out[r,:] = table[ids[r],:]; table F32/BF16 [V,H]; ids I32 [n].
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // 2-D copy with independent row strides (same dtype, same shape).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;

  // Rotate-half RoPE in place on x [n, heads·head_dim] at positions pos I32 [n]:
  //   inv_freq[i] = 1 / theta^(f32(2i)/f32(d)) (f32), φ = f32(pos)·inv_freq[i],
  //   x'[i] = x[i]·cos φ − x[i+d/2]·sin φ,  x'[i+d/2] = x[i+d/2]·cos φ + x[i]·sin φ.
  virtual void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) = 0;

  // Writes k/v rows [n, kv_heads·head_dim] into the paged cache at (row_seq, row_pos).
  virtual void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                        const AttentionShape& shape) = 0;
  // out[n, heads·head_dim] = softmax(q·Kᵀ·scale, causal per row) · V over the paged cache.
  // f32 softmax; the rows' own k/v must have been written first.
  virtual void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                               const AttentionShape& shape, Tensor& out) = 0;

  // out I32 [n] = argmax over each row of logits [n, V]; ties go to the lowest index.
  virtual void argmax(const Tensor& logits, Tensor& out) = 0;
  // ids I32 [n] as argmax gives them, and logprob F32 [n] = each row's log-softmax at its id:
  // x[id] − log Σ exp(x), NaN counted as −inf, at most 0; −inf for a row without a finite value.
  // What a greedy row's logprob needs, so that only two numbers a row cross to the host.
  virtual void argmax_logprob(const Tensor& logits, Tensor& ids, Tensor& logprob) = 0;
};

}  // namespace vv
