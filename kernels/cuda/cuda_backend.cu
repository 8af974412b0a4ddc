// CudaBackend: device memory, one non-blocking stream, and the dispatch of each op to its kernel
// (cuda_ops.cu) or to cuBLASLt. GEMM routing: few rows (decode) → the bandwidth-bound skinny
// kernel with f32 activations; many rows → cuBLASLt on the tensor cores (kBF16 compute, activations
// rounded to the weight's 16-bit type, f32 accumulation, bias and residual in cuBLASLt's epilogue)
// or the f32 SIMT GEMM (kF32 compute, which must match the CPU reference to f32 rounding).
// Ops are recorded and launched at the next host sync (upload, download, synchronize, or a buffer
// freed on the driving thread); a recorded sequence seen twice with identical operands (the decode
// step) becomes a CUDA graph that is replayed from then on (flush). VV_CUDA_GRAPHS=0 turns this off.
// CUDA errors are sticky: the first one is kept and printed once; later ops still run.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/conv_gemm.cuh"
#include "kernels/cuda/cublaslt_loader.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.cuh"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_ops.cuh"
#include "kernels/cuda/device_cache.h"
#include "kernels/cuda/encoder_ops.cuh"
#include "kernels/cuda/prefill_attention.cuh"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/cuda/stream_gemm.cuh"

namespace vv {
namespace {

// Rows up to which a GEMM takes the skinny path. In bf16 mode cuBLASLt's tensor cores beat it from
// 2 rows on (7B shapes on an H200); in f32 mode the SIMT GEMM re-reads weights per 64-row tile
// anyway, so the skinny path (which re-reads them from cache per 8 rows) wins longer.
constexpr int64_t kSkinnyRowsBf16 = 1;
constexpr int64_t kSkinnyRowsF32 = 64;

void release_device(void* p, size_t);
void release_pinned(void* p, size_t);

// The per-op profile label of each flash attention form.
const char* flash_label(cuda::FlashForm form) {
  switch (form) {
    case cuda::FlashForm::kWide:
      return "paged_attention.flash128";
    case cuda::FlashForm::kTwoTiles:
      return "paged_attention.flash128x2";
    case cuda::FlashForm::kWgmma:
      return "paged_attention.flashwg";
    case cuda::FlashForm::kWgmmaPipelined:
      return "paged_attention.flashwgp";
    case cuda::FlashForm::kWgmmaFull:
      return "paged_attention.flashwgf";
    case cuda::FlashForm::kWgmmaLean:
      return "paged_attention.flashwgfl";
    default:
      return "paged_attention.flash";
  }
}
// VV_CUDA_FLASH_QV: the flash attention block's form. Default: "wgfl" (two warpgroups, scores and P·V
// on wgmma, the next tile's scores in flight during a tile's softmax, the key loop cut to fewer
// instructions a tile) where the device is sm_90, else "narrow" (4 warps of 16 query vectors). Also
// "128": 8 warps of 16, "128x2": 4 warps of 32, "wg": wgmma scores only, "wgp": "wg" with the scores
// in flight, "wgf": "wgfl" before the instruction cuts. The wgmma forms exist only on sm_90; elsewhere
// they read as "narrow". Anything unknown is the default.
cuda::FlashForm flash_form_from_env(bool hopper) {
  const char* v = std::getenv("VV_CUDA_FLASH_QV");
  const std::string s(v == nullptr ? "" : v);
  if (s == "narrow" || s == "64") return cuda::FlashForm::kNarrow;
  if (s == "128") return cuda::FlashForm::kWide;
  if (s == "128x2") return cuda::FlashForm::kTwoTiles;
  if (!hopper) return cuda::FlashForm::kNarrow;
  return s == "wg"    ? cuda::FlashForm::kWgmma
         : s == "wgp" ? cuda::FlashForm::kWgmmaPipelined
         : s == "wgf" ? cuda::FlashForm::kWgmmaFull
                      : cuda::FlashForm::kWgmmaLean;
}

// Bytes held by allocate()'s Buffers per device (every backend on it together): the figure that a
// memory cap is checked against besides cudaMemGetInfo. release_device finds the device from the
// pointer.
constexpr int kMaxDevices = 64;
std::atomic<size_t> g_live[kMaxDevices];
std::atomic<size_t> g_peak[kMaxDevices];

void count_alloc(int device, size_t bytes) {
  if (device < 0 || device >= kMaxDevices) return;
  const size_t now = g_live[device].fetch_add(bytes) + bytes;
  size_t p = g_peak[device].load();
  while (now > p && !g_peak[device].compare_exchange_weak(p, now)) {
  }
}

class CudaBackend;

// VV_CUDA_PROFILE=1: every op is timed with events and the stream is drained after it, so the
// per-op table (profile_report) shows where a step's time goes. Off: no events, no syncs.
// VV_CUDA_PROFILE=2: the same, with each GEMM's rows, columns and depth in its label.
struct OpTimer {
  CudaBackend* be;
  const char* op;
  OpTimer(CudaBackend* b, const char* name);
  ~OpTimer();
};

class CudaBackend final : public Backend {
 public:
  // A recorded op's operands, for the ops that flush may fuse (decode_ops.cuh): gemm (a, w, b =
  // bias, out), rms_norm (a = x, w = weight, out, f = eps), rope (out = x, a = pos, heads, head_dim,
  // f = theta), kv_write (a = k, w = v, rows, cache, shape), silu_mul (a = gate_up, out).
  struct OpRec {
    enum Kind : uint8_t { kOther, kGemm, kRmsNorm, kRope, kKvWrite, kSiluMul, kDiscard, kAttention };
    Kind kind = kOther;
    Tensor a, w, b, out;
    bool hb = false;
    Epilogue ep = Epilogue::kNone;
    float f = 0;
    int heads = 0, head_dim = 0;
    AttentionRows rows;
    KvLayer cache;
    AttentionShape shape;
  };
  ~CudaBackend() override {
    cudaSetDevice(device_);
    // Ops recorded but never synchronised have no observable result; their buffers may already
    // be gone (freed on another thread), so they are dropped rather than launched.
    pending_.clear();
    pending_rec_.clear();
    if (tl_pending == this) tl_pending = nullptr;
    if (stream_) cudaStreamSynchronize(stream_);
    clear_graphs();
    for (auto& [key, plan] : plans_) destroy_plan(plan);
    if (lt_) lt_api_->destroy(lt_);
    if (lt_ws_) cudaFree(lt_ws_);
    if (l2_flush_) cudaFree(l2_flush_);
    if (sk_ws_) cudaFree(sk_ws_);
    if (stream_flags_) cudaFree(stream_flags_);
    if (stream_ws_) cudaFree(stream_ws_);
    if (pack_) cudaFree(pack_);
    if (attn_ws_) cudaFree(attn_ws_);
    if (argmax_ws_) cudaFree(argmax_ws_);
    if (dec_attn_ws_) cudaFree(dec_attn_ws_);
    if (chain_bar_) cudaFree(chain_bar_);
    if (chain_trace_) cudaFree(chain_trace_);
    for (auto& [key, p] : inv_freq_) cudaFree(p);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    for (cudaEvent_t e : copy_done_)
      if (e) cudaEventDestroy(e);
    if (copy_ready_) cudaEventDestroy(copy_ready_);
    if (copy_stream_) cuda::cache_unregister_stream(copy_stream_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (lane_event_) cudaEventDestroy(lane_event_);
    if (stream_) cuda::cache_unregister_stream(stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  static Result<std::unique_ptr<Backend>> create(const CudaBackendOptions& o) {
    const int count = cuda_device_count();
    if (count == 0) return unsupported("CUDA backend: " + cuda_unavailable_reason());
    if (o.device < 0 || o.device >= count) {
      return out_of_range("CUDA backend: device " + std::to_string(o.device) + " does not exist (" +
                          std::to_string(count) + " found)");
    }
    std::unique_ptr<CudaBackend> b(new CudaBackend());
    b->device_ = o.device;
    b->compute_ = o.compute;
    b->requested_compute_ = o.compute;
    const char* det = std::getenv("VV_CUDA_DETERMINISTIC");
    b->deterministic_ = o.deterministic || (det && std::string(det) == "1");
    if (b->deterministic_) {
      b->decode_gemv_ = false;   // one-row GEMMs take the same cuBLASLt algorithm as the others
      b->decode_attn_mode_ = 0;  // the mma decode attention for every row count
    }
    if (cudaSetDevice(o.device) != cudaSuccess) return internal_error("CUDA backend: cudaSetDevice failed");
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, o.device);
    b->device_name_ = prop.name;
    {
      const char* k = std::getenv("VV_CUDA_STREAM_GEMM_KIND");
      const bool hopper = prop.major == 9 && prop.minor == 0;
      const std::string kind = k ? k : "";
      b->stream_kind_ = !hopper || kind == "mma" ? cuda::StreamGemmKind::kMma
                        : kind == "ws"           ? cuda::StreamGemmKind::kWarpSpec
                                                 : cuda::StreamGemmKind::kWgmma;
      const char* dg = std::getenv("VV_CUDA_DETERMINISTIC_GEMM");
      b->det_ws_ = b->deterministic_ && hopper && dg && std::string(dg) == "ws";
      if (b->det_ws_) b->stream_kind_ = cuda::StreamGemmKind::kWarpSpec;
      b->flash_form_ = flash_form_from_env(hopper);
    }
    b->sms_ = prop.multiProcessorCount;
    b->smem_optin_ = prop.sharedMemPerBlockOptin;
    b->l2_bytes_ = static_cast<size_t>(std::max(prop.l2CacheSize, 0));
    if (prop.major < 9) b->l2_prefetch_ = 0;  // cp.async.bulk.prefetch is sm_90+
    if (prop.major < 9) b->gemv_bulk_ = 0;    // so is cp.async.bulk
    if (prop.major < 9) b->chain_ = false;    // the chain is the bulk GEMV's
    // An explicit VV_CUDA_GEMV_BULK other than 3 asks for other one-row GEMVs: no chain then.
    if (const char* gb = std::getenv("VV_CUDA_GEMV_BULK"); gb && std::string(gb) != "3") b->chain_ = false;
    if (b->chain_) b->gemv_bulk_ = 3;  // what the chain's phases compute: a step it does not fuse agrees
    if (!(prop.major == 9 && prop.minor == 0)) b->ffn_wg_ = false;  // wgmma: sm_90a
    if (cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking) != cudaSuccess) {
      return internal_error("CUDA backend: cannot create a stream on device " + std::to_string(o.device));
    }
    cuda::cache_register_stream(b->device_, b->stream_);
    // VV_CUDA_ATTN_STAMPS=1 (a probe): one sink a process, on the first device that asks for it.
    if (const char* st = std::getenv("VV_CUDA_ATTN_STAMPS");
        st && std::string(st) == "1" &&
        !cuda::attn_stamp_sink(&b->stamp_recs_, &b->stamp_count_, &b->stamp_cap_))
      return internal_error("CUDA backend: cannot allocate the records of VV_CUDA_ATTN_STAMPS");
    if (b->chain_) {  // zeroed on the stream the chain runs on, so ordered before its first launch
      if (cudaMalloc(&b->chain_bar_, 2 * sizeof(unsigned)) != cudaSuccess ||
          cudaMemsetAsync(b->chain_bar_, 0, 2 * sizeof(unsigned), b->stream_) != cudaSuccess)
        return internal_error("CUDA backend: cannot allocate the decode chain's barrier");
      const char* tr = std::getenv("VV_CUDA_CHAIN_TRACE");
      if (tr && std::string(tr) == "1" &&
          (cudaMalloc(&b->chain_trace_, cuda::kChainTraceWords * sizeof(uint64_t)) != cudaSuccess ||
           cudaMemsetAsync(b->chain_trace_, 0, cuda::kChainTraceWords * sizeof(uint64_t), b->stream_) !=
               cudaSuccess))
        return internal_error("CUDA backend: cannot allocate the decode chain's trace");
    }
    if (b->compute_ == CudaCompute::kBF16) {  // only bf16 GEMMs use cuBLASLt: load it then
      b->lt_api_ = cuda::cublaslt();
      if (!b->lt_api_) {
        std::fprintf(stderr, "vibevoice: bf16 GEMMs unavailable (%s); using f32 GEMMs\n", cuda::cublaslt_error().c_str());
        b->compute_ = CudaCompute::kF32;
      } else {
        if (b->lt_api_->create(&b->lt_) != CUBLAS_STATUS_SUCCESS) {
          return internal_error("CUDA backend: cublasLtCreate failed");
        }
        b->lt_ws_bytes_ = 32u << 20;
        if (cudaMalloc(&b->lt_ws_, b->lt_ws_bytes_) != cudaSuccess) {
          return internal_error("CUDA backend: cannot allocate the cuBLASLt workspace");
        }
      }
    }
    if ((b->stream_rows_.second >= b->stream_rows_.first || b->det_ws_) &&
        b->compute_ == CudaCompute::kBF16) {
      if (cudaMalloc(&b->stream_flags_, kStreamFlags * sizeof(int)) != cudaSuccess ||
          cudaMemsetAsync(b->stream_flags_, 0, kStreamFlags * sizeof(int), b->stream_) != cudaSuccess) {
        return internal_error("CUDA backend: cannot allocate the stream GEMM's tile flags");
      }
      if (b->stream_kind_ == cuda::StreamGemmKind::kWarpSpec) {
        b->stream_ws_bytes_ = cuda::stream_gemm_ws_bytes(b->sms_);
        if (cudaMalloc(&b->stream_ws_, b->stream_ws_bytes_) != cudaSuccess) {
          return internal_error("CUDA backend: cannot allocate the stream GEMM's partial sums (" +
                                std::to_string(b->stream_ws_bytes_ >> 20) + " MiB)");
        }
      }
    }
    if ((b->skinny_gemm_ || b->deterministic_) && b->compute_ == CudaCompute::kBF16) {
      b->sk_ws_bytes_ = cuda::skinny_gemm_ws_max_bytes(b->sms_, b->sk_per_sm_);
      if (cudaMalloc(&b->sk_ws_, b->sk_ws_bytes_) != cudaSuccess) {
        return internal_error("CUDA backend: cannot allocate the skinny GEMM's partials (" +
                              std::to_string(b->sk_ws_bytes_ >> 20) + " MiB)");
      }
    }
    return std::unique_ptr<Backend>(std::move(b));
  }

  std::string name() const override {
    return "cuda:" + std::to_string(device_) + " (" + device_name_ + ", " +
           (compute_ == CudaCompute::kBF16 ? "bf16" : "f32") + " GEMMs" +
           (deterministic_ ? ", deterministic" : "") + ")";
  }

  Buffer allocate(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    if (!check(cuda::cache_malloc(device_, n, &p), "cudaMalloc")) return Buffer();
    check(cudaMemsetAsync(p, 0, n, stream_), "cudaMemsetAsync");
    count_alloc(device_, bytes);
    return Buffer(p, bytes, &release_device);
  }
  size_t allocated_bytes() const override { return device_ < kMaxDevices ? g_live[device_].load() : 0; }
  size_t peak_allocated_bytes() const override { return device_ < kMaxDevices ? g_peak[device_].load() : 0; }
  void reset_peak() override {
    if (device_ < kMaxDevices) g_peak[device_].store(g_live[device_].load());
  }
  // Idle blocks of the allocation cache count as free: an allocation that needs them gets them back.
  bool device_memory(size_t* free_bytes, size_t* total_bytes) override {
    cudaSetDevice(device_);
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) return false;
    *free_bytes = std::min(*total_bytes, *free_bytes + cuda::cache_idle_bytes(device_));
    return true;
  }
  // Page-locked, so that copy_async runs at the link's speed and truly asynchronously.
  Buffer allocate_host(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    if (!check(cudaHostAlloc(&p, n, cudaHostAllocPortable), "cudaHostAlloc")) return Buffer();
    std::memset(p, 0, n);
    return Buffer(p, bytes, &release_pinned);
  }
  // On a second stream, after an event recorded behind every op issued so far; the ticket names
  // one of a ring of completion events (a ticket is waited on long before its event is reused).
  uint64_t copy_async(void* dst, const void* src, size_t bytes) override {
    flush();
    if (!copy_stream_) {
      check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "copy stream");
      cuda::cache_register_stream(device_, copy_stream_);
      check(cudaEventCreateWithFlags(&copy_ready_, cudaEventDisableTiming), "copy event");
      for (cudaEvent_t& e : copy_done_) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "copy event");
    }
    const uint64_t ticket = next_copy_++;
    cudaEvent_t done = copy_done_[ticket % copy_done_.size()];
    check(cudaEventRecord(copy_ready_, stream_), "copy_async record");
    check(cudaStreamWaitEvent(copy_stream_, copy_ready_, 0), "copy_async wait");
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_stream_), "copy_async");
    check(cudaEventRecord(done, copy_stream_), "copy_async done");
    return ticket;
  }
  void wait_copy(uint64_t ticket) override {
    if (!copy_stream_ || ticket >= next_copy_) return;
    flush();
    check(cudaStreamWaitEvent(stream_, copy_done_[ticket % copy_done_.size()], 0), "wait_copy");
  }
  // A second backend of the same device and options on a stream of its own (its own cuBLASLt
  // handle, workspaces and graphs), ordered after every op issued here so far, so that weights and
  // buffers made here are ready for it. VV_CUDA_LANES=0: none (the encoders then run in order).
  std::unique_ptr<Backend> make_lane() override {
    if (!lanes_) return nullptr;
    CudaBackendOptions o;
    o.device = device_;
    o.compute = requested_compute_;
    o.deterministic = deterministic_;
    auto lane = create(o);
    if (!lane.is_ok()) {
      std::fprintf(stderr, "vibevoice: no second stream (%s); the encoders run one after the other\n",
                   lane.status().to_string().c_str());
      return nullptr;
    }
    static_cast<CudaBackend&>(**lane).lane_parent_ = this;
    (*lane)->wait_for(*this);
    return std::move(lane).value();
  }
  // Both backends' recorded ops are launched first (never inside a graph capture: the event is
  // recorded and waited on between flushes), then this stream waits for an event behind the other's.
  void wait_for(Backend& other) override {
    auto* o = dynamic_cast<CudaBackend*>(&other);
    if (o == this) return;
    if (o == nullptr || o->device_ != device_) {  // not a stream of this device: wait on the host
      other.synchronize();
      return;
    }
    flush();
    o->flush();
    cudaSetDevice(device_);
    if (!lane_event_ && !check(cudaEventCreateWithFlags(&lane_event_, cudaEventDisableTiming), "lane event"))
      return;
    check(cudaEventRecord(lane_event_, o->stream_), "wait_for record");
    check(cudaStreamWaitEvent(stream_, lane_event_, 0), "wait_for wait");
  }
  // Pageable sources are staged by the driver before the call returns, so the host buffer may be
  // reused at once; pinned ones (allocate_host) are read when the copy runs, so they may not be
  // until a host sync. The copy itself is ordered on the stream.
  void upload(void* dst, const void* src, size_t bytes) override {
    flush();
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    flush();
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download sync");
  }
  void synchronize() override {
    flush();
    check(cudaStreamSynchronize(stream_), "synchronize");
  }
  std::string device_error() const override { return first_error_; }

  // ---- ops: recorded, then launched at the next host sync (see flush) ---------------------------
  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    const bool hb = bias && bias->data;
    const Tensor b = hb ? *bias : Tensor{};
    Sig s(1);
    s << a << w << b << out << static_cast<int>(ep);
    OpRec rec;
    rec.kind = OpRec::kGemm;
    rec.a = a, rec.w = w, rec.b = b, rec.out = out, rec.hb = hb, rec.ep = ep;
    defer(
        s,
        [=, this] {
          Tensor o = out;
          run_gemm(a, w, hb ? &b : nullptr, o, ep);
        },
        &rec);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    Sig s(2);
    s << x << weight << eps << out;
    OpRec rec;
    rec.kind = OpRec::kRmsNorm;
    rec.a = x, rec.w = weight, rec.out = out, rec.f = eps;
    defer(
        s,
        [=, this] {
          Tensor o = out;
          run_rms_norm(x, weight, eps, o);
        },
        &rec);
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                               Tensor& out) override {
    Sig s(3);
    s << x << history << w << bias << out;
    defer(s, [=, this] {
      Tensor o = out;
      run_depthwise_conv1d_causal(x, history, w, bias, o);
    });
  }
  void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) override {
    Sig s(4);
    s << x << scale << y;
    defer(s, [=, this] {
      Tensor xx = x;
      run_add_scaled(xx, scale, y);
    });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    Sig s(5);
    s << a << b << out;
    defer(s, [=, this] {
      Tensor o = out;
      run_add(a, b, o);
    });
  }
  // The encoders' ConvNeXt branches. FFN: one tensor-core kernel in bf16 mode (the unfused path
  // rounds the same operands to bf16); f32 mode and other shapes run the op sequence. Mixer: norm,
  // conv and scaled residual in two kernels (a halo side pass, then one pass over x), the same f32
  // arithmetic as the op sequence, both modes; widths it does not take: rms_norm, then the conv fused
  // with its scaled residual. Profile labels carry the width (the encoder stage).
  void conv_ffn(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                const Tensor& w2, const Tensor& b2, const Tensor& gamma, Tensor& u, Tensor& v, Tensor& h) override {
    if (ffn_wg_ && compute_ == CudaCompute::kBF16 &&
        cuda::conv_ffn_wg_fits(x, norm_w, w1, b1, w2, b2, gamma)) {
      Sig s(106);
      s << x << norm_w << eps << w1 << b1 << w2 << b2 << gamma;
      defer(s, [=, this] {
        Tensor xx = x;
        const std::string label = "conv_ffn.wg.c" + std::to_string(x.cols());
        OpTimer timer(this, label.c_str());
        cuda::conv_ffn_wg(xx, norm_w, eps, w1, b1, w2, b2, gamma, deterministic_, stream_);
        launched("conv_ffn");
      });
      return;
    }
    if (ffn_lt_takes(x, w1, b1, w2, b2, u, v, h)) {
      conv_ffn_lt(x, norm_w, eps, w1, b1, w2, b2, gamma, u, v, h);
      return;
    }
    if (compute_ != CudaCompute::kBF16 || !cuda::conv_ffn_fits(x, norm_w, w1, b1, w2, b2, gamma)) {
      Backend::conv_ffn(x, norm_w, eps, w1, b1, w2, b2, gamma, u, v, h);
      return;
    }
    Sig s(101);
    s << x << norm_w << eps << w1 << b1 << w2 << b2 << gamma;
    defer(s, [=, this] {
      Tensor xx = x;
      const std::string label = "conv_ffn.fused.c" + std::to_string(x.cols());
      OpTimer timer(this, label.c_str());
      cuda::conv_ffn_fused(xx, norm_w, eps, w1, b1, w2, b2, gamma, deterministic_, stream_);
      launched("conv_ffn");
    });
  }
  // bf16 mode, C ≥ VV_CUDA_FFN_LT_MIN (default kFfnLtMin), bf16 weights, not deterministic: the FFN branch
  // on cuBLASLt in row tiles that fit h's memory as bf16 (twice h's rows; the tile's hidden rows stay
  // in L2 between the two GEMMs): rms_norm_pack (its bf16 pack only: u is scratch, unspecified after a
  // fused FFN, and its f32 rows were 8.4 MB a 4,096-row tile at C = 512 written for no reader) → GEMM 1 into
  // bf16 hidden rows → bias and GELU (erf; the fused kernels' fast erf unless VV_CUDA_FFN_FAST_ERF=0) in
  // place, rounded to bf16 → GEMM 2 with its bias into v (f32) → x += gamma ⊙ v. The hidden rows are rounded
  // to bf16 before and after the GELU, as in the PyTorch reference's bf16 run (the fused kernel rounds only
  // after it; here the bias is added after the first rounding). cuBLASLt's own GELU epilogue is the tanh
  // form, and its bias for a bf16 output is bf16, so bias and GELU are their own pass. Nor does it take the
  // layer scale: with alpha a device vector (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST, gamma; beta
  // 1 into x; bias gamma ⊙ b2) its heuristic had no bf16 algorithm on an H100 at any of the FFN's shapes
  // (session 39; the form was removed, code at c0d7453), so x += gamma ⊙ v is its own pass too.
  static constexpr int64_t kFfnLtMin = 256;
  bool ffn_lt_takes(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                    const Tensor& u, const Tensor& v, const Tensor& h) {
    if (compute_ != CudaCompute::kBF16 || !lt_api_ || deterministic_ || !ffn_lt_) return false;
    const int64_t T = x.rows(), C = x.cols(), E = w1.rows();
    if (T == 0 || C < ffn_lt_min_ || C % 8 != 0 || E % 8 != 0 || x.dtype != DType::kF32 || x.ndim != 2)
      return false;
    if (w1.dtype != DType::kBF16 || w2.dtype != DType::kBF16 || w1.cols() != C || w1.row_stride() != C ||
        w2.rows() != C || w2.cols() != E || w2.row_stride() != E || b1.data == nullptr ||
        b2.data == nullptr || b1.dtype != DType::kF32 || b2.dtype != DType::kF32)
      return false;
    if (u.dtype != DType::kF32 || u.rows() < T || u.cols() != C || v.dtype != DType::kF32 || v.rows() < T ||
        v.cols() != C || h.dtype != DType::kF32 || h.cols() != E || h.row_stride() != E || h.rows() < 1 ||
        reinterpret_cast<uintptr_t>(h.data) % 16 != 0)
      return false;
    if (overlap_rows(u, x) || overlap_rows(v, x) || overlap_rows(h, x) || overlap_rows(u, v)) return false;
    const int64_t tile = std::min(T, 2 * h.rows()), last = T % tile;
    for (const int64_t n : {tile, last}) {
      if (n == 0) continue;
      if (!plan_for(n, E, C, E, DType::kBF16, false, static_cast<int>(Epilogue::kNone), true) ||
          !plan_for(n, C, E, v.row_stride(), DType::kBF16, true, static_cast<int>(Epilogue::kNone))) {
        if (!std::exchange(ffn_lt_warned_, true))
          std::fprintf(stderr, "vibevoice: no cuBLASLt algorithm for the FFN at %lld rows, C=%lld, E=%lld\n",
                       static_cast<long long>(n), static_cast<long long>(C), static_cast<long long>(E));
        return false;
      }
    }
    return true;
  }
  void conv_ffn_lt(Tensor& x, const Tensor& norm_w, float eps, const Tensor& w1, const Tensor& b1,
                   const Tensor& w2, const Tensor& b2, const Tensor& gamma, Tensor& u, Tensor& v, Tensor& h) {
    Sig s(104);
    s << x << norm_w << eps << w1 << b1 << w2 << b2 << gamma << u << v << h;
    defer(s, [=, this] {
      const int64_t T = x.rows(), C = x.cols(), E = w1.rows(), tile = std::min(T, 2 * h.rows());
      const std::string label = "conv_ffn.lt.c" + std::to_string(C);
      OpTimer timer(this, label.c_str());
      if (!ensure_pack(static_cast<size_t>(tile * C) * 2)) return;
      const float alpha = 1.0f, beta = 0.0f;
      const float* bias1 = b1.ptr<const float>();
      const float* bias2 = b2.ptr<const float>();
      for (int64_t r0 = 0; r0 < T; r0 += tile) {
        const int64_t n = std::min(tile, T - r0);
        Tensor xt = x.row_slice(r0, n), ut = u.row_slice(r0, n), vt = v.row_slice(r0, n);
        cuda::rms_norm_pack(xt, norm_w, eps, ut, pack_, DType::kBF16, stream_, /*write_out=*/false);
        Plan* p1 = plan_for(n, E, C, E, DType::kBF16, false, static_cast<int>(Epilogue::kNone), true);
        Plan* p2 = plan_for(n, C, E, vt.row_stride(), DType::kBF16, true, static_cast<int>(Epilogue::kNone));
        if (!p1 || !p2) return;  // planned before recording (ffn_lt_takes)
        lt_check(lt_api_->matmul(lt_, p1->desc, &alpha, w1.data, p1->wl, pack_, p1->al, &beta, h.data, p1->dl,
                                 h.data, p1->dl, &p1->algo, lt_ws_, lt_ws_bytes_, stream_));
        cuda::gelu_bias_bf16_inplace(h.data, bias1, n, E, cuda::ffn_fast_erf(deterministic_), stream_);
        lt_api_->desc_set_attribute(p2->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias2, sizeof(bias2));
        lt_check(lt_api_->matmul(lt_, p2->desc, &alpha, w2.data, p2->wl, h.data, p2->al, &beta, vt.data,
                                 p2->dl, vt.data, p2->dl, &p2->algo, lt_ws_, lt_ws_bytes_, stream_));
        cuda::add_scaled(xt, gamma, vt, stream_);
      }
      launched("conv_ffn");
    });
  }
  void conv_mixer(Tensor& x, const Tensor& norm_w, float eps, const Tensor& history, const Tensor& w,
                  const Tensor& bias, const Tensor& gamma, Tensor& u, Tensor& v) override {
    if (cuda::conv_mixer_fits(x, norm_w, history, w, bias, gamma, u, v)) {
      Sig s(103);
      s << x << norm_w << eps << history << w << bias << gamma << u << v;
      defer(s, [=, this] {
        Tensor xx = x, uu = u, vv = v;
        const std::string label = std::string("conv_mixer.fused.c") + std::to_string(x.cols());
        OpTimer timer(this, label.c_str());
        cuda::conv_mixer_fused(xx, norm_w, eps, history, w, bias, gamma, uu, vv, stream_);
        launched("conv_mixer");
      });
      return;
    }
    if (!cuda::dwconv_add_fits(x, u, history, w, bias, gamma)) {
      Backend::conv_mixer(x, norm_w, eps, history, w, bias, gamma, u, v);
      return;
    }
    rms_norm(x, norm_w, eps, u);
    Sig s(102);
    s << x << u << history << w << bias << gamma;
    defer(s, [=, this] {
      Tensor xx = x;
      OpTimer timer(this, "conv_mixer.dwconv_add");
      cuda::dwconv_add(xx, u, history, w, bias, gamma, stream_);
      launched("conv_mixer");
    });
  }
  // A whole encoder block in one kernel (cuda::conv_block_fused) unless VV_CUDA_ENC_BLOCK=0, bf16 mode,
  // C ∈ {32, 64} (stages 0 and 1), or C = 128 (stage 2) with the wgmma FFN (sm_90, not VV_CUDA_FFN_WG=0),
  // and the operands both fused branches take; elsewhere false (the encoder then runs conv_mixer and
  // conv_ffn). Same bits as those two.
  bool conv_block(Tensor& x, float eps, const Tensor& history, const ConvBlockWeights& wt, Tensor& u,
                  Tensor& v, Tensor& h) override {
    // conv_ffn would take cuBLASLt at these widths only below the default VV_CUDA_FFN_LT_MIN; at 128
    // channels the wgmma FFN comes first there too.
    if (!enc_block_ || compute_ != CudaCompute::kBF16 ||
        !cuda::conv_block_fits(x, history, wt, u, v, ffn_wg_) ||
        (x.cols() != 128 && ffn_lt_takes(x, wt.w1, wt.b1, wt.w2, wt.b2, u, v, h)))
      return false;
    Sig s(105);
    s << x << eps << history << wt.norm_w << wt.mixer_w << wt.mixer_b << wt.gamma << wt.ffn_norm_w << wt.w1
      << wt.b1 << wt.w2 << wt.b2 << wt.ffn_gamma << u << v;
    defer(s, [=, this] {
      Tensor xx = x, uu = u, vv = v;
      const std::string label = "conv_block.fused.c" + std::to_string(x.cols());
      OpTimer timer(this, label.c_str());
      cuda::conv_block_fused(xx, eps, history, wt, uu, vv, deterministic_, stream_);
      launched("conv_block");
    });
    return true;
  }
  void discard(const Tensor& t) override {
    // Read by fuse_mlp_at and fuse_lt_operand_at (a norm output no one reads skips its f32 write);
    // at one row only the one right after an attention is recorded (the GEMV path fuses without the
    // others): fuse_rope_attn_at needs to know that q is not read again (one-row decode steps too).
    const bool after_attention =
        rope_attn_ && !pending_rec_.empty() && pending_rec_.back().kind == OpRec::kAttention;
    if (!after_attention && ((!mlp_fuse_ && !lt_fuse_) || t.rows() < 2)) return;
    Sig s(13);
    s << t;
    OpRec rec;
    rec.kind = OpRec::kDiscard;
    rec.out = t;
    defer(
        s, [] {}, &rec);  // launches nothing; the fusions read it
  }
  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    Sig s(6);
    s << gate_up << out;
    OpRec rec;
    rec.kind = OpRec::kSiluMul;
    rec.a = gate_up, rec.out = out;
    defer(
        s,
        [=, this] {
          Tensor o = out;
          run_silu_mul(gate_up, o);
        },
        &rec);
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    Sig s(7);
    s << table << ids << out;
    defer(s, [=, this] {
      Tensor o = out;
      run_embedding(table, ids, o);
    });
  }
  void copy(const Tensor& src, Tensor& dst) override {
    Sig s(8);
    s << src << dst;
    defer(s, [=, this] {
      Tensor d = dst;
      run_copy(src, d);
    });
  }
  void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) override {
    Sig s(9);
    s << x << pos << heads << head_dim << theta;
    OpRec rec;
    rec.kind = OpRec::kRope;
    rec.out = x, rec.a = pos, rec.heads = heads, rec.head_dim = head_dim, rec.f = theta;
    defer(
        s,
        [=, this] {
          Tensor xx = x;
          run_rope(xx, pos, heads, head_dim, theta);
        },
        &rec);
  }
  void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                const AttentionShape& shape) override {
    Sig s(10);
    s << k << v << rows << cache.k << cache.v << shape;
    OpRec rec;
    rec.kind = OpRec::kKvWrite;
    rec.a = k, rec.w = v, rec.rows = rows, rec.cache = cache, rec.shape = shape;
    defer(
        s,
        [=, this] {
          KvLayer c = cache;
          run_kv_write(k, v, rows, c, shape);
        },
        &rec);
  }
  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out) override {
    Sig s(11);
    s << q << rows << cache.k << cache.v << shape << out;
    OpRec rec;
    rec.kind = OpRec::kAttention;
    rec.a = q, rec.out = out, rec.rows = rows, rec.cache = cache, rec.shape = shape;
    defer(
        s,
        [=, this] {
          Tensor o = out;
          run_paged_attention(q, rows, cache, shape, o);
        },
        &rec);
  }
  void argmax(const Tensor& logits, Tensor& out) override {
    Sig s(12);
    s << logits << out;
    defer(s, [=, this] {
      Tensor o = out;
      run_argmax(logits, o);
    });
  }
  void argmax_logprob(const Tensor& logits, Tensor& ids, Tensor& logprob) override {
    Sig s(14);
    s << logits << ids << logprob;
    defer(s, [=, this] {
      Tensor o = ids;
      run_argmax(logits, o, static_cast<float*>(logprob.data));
    });
  }

  // Decode-step fusions (decode_ops.cuh) over runs of recorded ops, each result equal bit for bit to
  // the unfused ops (eager launches, VV_CUDA_GRAPHS=0, run them one by one):
  //  - rms_norm of one row followed by one-row GEMMs reading its output (q, k, v; gate_up): one
  //    GEMV with the norm in its prologue (it still writes the norm's output);
  //  - one-row GEMMs sharing their input row (up to kMaxDecodeJobs): one GEMV launch;
  //  - a one-row gate_up GEMM followed by silu_mul of its output: the GEMV's SwiGLU epilogue;
  //  - rope(q), rope(k), kv_write(k, v) at the same positions: one kernel (unless VV_CUDA_ROPE_FLASH=0, a
  //    wgmma flash form, then paged_attention(q) and discard(q): k's rope alone, q's in the flash
  //    kernel; fuse_rope_flash_at).
  // And, for any row count in bf16 mode (fuse_mlp_at, fuse_lt_operand_at): the MLP block through bf16
  // intermediates (within bf16 rounding of the unfused ops), and norms / SwiGLU writing their GEMMs'
  // bf16 operand (the same bits).
  void fuse_decode(std::vector<std::function<void()>>& ops, const std::vector<OpRec>& recs) {
    std::vector<std::function<void()>> out;
    out.reserve(ops.size());
    for (size_t i = 0; i < ops.size();) {
      size_t used = fuse_chain_at(recs, i, out);
      if (!used) used = fuse_gemv_at(recs, i, out);
      if (!used) used = fuse_rope_flash_at(recs, i, out);
      if (!used) used = fuse_rope_attn_at(recs, i, out);
      if (!used) used = fuse_rope_kv_at(recs, i, out);
      if (!used && lt_fuse_ && attn_pack_) used = fuse_attn_operand_at(recs, i, out);
      if (!used && lt_fuse_ && mlp_fuse_) used = fuse_mlp_at(recs, i, out);
      if (!used && lt_fuse_) used = fuse_lt_operand_at(recs, i, out);
      if (used) {
        i += used;
        continue;
      }
      prefetch_before_attention(recs, i, out);
      out.push_back(std::move(ops[i]));
      ++i;
    }
    ops.swap(out);
  }

  // VV_CUDA_DECODE_CHAIN=1: from recs[i], the longest run of one-row GEMV launches the bulk kernel takes
  // (parse_gemv_at without the SwiGLU epilogue, parse_swiglu_gemv_at), of one weight dtype, up to
  // kMaxChainPhases phases, then rope(q), rope(k), kv_write if they follow (and the flash kernel
  // does not take them): one cuda::decode_chain launch where that covers at least two launches. Each
  // phase reads what the ones before wrote only after the grid barrier between them, so the fusion
  // checks within a phase are those of its lone launch.
  size_t fuse_chain_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    if (!chain_ || deterministic_ || !decode_gemv_ || stream_one_row() || !chain_bar_) return 0;
    cuda::DecodeChain c;
    c.sms = sms_;
    c.smem_max = smem_optin_;
    c.barrier = chain_bar_;
    c.trace = chain_trace_;
    size_t j = i;
    cuda::DecodeAttentionPlan ap;
    if (chain_attn_ && recs[i].kind == OpRec::kAttention && chain_attention_ok(recs[i], &ap)) {
      const OpRec& at = recs[i];
      Tensor o = at.out;
      c.at = cuda::decode_attn_args(at.a, at.rows, at.cache, at.shape, o, ap, nullptr, nullptr, attn_lean_);
      c.attn = true;
      ++j;
      while (j < recs.size() && recs[j].kind == OpRec::kDiscard) ++j;  // discard(q) launches nothing
    }
    while (c.phases < cuda::kMaxChainPhases && j < recs.size()) {
      cuda::DecodeGemv d;
      size_t used =
          recs[j].kind == OpRec::kSiluMul ? parse_swiglu_gemv_at(recs, j, d) : parse_gemv_at(recs, j, d);
      if (!used) break;
      d.bulk = true;
      d.sms = sms_;
      // gate_up then silu_mul: the SwiGLU epilogue (gate and up rows paired in a tile; each row's sum is
      // the lone bulk GEMV's), so that the down phase reads silu_mul's output, not both halves.
      if (recs[j].kind != OpRec::kSiluMul) {
        cuda::DecodeGemv paired = d;
        if (take_swiglu_epilogue(recs, j + used, recs[d.norm_w ? j + 1 : j], paired) &&
            cuda::decode_gemv_bulk_takes(paired)) {
          d = paired;
          ++used;
        }
      }
      if (!cuda::decode_gemv_bulk_takes(d) || (c.phases > 0 && d.wt != c.ph[0].wt)) break;
      c.ph[c.phases++] = d;
      j += used;
    }
    if (c.phases == 0) return 0;
    OpRec rq;
    if (rope_kv_fusable(recs, j)) {
      const bool flash = rope_flash_ && j + 3 < recs.size() && recs[j + 3].kind == OpRec::kAttention &&
                         flash_prefill_takes(recs[j + 3].a, recs[j + 3].cache, recs[j + 3].shape);
      if (!flash) {
        rq = recs[j];
        Tensor qq = recs[j].out, kk = recs[j + 1].out;
        KvLayer kv = recs[j + 2].cache;
        c.r = cuda::rope_kv_args(qq, kk, recs[j + 2].w, rq.a, rq.heads, nullptr, recs[j + 2].rows, kv,
                                 recs[j + 2].shape);
        c.rope = true;
      }
    }
    if (!cuda::decode_chain_takes(c)) return 0;
    const size_t used = j - i + (c.rope ? 3 : 0);
    const float theta = rq.f;
    const int D = rq.head_dim;
    const size_t ws_floats = ap.ws_floats;
    out.push_back([=, this] {
      cuda::DecodeChain cc = c;
      if (cc.rope) cc.r.inv_freq = inv_freq(theta, D);
      if (cc.attn && !decode_attention_ws(ws_floats, &cc.at.counters, &cc.at.ws)) return;
      OpTimer timer(this, cc.attn ? "decode_chain.attn" : "decode_chain");
      cuda::decode_chain(cc, stream_);
      launched("decode_chain");
    });
    return used;
  }

  // VV_CUDA_CHAIN_ATTN=1: whether the chain can start with this attention record: one row on the SIMT
  // decode kernel (not the flash or mma kernels) over a 16-bit cache; its plan in *p.
  bool chain_attention_ok(const OpRec& at, cuda::DecodeAttentionPlan* p) const {
    const Tensor& q = at.a;
    if (q.rows() != 1 || at.out.rows() != 1 || !decode_rows_fit(q, at.rows, at.cache) ||
        (at.cache.k.dtype != DType::kBF16 && at.cache.k.dtype != DType::kF16))
      return false;
    if (flash_prefill_takes(q, at.cache, at.shape) || decode_mma_takes(q, at.cache, at.shape)) return false;
    *p = cuda::plan_decode_attention(1, at.rows, at.shape, sms_, attn_wave_, smem_optin_);
    return p->use && p->counters <= kDecAttnCounterSlots;
  }

  static bool row_vector(const Tensor& t) {
    return t.dtype == DType::kF32 && t.rows() == 1 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  }
  // Whether the F32 rows [p, p + n) and [q, q + m) share an element.
  static bool overlap(const void* p, int64_t n, const void* q, int64_t m) {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
    return a < b + static_cast<uintptr_t>(m) * 4 && b < a + static_cast<uintptr_t>(n) * 4;
  }

  // VV_CUDA_DECODE_GEMV=0: the skinny GEMV of cuda_ops for one-row GEMMs, q/k/v sharing their input
  // row as one gemv_multi launch, no norm or SwiGLU fusion (the path before decode_ops, for A/B).
  size_t fuse_skinny_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    auto fusable = [&](size_t k) {
      if (k >= recs.size() || recs[k].kind != OpRec::kGemm) return false;
      const OpRec& g = recs[k];
      return g.out.rows() == 1 && g.a.rows() == 1 && g.a.dtype == DType::kF32 && g.out.data != g.a.data &&
             g.ep != Epilogue::kGelu;
    };
    if (!fusable(i)) return 0;
    size_t j = i;
    while (j + 1 < recs.size() && j + 1 - i < static_cast<size_t>(cuda::kMaxGemvJobs) && fusable(j + 1) &&
           recs[j + 1].a.data == recs[i].a.data && recs[j + 1].a.cols() == recs[i].a.cols() &&
           recs[j + 1].w.dtype == recs[i].w.dtype)
      ++j;
    if (j == i) return 0;
    cuda::GemvJobs jobs;
    for (size_t t = i; t <= j; ++t) {
      const OpRec& g = recs[t];
      cuda::GemvJob& J = jobs.j[jobs.count++];
      J.w = g.w.data;
      J.bias = g.hb ? g.b.ptr<const float>() : nullptr;
      J.out = g.out.ptr<float>();
      J.ldw = g.w.row_stride();
      J.N = g.out.cols();
      J.ep = static_cast<int>(g.ep);
    }
    const Tensor a = recs[i].a;
    const DType wt = recs[i].w.dtype;
    out.push_back([=, this] {
      OpTimer timer(this, "gemm.skinny_fused");
      cuda::gemv_multi(a, wt, jobs, stream_);
      launched("gemm");
    });
    return j - i + 1;
  }

  // A recorded one-row GEMM as a decode_gemv job.
  static cuda::DecodeGemvJob decode_job(const OpRec& g) {
    cuda::DecodeGemvJob J;
    J.w = g.w.data;
    J.ldw = g.w.row_stride();
    J.N = g.out.cols();
    J.bias = g.hb ? g.b.ptr<const float>() : nullptr;
    J.out = g.out.ptr<float>();
    J.ep = static_cast<int>(g.ep);
    return J;
  }
  // The one-row GEMV launch that starts at recs[i]: an rms_norm of one row followed by GEMMs reading its
  // output (the norm prologue), or one-row GEMMs sharing their input row, up to kMaxDecodeJobs of them
  // (a lone GEMM too). Its operands in d (the SwiGLU epilogue not taken); the records it covers (0:
  // none).
  size_t parse_gemv_at(const std::vector<OpRec>& recs, size_t i, cuda::DecodeGemv& d) const {
    size_t p = i;
    const OpRec* norm = nullptr;
    if (recs[p].kind == OpRec::kRmsNorm) {
      const OpRec& r = recs[p];
      if (!row_vector(r.a) || !row_vector(r.out) || r.w.dtype != DType::kF32 || r.out.data == r.a.data ||
          r.a.cols() % 8 != 0 || reinterpret_cast<uintptr_t>(r.w.data) % 16 != 0)
        return 0;
      norm = &r;
      ++p;
    }
    const void* x = norm ? norm->a.data : nullptr;
    size_t q = p;  // the next record to look at
    auto gemm_ok = [&](size_t at, const OpRec* first) {
      if (at >= recs.size() || recs[at].kind != OpRec::kGemm) return false;
      const OpRec& g = recs[at];
      if (g.out.rows() != 1 || g.ep == Epilogue::kGelu || !cuda::decode_gemv_fits(g.a, g.w)) return false;
      // Outputs may not overlap what the launch reads (x, a) or the other outputs it writes.
      const int64_t K = g.a.cols(), N = g.out.cols();
      if (overlap(g.out.data, N, g.a.data, K) || (norm && overlap(g.out.data, N, x, K)) ||
          (norm && overlap(g.out.data, N, norm->out.data, K)))
        return false;
      for (size_t e = p; e < q; ++e)
        if (overlap(g.out.data, N, recs[e].out.data, recs[e].out.cols())) return false;
      if (first)
        return g.a.data == first->a.data && g.a.cols() == first->a.cols() && g.w.dtype == first->w.dtype;
      return !norm || (g.a.data == norm->out.data && g.a.cols() == norm->out.cols());
    };
    if (!gemm_ok(p, nullptr)) return 0;
    const OpRec& g0 = recs[p];
    d = cuda::DecodeGemv{};
    d.x = norm ? norm->a.ptr<const float>() : g0.a.ptr<const float>();
    d.K = g0.a.cols();
    d.wt = g0.w.dtype;
    d.sms = sms_;
    d.balance = gemv_balance_;
    d.pair_rows = gemv_pair_;
    if (norm) {
      d.norm_w = norm->w.ptr<const float>();
      d.eps = norm->f;
      d.norm_out = norm->out.ptr<float>();
    }
    while (d.count < cuda::kMaxDecodeJobs && (q == p || gemm_ok(q, &g0)))
      d.j[d.count++] = decode_job(recs[q++]);
    return q - i;
  }
  size_t fuse_gemv_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    if (deterministic_) return 0;  // one-row GEMMs stay on the M-independent path
    if (!decode_gemv_) return fuse_skinny_at(recs, i, out);
    if (recs[i].kind == OpRec::kSiluMul) return fuse_swiglu_gemv_at(recs, i, out);
    cuda::DecodeGemv d;
    size_t q = i + parse_gemv_at(recs, i, d);
    if (q == i) return 0;
    const bool norm = d.norm_w != nullptr;
    // gate_up then silu_mul over its output: the SwiGLU epilogue. Not with VV_CUDA_GEMV_BULK=3 where
    // the bulk kernel takes the launch: gate_up streams alone (its rows' bits those of the lone bulk
    // GEMV, as in an unfused step) and silu_mul stays an op of its own.
    bool pair_ok = true;
    if (gemv_bulk_ == 3) {
      cuda::DecodeGemv lone = d;
      lone.bulk = true;
      pair_ok = !cuda::decode_gemv_bulk_takes(lone);
    }
    if (swiglu_epilogue_ && pair_ok && take_swiglu_epilogue(recs, q, recs[norm ? i + 1 : i], d)) ++q;
    if (!norm && d.count == 1 && !d.silu_out) return 0;  // a lone GEMM: run_gemm takes the same kernel
    // A norm and one GEMM of its output that no silu_mul reads next (the final norm and the LM head):
    // the norm prologue unless VV_CUDA_GEMV_NORM_LONE=0; at 4 (the default) on the 4-blocks-an-SM instance.
    if (norm && d.count == 1 && !d.silu_out && !(q < recs.size() && recs[q].kind == OpRec::kSiluMul)) {
      if (gemv_norm_lone_ == 0) return 0;
      if (gemv_norm_lone_ == 4) d.min_blocks = 4;
    }
    d.bulk = gemv_bulk_ == 1 || (gemv_bulk_ == 3 && !d.silu_out) || (gemv_bulk_ == 5 && bulk_big(d));
    out.push_back([=, this] {
      OpTimer timer(this, !profiling_                                 ? ""
                          : d.bulk && cuda::decode_gemv_bulk_takes(d) ? "decode_gemv.fused_bulk"
                          : d.pair_rows && cuda::decode_gemv_pairs(d)
                              ? (d.balance ? "decode_gemv.fused_paired_balanced" : "decode_gemv.fused_paired")
                              : "decode_gemv.fused");
      cuda::decode_gemv(d, stream_);
      launched("decode_gemv");
    });
    return q - i;
  }

  // Whether recs[q] is a silu_mul over the output of d's one GEMM g0 (gate_up, no residual) that the GEMV's
  // SwiGLU epilogue can write (d.silu_out set then).
  bool take_swiglu_epilogue(const std::vector<OpRec>& recs, size_t q, const OpRec& g0,
                            cuda::DecodeGemv& d) const {
    if (d.count != 1 || q >= recs.size() || recs[q].kind != OpRec::kSiluMul) return false;
    const OpRec& m = recs[q];
    const int64_t I = m.out.cols(), K = g0.a.cols();
    const bool norm = d.norm_w != nullptr;
    if (m.a.data == g0.out.data && m.a.rows() == 1 && m.a.cols() == g0.out.cols() && m.out.rows() == 1 &&
        2 * I == m.a.cols() && g0.ep == Epilogue::kNone && m.out.dtype == DType::kF32 &&
        !overlap(m.out.data, I, m.a.data, 2 * I) && !overlap(m.out.data, I, g0.a.data, K) &&
        !(norm && (overlap(m.out.data, I, d.x, K) || overlap(m.out.data, I, d.norm_out, K)))) {
      d.silu_out = m.out.ptr<float>();
      return true;
    }
    return false;
  }

  // VV_CUDA_GEMV_BULK=3: silu_mul of one row (gate_up's output, unpaired there) then a one-row GEMM
  // reading its output (down, with its residual): the bulk GEMV with the SwiGLU prologue, which
  // computes silu_mul's values as it loads its activation and still writes the op's output (the same
  // bits as the two ops, the GEMM alone on the bulk kernel).
  size_t fuse_swiglu_gemv_at(const std::vector<OpRec>& recs, size_t i,
                             std::vector<std::function<void()>>& out) {
    cuda::DecodeGemv d;
    if (gemv_bulk_ != 3 || !parse_swiglu_gemv_at(recs, i, d)) return 0;
    out.push_back([=, this] {
      OpTimer timer(this, "decode_gemv.silu_bulk");
      cuda::decode_gemv(d, stream_);
      launched("decode_gemv");
    });
    return 2;
  }
  // silu_mul of one row then a one-row GEMM reading its output, as the bulk GEMV with the SwiGLU prologue
  // (d; the caller checks that the bulk kernel takes it): 2 records, or 0.
  size_t parse_swiglu_gemv_at(const std::vector<OpRec>& recs, size_t i, cuda::DecodeGemv& d) const {
    if (recs[i].kind != OpRec::kSiluMul || i + 1 >= recs.size() || recs[i + 1].kind != OpRec::kGemm) return 0;
    const OpRec& m = recs[i];
    const OpRec& g = recs[i + 1];
    const int64_t I = m.out.cols();
    if (!row_vector(m.a) || !row_vector(m.out) || m.a.cols() != 2 * I ||
        overlap(m.out.data, I, m.a.data, 2 * I))
      return 0;
    if (g.a.data != m.out.data || g.a.cols() != I || g.a.rows() != 1 || g.out.rows() != 1 ||
        g.ep == Epilogue::kGelu || !cuda::decode_gemv_fits(g.a, g.w))
      return 0;
    const int64_t N = g.out.cols();
    if (overlap(g.out.data, N, m.a.data, 2 * I) || overlap(g.out.data, N, m.out.data, I)) return 0;
    d = cuda::DecodeGemv{};
    d.x = m.out.ptr<const float>();
    d.K = I;
    d.wt = g.w.dtype;
    d.sms = sms_;
    d.bulk = true;
    d.swiglu_in = m.a.ptr<const float>();
    d.swiglu_act = m.out.ptr<float>();
    d.count = 1;
    d.j[0] = decode_job(g);
    return cuda::decode_gemv_bulk_takes(d) ? 2 : 0;  // the prologue exists on the bulk kernel only
  }

  // Unless VV_CUDA_MLP_FUSE=0: bf16 mode, M ≥ mlp_fuse_rows_ (2 unless
  // VV_CUDA_MLP_FUSE_ROWS says otherwise): the MLP block rms_norm(x → a) → gate_up(a → gu) →
  // silu_mul(gu → m) → down(m → x += ...) followed by discard(gu) and discard(m) runs as:
  // rms_norm_pack (a written, its bf16 pack), gate_up by cuBLASLt with a bf16 output into gu's memory (half
  // the bytes written and read back), SwiGLU from those bf16 values straight into the down GEMM's bf16
  // operand (m never written), and down from that operand. gu is rounded to bf16 before SwiGLU, as the
  // PyTorch reference's bf16 run does; the result differs from the unfused ops within bf16 rounding (gpu test
  // CudaMlpFusion). With VV_CUDA_STREAM_GEMM_KIND=ws taking gate_up, its SwiGLU form replaces the
  // cuBLASLt gate_up and the SwiGLU launch (below).
  size_t fuse_mlp_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    if (compute_ != CudaCompute::kBF16 || !lt_api_ || deterministic_ || i + 5 >= recs.size()) return 0;
    const OpRec &nr = recs[i], &g1 = recs[i + 1], &sm = recs[i + 2], &g2 = recs[i + 3];
    const OpRec &d1 = recs[i + 4], &d2 = recs[i + 5];
    if (nr.kind != OpRec::kRmsNorm || g1.kind != OpRec::kGemm || sm.kind != OpRec::kSiluMul ||
        g2.kind != OpRec::kGemm || d1.kind != OpRec::kDiscard || d2.kind != OpRec::kDiscard)
      return 0;
    const Tensor &x = nr.a, &a = nr.out, &gu = g1.out, &m = sm.out;
    const int64_t M = a.rows(), K = a.cols(), I = m.cols();
    const bool dropped = (d1.out.data == gu.data && d2.out.data == m.data) ||
                         (d1.out.data == m.data && d2.out.data == gu.data);
    if (!dropped || M < mlp_fuse_rows_ || x.dtype != DType::kF32 || a.dtype != DType::kF32 || a.ndim != 2 ||
        x.rows() != M || x.cols() != K)
      return 0;
    // gate_up reads a, writes gu [M, 2I] (contiguous f32: its memory holds the bf16 rows); silu_mul
    // reads gu, writes m [M, I]; down reads m and adds into x; bf16 weights, no bias.
    if (g1.a.data != a.data || g1.a.rows() != M || g1.a.cols() != K || g1.a.row_stride() != a.row_stride() ||
        g1.w.dtype != DType::kBF16 || g1.hb || g1.ep != Epilogue::kNone || gu.dtype != DType::kF32 ||
        gu.rows() != M || gu.cols() != 2 * I || gu.row_stride() != 2 * I || g1.w.rows() != 2 * I)
      return 0;
    if (sm.a.data != gu.data || sm.a.rows() != M || sm.a.cols() != 2 * I || sm.a.row_stride() != 2 * I ||
        m.dtype != DType::kF32 || m.rows() != M)
      return 0;
    if (g2.a.data != m.data || g2.a.rows() != M || g2.a.cols() != I || g2.a.row_stride() != m.row_stride() ||
        g2.w.dtype != DType::kBF16 || g2.hb || g2.ep != Epilogue::kAddResidual || g2.out.data != x.data ||
        g2.out.rows() != M || g2.out.cols() != K || g2.out.row_stride() != x.row_stride() ||
        g2.out.dtype != DType::kF32)
      return 0;
    if (overlap_rows(gu, x) || overlap_rows(gu, a) || overlap_rows(m, x) || overlap_rows(m, a) ||
        overlap_rows(gu, m))
      return 0;
    // With the warp-specialised stream GEMM taking gate_up (VV_CUDA_STREAM_GEMM_KIND=ws): gate_up and
    // SwiGLU in one launch of it (stream_gemm_swiglu), its bf16 output after the norm's pack, and down
    // from there (on the stream GEMM too if it takes down). gu is never written.
    const bool swiglu =
        stream_kind_ == cuda::StreamGemmKind::kWarpSpec && stream_ws_ && stream_takes(g1.a, g1.w, gu, g1.ep);
    const bool down_stream = swiglu && stream_takes(g2.a, g2.w, g2.out, g2.ep);
    // Otherwise both GEMMs on cuBLASLt (the fallbacks would read gu and m in f32); gate_up's plan is
    // also the SwiGLU form's fallback (a shape its scratch cannot hold).
    if (skinny_takes(g2.a, g2.w, g2.out, g2.ep) ||
        (!down_stream && stream_takes(g2.a, g2.w, g2.out, g2.ep)) ||
        !plan_for(M, 2 * I, K, 2 * I, DType::kBF16, false, static_cast<int>(Epilogue::kNone), true) ||
        (!down_stream &&
         !plan_for(M, K, I, x.row_stride(), DType::kBF16, false, static_cast<int>(Epilogue::kAddResidual))))
      return 0;
    // discard(a) right after: a's f32 rows are never written (gate_up reads the pack).
    const bool drop = i + 6 < recs.size() && discards(recs[i + 6], a) && !overlap_rows(a, x);
    const OpRec norm = nr, up = g1, down = g2;
    out.push_back([=, this] {
      // The SwiGLU form's output sits after the norm's pack (256-byte aligned).
      const size_t act_off = swiglu ? (static_cast<size_t>(M * K) * 2 + 255) / 256 * 256 : 0;
      if (!ensure_pack(std::max(static_cast<size_t>(M * std::max(K, I)) * 2,
                                act_off + static_cast<size_t>(M * I) * 2)))
        return;
      {
        OpTimer timer(this, drop ? "rms_norm.pack_only" : "rms_norm.pack");
        Tensor o = norm.out;
        cuda::rms_norm_pack(norm.a, norm.w, norm.f, o, pack_, DType::kBF16, stream_, !drop);
        launched("rms_norm");
      }
      if (swiglu) {
        void* act = static_cast<char*>(pack_) + act_off;
        if (down_stream && stream_ws_mlp_) {  // VV_CUDA_STREAM_WS_MLP=1: both GEMMs in one launch
          OpTimer timer(this, "gemm.stream_ws_mlp");
          Tensor o = down.out;
          if (cuda::stream_gemm_mlp(pack_, M, K, up.w.data, up.w.row_stride(), I, act, down.w.data,
                                    down.w.row_stride(), o.ptr<float>(), o.row_stride(), sms_,
                                    stream_scratch(), stream_)) {
            launched("gemm");
            return;
          }
        }
        bool ran;
        {
          OpTimer timer(this, "gemm.stream_ws_swiglu");
          ran = cuda::stream_gemm_swiglu(pack_, M, K, up.w.data, up.w.row_stride(), I, act, I, sms_,
                                         stream_scratch(), stream_);
          if (ran) launched("gemm");
        }
        if (ran) {
          OpTimer timer(this, down_stream ? stream_label(true) : "gemm.cublaslt_packed");
          Tensor o = down.out;
          gemm_lt_packed(down.a, down.w, nullptr, o, down.ep, act);
          launched("gemm");
          return;
        }
      }
      {
        OpTimer timer(this, "gemm.cublaslt_bf16_out");
        Plan* p = plan_for(M, 2 * I, K, 2 * I, DType::kBF16, false, static_cast<int>(Epilogue::kNone), true);
        const float alpha = 1.0f, beta = 0.0f;
        if (!p->tuned && p->ncands > 1 && !capturing_)
          tune_plan(*p, up.w.data, M, 2 * I, K, 2 * I, alpha, beta);
        const cublasStatus_t st =
            lt_api_->matmul(lt_, p->desc, &alpha, up.w.data, p->wl, pack_, p->al, &beta, up.out.data, p->dl,
                            up.out.data, p->dl, &p->algo, lt_ws_, lt_ws_bytes_, stream_);
        lt_check(st);
        launched("gemm");
      }
      {
        OpTimer timer(this, "silu_mul.bf16_pack");
        cuda::silu_mul_bf16_pack(up.out.data, M, I, pack_, stream_);  // gate_up's rows are consumed first
        launched("silu_mul");
      }
      {
        OpTimer timer(this, "gemm.cublaslt_packed");
        Tensor o = down.out;
        gemm_lt_packed(down.a, down.w, nullptr, o, down.ep);
        launched("gemm");
      }
    });
    return drop ? 7 : 6;
  }

  // Whether rec is discard(t) of t's rows (same memory, at least t's rows and columns) and norm
  // outputs may be left unwritten (the default; VV_CUDA_NORM_DROP=0: never).
  static bool covers(const OpRec& rec, const Tensor& t) {
    return rec.kind == OpRec::kDiscard && rec.out.data == t.data && rec.out.rows() >= t.rows() &&
           rec.out.cols() >= t.cols() && rec.out.row_stride() == t.row_stride();
  }
  bool discards(const OpRec& rec, const Tensor& t) const { return norm_drop_ && covers(rec, t); }
  // Whether gemm_lt_packed runs g from the bf16 pack alone (the SIMT fallback, taken where cuBLASLt
  // has no algorithm, reads the f32 A).
  bool reads_pack_only(const OpRec& g) {
    Tensor o = g.out;
    if (skinny_takes(g.a, g.w, o, g.ep) || stream_takes(g.a, g.w, o, g.ep)) return true;
    return plan_for(o.rows(), o.cols(), g.a.cols(), o.row_stride(), g.w.dtype, g.hb,
                    static_cast<int>(g.ep)) != nullptr;
  }

  // bf16 mode, M ≥ 2 (unless VV_CUDA_LT_FUSE=0): an rms_norm or silu_mul whose output is the A
  // operand of the tensor-core GEMMs right after it (q/k/v, gate_up; down) writes that operand in bf16 itself
  // (rms_norm_pack / silu_mul_pack: the same bits pack_rows_half makes of its f32 output, which it
  // still writes unless a discard of it follows the GEMMs), and those GEMMs skip their own pack: one
  // pass over the rows instead of one per GEMM.
  size_t fuse_lt_operand_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    if (compute_ != CudaCompute::kBF16 || !lt_api_) return 0;
    const OpRec& p = recs[i];
    if (p.kind != OpRec::kRmsNorm && p.kind != OpRec::kSiluMul) return 0;
    const Tensor& y = p.out;  // the producer's output: the GEMMs' A
    const int64_t M = y.rows(), K = y.cols();
    if (M <= kSkinnyRowsBf16 || y.dtype != DType::kF32 || y.ndim != 2 || K == 0) return 0;
    if (p.kind == OpRec::kRmsNorm && (p.a.dtype != DType::kF32 || p.a.rows() != M || p.a.cols() != K)) return 0;
    if (p.kind == OpRec::kSiluMul && (p.a.dtype != DType::kF32 || p.a.rows() != M || p.a.cols() != 2 * K ||
                                      overlap_rows(y, p.a)))
      return 0;
    size_t j = i;
    std::vector<OpRec> gemms;
    if (recs.size() > i + 1 && recs[i + 1].kind == OpRec::kGemm)  // (no discard between here)
      gemms = gemms_reading(recs, i, y, /*bf16_only=*/false, &j);
    if (gemms.empty()) return 0;
    const DType wt = gemms.front().w.dtype;
    // A norm whose output is discarded right after its GEMMs, each of which reads only the pack:
    // its f32 output is never written (the discard is consumed with them).
    bool drop = false;
    if (p.kind == OpRec::kRmsNorm && j < recs.size() && discards(recs[j], y) && !overlap_rows(y, p.a)) {
      drop = true;
      for (const OpRec& g : gemms) drop = drop && reads_pack_only(g);
    }
    const OpRec prod = p;
    out.push_back([=, this] {
      const bool norm = prod.kind == OpRec::kRmsNorm;
      if (!ensure_pack(static_cast<size_t>(M * K) * 2)) return;
      {
        OpTimer timer(this, drop ? "rms_norm.pack_only" : norm ? "rms_norm.pack" : "silu_mul.pack");
        Tensor o = prod.out;
        if (norm) {
          cuda::rms_norm_pack(prod.a, prod.w, prod.f, o, pack_, wt, stream_, !drop);
        } else {
          cuda::silu_mul_pack(prod.a, o, pack_, wt, stream_);
        }
        launched(norm ? "rms_norm" : "silu_mul");
      }
      run_packed_gemms(gemms);
    });
    return j - i + (drop ? 1 : 0);
  }
  // The GEMMs of an operand fusion, each from the bf16 pack its producer wrote (gemm_lt_packed).
  void run_packed_gemms(const std::vector<OpRec>& gemms) {
    for (const OpRec& g : gemms) {
      Tensor o = g.out;
      // (the label is only read when profiling: skip the check otherwise)
      OpTimer timer(this, !profiling_                       ? ""
                          : skinny_takes(g.a, g.w, o, g.ep) ? "gemm.skinny_mma_packed"
                          : stream_takes(g.a, g.w, o, g.ep) ? stream_label(true)
                                                            : "gemm.cublaslt_packed");
      gemm_lt_packed(g.a, g.w, g.hb ? g.b.ptr<const float>() : nullptr, o, g.ep);
      launched("gemm");
    }
  }
  // The bf16 GEMMs right after record i (skipping discards of other tensors: the decoder's discard(q)
  // after its attention) whose A is y, all rows and columns of it, with bf16 weights (f16 too unless
  // bf16_only), none writing over y; [i + 1, *end) holds them (with the skipped discards).
  std::vector<OpRec> gemms_reading(const std::vector<OpRec>& recs, size_t i, const Tensor& y, bool bf16_only,
                                   size_t* end) const {
    std::vector<OpRec> gemms;
    size_t j = i + 1;
    DType wt = DType::kF32;
    while (j < recs.size()) {
      if (recs[j].kind == OpRec::kDiscard && gemms.empty() && !covers(recs[j], y)) {
        ++j;
        continue;
      }
      if (recs[j].kind != OpRec::kGemm) break;
      const OpRec& g = recs[j];
      const bool half_w = g.w.dtype == DType::kBF16 || (!bf16_only && g.w.dtype == DType::kF16);
      if (!half_w || (!gemms.empty() && g.w.dtype != wt) || g.a.data != y.data || g.a.rows() != y.rows() ||
          g.a.cols() != y.cols() || g.a.row_stride() != y.row_stride() || g.out.rows() != y.rows() ||
          overlap_rows(g.out, y))
        break;
      wt = g.w.dtype;
      gemms.push_back(g);
      ++j;
    }
    *end = j;
    return gemms;
  }

  // Unless VV_CUDA_ATTN_PACK=0 (the default since session 30): bf16 mode, a batched decode step's attention
  // on the tensor-core stream kernel whose output is the A operand of the bf16 GEMMs after it (the o
  // projection): the kernel also writes that operand in bf16 (the bits pack_rows4 makes of its f32
  // output, which it still writes), and the GEMMs skip their pack. Saves the pack_rows4 launch and its
  // pass over the rows (3 µs a layer at 64 rows on the H100, session 18's Nsight).
  size_t fuse_attn_operand_at(const std::vector<OpRec>& recs, size_t i,
                              std::vector<std::function<void()>>& out) {
    const OpRec& p = recs[i];
    if (p.kind != OpRec::kAttention) return 0;
    const int64_t M = p.out.rows(), K = p.out.cols();
    if (flash_prefill_takes(p.a, p.cache, p.shape) || !decode_mma_takes(p.a, p.cache, p.shape) ||
        !mma_cfg().stream || !decode_rows_fit(p.a, p.rows, p.cache))
      return 0;
    const cuda::MmaDecodePlan pm =
        cuda::plan_mma_decode_attention(M, p.rows, p.shape, deterministic_, mma_cfg_ptr());
    if (!pm.use || pm.counters > kDecAttnCounterSlots) return 0;
    size_t j = i;
    std::vector<OpRec> gemms = attn_operand_gemms(recs, i, &j);
    if (gemms.empty()) return 0;
    // run_gemm's other bf16 path for these GEMMs, conv_gemm, takes kConvGemmMinRows rows and more: never
    // a decode step's, so run_gemm and gemm_lt_packed give them the same plan (the same bits).
    static_assert(cuda::kDecodeAttentionMaxRows < kConvGemmMinRows, "a decode step's GEMM on conv_gemm");
    prefetch_before_attention(recs, i, out);  // (VV_CUDA_L2_PREFETCH: the o projection's weights)
    const OpRec at = p;
    out.push_back([=, this] {
      if (!ensure_pack(static_cast<size_t>(M * K) * 2)) return;
      Tensor o = at.out;
      if (run_decode_attention(at.a, at.rows, at.cache, at.shape, o, pack_)) return run_packed_gemms(gemms);
      run_paged_attention(at.a, at.rows, at.cache, at.shape, o);  // (not reached: the checks above)
      for (const OpRec& g : gemms) {
        Tensor go = g.out;
        run_gemm(g.a, g.w, g.hb ? &g.b : nullptr, go, g.ep);
      }
    });
    return j - i;
  }
  // VV_CUDA_ATTN_PACK (with VV_CUDA_LT_FUSE): the bf16 GEMMs after attention record i ([i + 1, *end))
  // that read all of its output, when the stream kernel may write their bf16 operand (bf16 mode, more
  // rows than the GEMV path takes, an f32 2-D output of heads·head_dim columns); none otherwise. Whether
  // the stream kernel takes the attention is the caller's check.
  std::vector<OpRec> attn_operand_gemms(const std::vector<OpRec>& recs, size_t i, size_t* end) const {
    *end = i + 1;
    const OpRec& p = recs[i];
    const Tensor& y = p.out;
    const int64_t M = y.rows(), K = y.cols();
    if (!lt_fuse_ || !attn_pack_ || compute_ != CudaCompute::kBF16 || !lt_api_ ||
        p.kind != OpRec::kAttention || M <= kSkinnyRowsBf16 || y.dtype != DType::kF32 || y.ndim != 2 ||
        p.a.rows() != M || K != int64_t{p.shape.heads} * p.shape.head_dim)
      return {};
    return gemms_reading(recs, i, y, /*bf16_only=*/true, end);
  }
  // Whether two F32 2-D views share an element (by address range).
  static bool overlap_rows(const Tensor& a, const Tensor& b) {
    const int64_t na = (a.rows() - 1) * a.row_stride() + a.cols(), nb = (b.rows() - 1) * b.row_stride() + b.cols();
    return overlap(a.data, na, b.data, nb);
  }

  // rope(q), rope(k), kv_write(k, v) at the same positions, each checked for one kernel.
  bool rope_kv_fusable(const std::vector<OpRec>& recs, size_t i) const {
    if (i + 2 >= recs.size() || recs[i].kind != OpRec::kRope || recs[i + 1].kind != OpRec::kRope ||
        recs[i + 2].kind != OpRec::kKvWrite)
      return false;
    const OpRec &rq = recs[i], &rk = recs[i + 1], &kw = recs[i + 2];
    const int D = rq.head_dim;
    const int64_t n = rq.out.rows();
    if (rk.head_dim != D || rk.f != rq.f || rk.a.data != rq.a.data || kw.shape.head_dim != D ||
        kw.shape.kv_heads != rk.heads || kw.a.data != rk.out.data || kw.rows.row_pos.data != rq.a.data ||
        rq.out.data == rk.out.data || rk.out.rows() != n || kw.w.rows() != n || rq.out.dtype != DType::kF32 ||
        rk.out.dtype != DType::kF32 || kw.w.dtype != DType::kF32 ||
        kw.a.row_stride() != rk.out.row_stride() || D % 2 != 0 || kw.w.data == rq.out.data ||
        kw.w.data == rk.out.data)
      return false;
    return true;
  }
  size_t fuse_rope_kv_at(const std::vector<OpRec>& recs, size_t i, std::vector<std::function<void()>>& out) {
    if (!rope_kv_fusable(recs, i)) return 0;
    const OpRec &rq = recs[i], &rk = recs[i + 1], &kw = recs[i + 2];
    const int D = rq.head_dim;
    const OpRec r = rq, k = rk, w = kw;
    out.push_back([=, this] {
      OpTimer timer(this, "rope_kv_write");
      Tensor qq = r.out, kk = k.out;
      KvLayer c = w.cache;
      cuda::rope_kv_write(qq, kk, w.w, r.a, r.heads, inv_freq(r.f, D), w.rows, c, w.shape, stream_);
      launched("rope_kv_write");
    });
    return 3;
  }

  // VV_CUDA_L2_PREFETCH=1|2 (opt-in until measured on a GPU; sm_90): a decode step's attention (any
  // kernel but the flash one) followed, past discards, by a GEMM of its output (the o projection) gets
  // a small kernel before it that prefetches that GEMM's weights into L2, so HBM streams them while
  // the latency-bound attention runs and the GEMM reads them from L2. 1: issued once the kernel
  // before has finished (rope_kv_write), 2: as soon as the prefetch kernel starts. Weights larger
  // than half the L2 are not prefetched. No result changes (cuda::l2_prefetch).
  void prefetch_before_attention(const std::vector<OpRec>& recs, size_t i,
                                 std::vector<std::function<void()>>& out) {
    if (l2_prefetch_ == 0 || recs[i].kind != OpRec::kAttention) return;
    const OpRec& at = recs[i];
    if (flash_prefill_takes(at.a, at.cache, at.shape)) return;
    size_t j = i + 1;
    while (j < recs.size() && recs[j].kind == OpRec::kDiscard) ++j;
    if (j >= recs.size() || recs[j].kind != OpRec::kGemm || recs[j].a.data != at.out.data) return;
    const Tensor& w = recs[j].w;
    const size_t bytes =
        static_cast<size_t>(w.rows()) * static_cast<size_t>(w.row_stride()) * dtype_size(w.dtype);
    if (bytes == 0 || bytes > l2_bytes_ / 2) return;
    const void* p = w.data;
    const bool after_wait = l2_prefetch_ == 1;
    out.push_back([=, this] {
      OpTimer timer(this, "l2_prefetch");
      cuda::l2_prefetch(p, bytes, after_wait, sms_, stream_);
      launched("l2_prefetch");
    });
  }

  // Unless VV_CUDA_ROPE_FLASH=0: rope(q), rope(k), kv_write(k, v), paged_attention(q) on the flash
  // kernel's wgmma forms, then discard(q): rope is applied to q as the flash kernel loads it (the
  // same bits), so rope_kv_write rotates k alone and q is neither rewritten nor read back (at 1,024
  // rows of the 7B, 14.7 MB written and 14.7 MB read less per layer). q is left as it was.
  size_t fuse_rope_flash_at(const std::vector<OpRec>& recs, size_t i,
                            std::vector<std::function<void()>>& out) {
    if (!rope_flash_ || !rope_feeds_attention(recs, i)) return 0;
    const OpRec &rq = recs[i], &rk = recs[i + 1], &kw = recs[i + 2], &at = recs[i + 3];
    const Tensor& q = rq.out;
    const AttentionShape& sh = at.shape;
    if (!flash_prefill_takes(q, at.cache, sh) ||
        !cuda::flash_form_ropes(cuda::flash_form_taken(flash_form_, sh.heads, sh.kv_heads),
                                at.cache.k.dtype == DType::kBF16))
      return 0;
    const OpRec r = rq, k = rk, w = kw, a = at;
    out.push_back([=, this] {
      const int D = r.head_dim;
      const float* freq = inv_freq(r.f, D);
      {
        OpTimer timer(this, "rope_kv_write.k");
        Tensor qq = r.out, kk = k.out;
        KvLayer c = w.cache;
        cuda::rope_kv_write(qq, kk, w.w, r.a, 0, freq, w.rows, c, w.shape, stream_);
        launched("rope_kv_write");
      }
      const cuda::FlashForm form = cuda::flash_form_taken(flash_form_, a.shape.heads, a.shape.kv_heads);
      OpTimer timer(this, flash_label(form));
      Tensor o = a.out;
      cuda::flash_prefill_attention(a.a, a.rows, a.cache, a.shape, o, stream_, sms_, form, freq);
      launched("paged_attention");
    });
    return 5;
  }

  // recs[i..i+4]: rope(q), rope(k), kv_write(k, v) (rope_kv_fusable), then paged_attention of that q over
  // that cache at those rows, then discard(q); the attention's output apart from q.
  bool rope_feeds_attention(const std::vector<OpRec>& recs, size_t i) const {
    if (i + 4 >= recs.size() || !rope_kv_fusable(recs, i)) return false;
    const OpRec &rq = recs[i], &kw = recs[i + 2], &at = recs[i + 3];
    if (at.kind != OpRec::kAttention || !covers(recs[i + 4], rq.out)) return false;
    const Tensor& q = rq.out;
    const AttentionShape& sh = at.shape;
    return at.a.data == q.data && at.a.rows() == q.rows() && at.a.cols() == q.cols() &&
           at.a.row_stride() == q.row_stride() && at.rows.row_pos.data == rq.a.data &&
           at.rows.row_seq.data == kw.rows.row_seq.data &&
           at.rows.block_tables.data == kw.rows.block_tables.data && at.cache.k.data == kw.cache.k.data &&
           at.cache.v.data == kw.cache.v.data && sh.heads == rq.heads && sh.head_dim == rq.head_dim &&
           sh.kv_heads == kw.shape.kv_heads && !overlap_rows(at.out, q);
  }

  // Unless VV_CUDA_ROPE_ATTN=0: rope(q), rope(k), kv_write(k, v), paged_attention(q),
  // discard(q) of a call with one row per sequence (AttentionRows::one_row_per_seq) that a decode attention
  // kernel takes (the tensor-core stream kernel, or the SIMT one: one-row steps, f32 mode): one launch
  // (cuda::DecodeRope), no rope_kv_write. The same bits as the ops: k rotated in place and the cache
  // written as rope_kv_write does, q rotated as the kernel loads it (q is left as it was, hence the
  // discard).
  size_t fuse_rope_attn_at(const std::vector<OpRec>& recs, size_t i,
                           std::vector<std::function<void()>>& out) {
    if (!rope_attn_ || !rope_feeds_attention(recs, i)) return 0;
    const OpRec &rq = recs[i], &rk = recs[i + 1], &kw = recs[i + 2], &at = recs[i + 3];
    const Tensor& q = rq.out;
    const AttentionShape& sh = at.shape;
    // VV_CUDA_FUSE_TRACE=1: why a candidate is not fused (stderr; a diagnostic).
    static const bool trace =
        std::getenv("VV_CUDA_FUSE_TRACE") && std::string(std::getenv("VV_CUDA_FUSE_TRACE")) == "1";
    auto no = [&](const char* why) -> size_t {
      if (trace)
        std::fprintf(stderr, "vibevoice: rope_attn not fused (%lld rows): %s\n",
                     static_cast<long long>(q.rows()), why);
      return 0;
    };
    if (!at.rows.one_row_per_seq) return no("no one-row promise");
    if (q.rows() != at.rows.block_tables.rows()) return no("rows != table rows");
    if (flash_prefill_takes(q, at.cache, sh)) return no("flash takes it");
    if (!decode_rows_fit(q, at.rows, at.cache)) return no("rows do not fit");
    const bool mma = decode_mma_takes(q, at.cache, sh);  // as run_decode_attention chooses
    if (mma && !mma_cfg().stream) return no("mma register kernel");
    const cuda::MmaDecodePlan pm =
        mma ? cuda::plan_mma_decode_attention(q.rows(), at.rows, sh, deterministic_, mma_cfg_ptr())
            : cuda::MmaDecodePlan{};
    const cuda::DecodeAttentionPlan pd =
        mma ? cuda::DecodeAttentionPlan{}
            : cuda::plan_decode_attention(q.rows(), at.rows, sh, sms_, attn_wave_, smem_optin_);
    if (!(mma ? pm.use : pd.use)) return no("no plan");
    if ((mma ? pm.counters : pd.counters) > kDecAttnCounterSlots) return no("counters");
    // With VV_CUDA_ATTN_PACK: the stream kernel also writes the o projection's operand (past discard(q)).
    size_t end = i + 5;
    std::vector<OpRec> gemms;
    if (mma) {
      size_t e = 0;
      gemms = attn_operand_gemms(recs, i + 3, &e);
      if (!gemms.empty()) end = e;
    }
    const OpRec r = rq, k = rk, w = kw, a = at;
    out.push_back([=, this] {
      const bool pack = !gemms.empty();
      if (pack && !ensure_pack(static_cast<size_t>(a.out.rows() * a.out.cols()) * 2)) return;
      {
        OpTimer timer(this, pack  ? "paged_attention.decode_mma_rope_pack"
                            : mma ? "paged_attention.decode_mma_rope"
                                  : "paged_attention.decode_rope");
        unsigned* counters = nullptr;
        float* partials = nullptr;
        if (!decode_attention_ws(mma ? pm.ws_floats : pd.ws_floats, &counters, &partials)) return;
        cuda::DecodeRope rp;
        rp.inv_freq = inv_freq(r.f, r.head_dim);
        if (!rp.inv_freq) return;  // first use inside a capture: broken, run eagerly
        rp.k = k.out.ptr<float>();
        rp.ldk = k.out.row_stride();
        rp.v = w.w.ptr<const float>();
        rp.ldv = w.w.row_stride();
        rp.kc = w.cache.k.data;
        rp.vc = w.cache.v.data;
        rp.pre = attn_pre_;
        rp.trig_pre = attn_trig_pre_;
        rp.xpose = attn_xpose_;
        rp.early_merge = attn_early_merge_;
        rp.kv_prefetch = attn_kv_prefetch_;
        rp.pipe = attn_pipe_;
        rp.stamp_recs = stamp_recs_;
        rp.stamp_count = stamp_count_;
        rp.stamp_cap = stamp_cap_;
        Tensor o = a.out;
        if (mma) {
          cuda::mma_decode_attention(a.a, a.rows, a.cache, a.shape, o, pm, partials, counters, stream_,
                                     pack ? pack_ : nullptr, &rp);
        } else {
          cuda::decode_attention(a.a, a.rows, a.cache, a.shape, o, pd, partials, counters, attn_lean_,
                                 stream_, &rp, attn_wide_merge_);
        }
        launched("paged_attention");
      }
      if (pack) run_packed_gemms(gemms);
    });
    return end - i;
  }

  // Launches what was recorded since the last host sync. A sequence of at least kGraphMinOps ops
  // seen before with the identical signature (every pointer, shape, stride and scalar: the decode
  // step) is captured once into a CUDA graph on its second sight and replayed from then on; the
  // kernels read positions, block tables and ids from device memory, so a replay is the same work.
  // Makes this backend's device the thread's current one: launches, attributes (allow_dynamic_smem) and
  // allocations act on the current device, and one thread may drive backends of several devices
  // (layer shards). Every entry point that launches or copies flushes first, so flush() does it.
  void use_device() const {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) cudaSetDevice(device_);
  }
  void flush() {
    use_device();
    if (pending_.empty()) return;
    // Host time of the flushes by kind, the fusion pass included and the release of the ops' closures
    // after the launch too (the report's "flush host ms" line).
    struct FlushClock {
      double* into = nullptr;
      std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
      ~FlushClock() {
        if (into)
          *into += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      }
    } fclock;
    last_handle_ = 0;
    std::vector<std::function<void()>> ops;
    ops.swap(pending_);
    std::vector<OpRec> recs;
    recs.swap(pending_rec_);
    fuse_decode(ops, recs);
    std::string sig;
    sig.swap(sig_);
    if (tl_pending == this) tl_pending = nullptr;
    auto run_all = [&] {
      for (auto& f : ops) f();
    };
    if (!use_graphs_ || ops.size() < graph_min_ops_ || ops.size() > kGraphMaxOps) {
      ++gstat_.ungraphed;
      fclock.into = &gstat_.ungraphed_ms;
      return run_all();
    }
    auto it = graphs_.find(sig);
    if (it == graphs_.end()) {  // first sight: run, remember
      ++gstat_.first;
      fclock.into = &gstat_.first_ms;
      run_all();
      if (graphs_.size() >= kMaxGraphs) {
        ++gstat_.clears;
        clear_graphs();
      }
      graphs_.emplace(std::move(sig), GraphEntry{});
      return;
    }
    GraphEntry& e = it->second;
    if (e.exec) {
      ++gstat_.replayed;
      fclock.into = &gstat_.replayed_ms;
      check(cudaGraphLaunch(e.exec, stream_), "cudaGraphLaunch");
      last_handle_ = e.id;
      return;
    }
    ++gstat_.captured;
    fclock.into = &gstat_.captured_ms;
    if (e.failed) return run_all();
    capture_broken_ = false;
    cudaError_t st = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    cudaGraph_t g = nullptr;
    if (st == cudaSuccess) {
      capturing_ = true;
      run_all();
      capturing_ = false;
      st = cudaStreamEndCapture(stream_, &g);
    }
    cudaGraphExec_t ex = nullptr;
    if (st == cudaSuccess && g && !capture_broken_) st = cudaGraphInstantiate(&ex, g, 0);
    if (g) cudaGraphDestroy(g);
    if (st != cudaSuccess || !ex || capture_broken_) {  // nothing of the capture ran: run it now
      cudaGetLastError();
      if (ex) cudaGraphExecDestroy(ex);
      capture_broken_ = false;
      e.failed = st != cudaSuccess;
      return run_all();
    }
    e.exec = ex;
    e.id = next_graph_id_++;
    graph_by_id_[e.id] = ex;
    check(cudaGraphLaunch(ex, stream_), "cudaGraphLaunch");
    last_handle_ = e.id;
  }

  uint64_t last_flush_handle() const override { return step_replay_ ? last_handle_ : 0; }
  bool replay_flush(uint64_t handle) override {
    flush();
    const auto it = graph_by_id_.find(handle);
    if (handle == 0 || it == graph_by_id_.end()) return false;
    const auto t0 = std::chrono::steady_clock::now();
    ++gstat_.replayed;
    ++gstat_.by_handle;
    check(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
    last_handle_ = handle;
    gstat_.replayed_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }

  // A buffer is being freed on this thread: the ops recorded on it must run first.
  static void flush_this_thread() {
    if (tl_pending) tl_pending->flush();
  }

  void run_gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) {
    const int64_t M = out.rows();
    if (M == 0 || out.cols() == 0) return;
    if (profile_shapes_)
      prof_suffix_ =
          " m" + std::to_string(M) + " n" + std::to_string(out.cols()) + " k" + std::to_string(a.cols());
    const float* bp = bias && bias->data ? bias->ptr<const float>() : nullptr;
    const bool half_w = w.dtype == DType::kBF16 || w.dtype == DType::kF16;
    // VV_CUDA_STREAM_GEMM=1-...: one-row GEMMs too (those the decode flush fuses keep decode_gemv).
    const bool stream =
        compute_ == CudaCompute::kBF16 && half_w && stream_one_row() && M == 1 && stream_takes(a, w, out, ep);
    if (!stream && decode_gemv_ && M == 1 && ep != Epilogue::kGelu && out.data != a.data &&
        cuda::decode_gemv_fits(a, w)) {
      cuda::DecodeGemv d;
      d.x = a.ptr<const float>();
      d.K = a.cols();
      d.wt = w.dtype;
      d.sms = sms_;
      d.balance = gemv_balance_;
      d.pair_rows = gemv_pair_;
      d.count = 1;
      d.j[0].w = w.data;
      d.j[0].ldw = w.row_stride();
      d.j[0].N = out.cols();
      d.bulk = gemv_bulk_ == 4 ? d.K >= kBulkLongK : gemv_bulk_ == 5 ? bulk_big(d) : gemv_bulk_ != 0;
      d.j[0].bias = bp;
      d.j[0].out = out.ptr<float>();
      d.j[0].ep = static_cast<int>(ep);
      OpTimer timer(this, !profiling_                                  ? ""
                          : d.bulk && cuda::decode_gemv_bulk_takes(d)  ? "decode_gemv.bulk"
                          : d.balance && cuda::decode_gemv_balances(d) ? "decode_gemv.balanced"
                                                                       : "decode_gemv");
      cuda::decode_gemv(d, stream_);
    } else if (!stream && !deterministic_ &&
               M <= (compute_ == CudaCompute::kBF16 ? kSkinnyRowsBf16 : kSkinnyRowsF32)) {
      OpTimer timer(this, "gemm.skinny");
      cuda::gemv(a, w, bp, out, ep, stream_);
    } else if (conv_gemm_ && compute_ == CudaCompute::kBF16 && ep == Epilogue::kNone &&
               M >= kConvGemmMinRows && cuda::conv_gemm_fits(a, w, out)) {
      OpTimer timer(this, "gemm.conv_mma");
      cuda::conv_gemm(a, w, bp, out, sms_, stream_);
    } else if (compute_ == CudaCompute::kBF16 && half_w) {
      OpTimer timer(this, !profiling_                   ? ""
                          : skinny_takes(a, w, out, ep) ? "gemm.skinny_mma"
                          : stream_takes(a, w, out, ep) ? stream_label(false)
                                                        : "gemm.cublaslt");
      gemm_lt(a, w, bp, out, ep);
    } else {
      OpTimer timer(this, "gemm.simt_f32");
      cuda::gemm_f32(a, w, bp, out, ep, stream_);
    }
    launched("gemm");
  }

  void run_rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
    OpTimer timer(this, "rms_norm");
    cuda::rms_norm(x, weight, eps, out, stream_);
    launched("rms_norm");
  }
  void run_depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                               Tensor& out) {
    OpTimer timer(this, "depthwise_conv1d_causal");
    cuda::depthwise_conv1d_causal(x, history, w, bias, out, stream_);
    launched("depthwise_conv1d_causal");
  }
  void run_add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) {
    OpTimer timer(this, "add_scaled");
    cuda::add_scaled(x, scale, y, stream_);
    launched("add_scaled");
  }
  void run_add(const Tensor& a, const Tensor& b, Tensor& out) {
    OpTimer timer(this, "add");
    cuda::add(a, b, out, stream_);
    launched("add");
  }
  void run_silu_mul(const Tensor& gate_up, Tensor& out) {
    OpTimer timer(this, "silu_mul");
    cuda::silu_mul(gate_up, out, stream_);
    launched("silu_mul");
  }
  void run_embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
    OpTimer timer(this, "embedding");
    cuda::embedding(table, ids, out, stream_);
    launched("embedding");
  }
  void run_copy(const Tensor& src, Tensor& dst) {
    if (src.rows() == 0 || src.cols() == 0) return;
    OpTimer timer(this, "copy");
    const size_t es = dtype_size(src.dtype);
    if ((src.rows() == 1 || (src.row_stride() == src.cols() && dst.row_stride() == dst.cols()))) {
      check(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.rows() * src.cols()) * es,
                            cudaMemcpyDeviceToDevice, stream_),
            "copy");
      return;
    }
    check(cudaMemcpy2DAsync(dst.data, dst.row_stride() * es, src.data, src.row_stride() * es, src.cols() * es,
                            src.rows(), cudaMemcpyDeviceToDevice, stream_),
          "copy");
  }
  void run_rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) {
    OpTimer timer(this, "rope");
    cuda::rope(x, pos, heads, head_dim, inv_freq(theta, head_dim), stream_);
    launched("rope");
  }
  void run_kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                const AttentionShape& shape) {
    OpTimer timer(this, "kv_write");
    cuda::kv_write(k, v, rows, cache, shape, stream_);
    launched("kv_write");
  }
  void run_paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out) {
    if (flash_prefill_takes(q, cache, shape)) {  // prefill in bf16 mode: the tensor-core kernel
      const cuda::FlashForm form = cuda::flash_form_taken(flash_form_, shape.heads, shape.kv_heads);
      OpTimer timer(this, flash_label(form));
      cuda::flash_prefill_attention(q, rows, cache, shape, out, stream_, sms_, form);
      launched("paged_attention");
      return;
    }
    if (run_decode_attention(q, rows, cache, shape, out)) return;
    OpTimer timer(this, "paged_attention");
    const cuda::AttentionPlan plan = cuda::plan_attention(q.rows(), rows, shape, sms_);
    if (plan.ws_floats * sizeof(float) > attn_ws_bytes_) {  // grows with the context; then never again
      if (capturing_) {
        capture_broken_ = true;
        return;
      }
      workspace_moved();
      if (attn_ws_) cudaFree(attn_ws_);
      attn_ws_ = nullptr;
      attn_ws_bytes_ = 0;
      if (!check(cudaMalloc(&attn_ws_, plan.ws_floats * sizeof(float) * 2), "cudaMalloc attention workspace")) return;
      attn_ws_bytes_ = plan.ws_floats * sizeof(float) * 2;
    }
    cuda::paged_attention(q, rows, cache, shape, out, plan, static_cast<float*>(attn_ws_), stream_);
    launched("paged_attention");
  }
  // bf16 mode only (f32 mode must match the CPU to f32 rounding); 16-byte aligned K/V rows. In
  // deterministic mode every call whose shape it takes, whatever its row count: a row's result then
  // does not depend on the rows beside it (a decode row in a step with a long prefill took the flash
  // kernel, alone the decode kernel; their sums differ in order). Without key splits, a row's keys
  // go through the same tiles in the same order in any call.
  bool flash_prefill_takes(const Tensor& q, const KvLayer& cache, const AttentionShape& shape) const {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return compute_ == CudaCompute::kBF16 &&
           (deterministic_
                ? cuda::flash_prefill_shape_ok(shape.heads, shape.kv_heads, shape.head_dim)
                : cuda::flash_prefill_applies(q.rows(), shape.heads, shape.kv_heads, shape.head_dim, sms_)) &&
           cache.k.row_stride() % 8 == 0 && cache.v.row_stride() == cache.k.row_stride() &&
           aligned(cache.k.data) && aligned(cache.v.data);
  }
  // The decode attention's workspace: [counters: kDecAttnCounterSlots, zeroed at allocation, left zeroed
  // by every launch][partials: ws_floats], grown when it must (then never again); false when it cannot
  // be now (inside a capture, which is then broken) or the allocation failed.
  static constexpr size_t kDecAttnCounterSlots = 16384;
  bool decode_attention_ws(size_t ws_floats, unsigned** counters, float** partials) {
    const size_t need = kDecAttnCounterSlots * sizeof(unsigned) + ws_floats * sizeof(float);
    if (need > dec_attn_ws_bytes_) {
      if (capturing_) {
        capture_broken_ = true;
        return false;
      }
      workspace_moved();
      if (dec_attn_ws_) cudaFree(dec_attn_ws_);
      dec_attn_ws_ = nullptr;
      dec_attn_ws_bytes_ = 0;
      const size_t bytes = need * 2;
      if (!check(cudaMalloc(&dec_attn_ws_, bytes), "cudaMalloc decode attention workspace")) return false;
      check(cudaMemsetAsync(dec_attn_ws_, 0, bytes, stream_), "cudaMemsetAsync decode attention workspace");
      dec_attn_ws_bytes_ = bytes;
    }
    *counters = static_cast<unsigned*>(dec_attn_ws_);
    *partials = reinterpret_cast<float*>(*counters + kDecAttnCounterSlots);
    return true;
  }
  // What every decode attention kernel needs of its call: a table row per query row, K and V rows of one
  // stride, a multiple of 4 values.
  static bool decode_rows_fit(const Tensor& q, const AttentionRows& rows, const KvLayer& cache) {
    return q.rows() <= rows.block_tables.rows() && cache.k.row_stride() % 4 == 0 &&
           cache.v.row_stride() == cache.k.row_stride();
  }
  // Decode steps (one row per sequence, decode_ops.cuh): key splits merged in the same launch.
  // pack (VV_CUDA_ATTN_PACK; null: none): out's bf16 copy for the GEMM after it, which only the mma
  // stream kernel writes (false otherwise, nothing launched).
  bool run_decode_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                            const AttentionShape& shape, Tensor& out, void* pack = nullptr) {
    if (!decode_rows_fit(q, rows, cache)) return false;
    const bool mma = decode_mma_takes(q, cache, shape);
    if (pack && (!mma || !mma_cfg().stream)) return false;
    const cuda::MmaDecodePlan pm =
        mma ? cuda::plan_mma_decode_attention(q.rows(), rows, shape, deterministic_, mma_cfg_ptr())
            : cuda::MmaDecodePlan{};
    const cuda::DecodeAttentionPlan p =
        mma ? cuda::DecodeAttentionPlan{}
            : cuda::plan_decode_attention(q.rows(), rows, shape, sms_, attn_wave_, smem_optin_);
    if (!pm.use && !p.use) return false;
    if ((pm.use ? pm.counters : p.counters) > kDecAttnCounterSlots) return false;
    OpTimer timer(this, pack     ? "paged_attention.decode_mma_pack"
                        : pm.use ? "paged_attention.decode_mma"
                                 : "paged_attention.decode");
    unsigned* counters = nullptr;
    float* partials = nullptr;
    if (!decode_attention_ws(pm.use ? pm.ws_floats : p.ws_floats, &counters, &partials)) return true;
    if (pm.use) {
      cuda::mma_decode_attention(q, rows, cache, shape, out, pm, partials, counters, stream_, pack);
    } else {
      cuda::decode_attention(q, rows, cache, shape, out, p, partials, counters, attn_lean_, stream_, nullptr,
                             attn_wide_merge_);
    }
    launched("paged_attention");
    return true;
  }
  // The tensor-core decode attention: bf16 mode (it rounds q, K, V and P to bf16; f32 mode keeps
  // the f32 SIMT kernel), a bf16/f16 cache with 16-byte aligned rows. VV_CUDA_DECODE_ATTN=auto (the
  // default): the SIMT kernel for one-row steps, the mma kernel for more rows. Alone the stream mma
  // kernel is faster at one row (17 us per layer at 1,031 keys against 38 for the register kernel),
  // but whole batch-1 steps over a bf16 cache ran 188.3 tok/s with the SIMT kernel against 180.9
  // with it (H200, NOTES session 9). =mma: the mma kernel for every row count, so a row's attention
  // bits do not depend on the step it shares; =simt: always SIMT.
  bool decode_mma_takes(const Tensor& q, const KvLayer& cache, const AttentionShape& shape) const {
    if (compute_ != CudaCompute::kBF16 || decode_attn_mode_ == 1 || (decode_attn_mode_ == 2 && q.rows() == 1))
      return false;
    if (cache.k.dtype != DType::kBF16 && cache.k.dtype != DType::kF16) return false;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return cuda::mma_decode_applies(shape.heads, shape.kv_heads, shape.head_dim) &&
           cache.k.row_stride() % 8 == 0 && aligned(cache.k.data) && aligned(cache.v.data);
  }
  void run_argmax(const Tensor& logits, Tensor& out, float* logprob = nullptr) {
    OpTimer timer(this, logprob ? "argmax_logprob" : "argmax");
    const size_t need = cuda::decode_argmax_ws_bytes(logits.rows());
    if (need > argmax_ws_bytes_) {  // grows with the rows of a step; then never again
      if (capturing_) {
        capture_broken_ = true;
        return;
      }
      workspace_moved();
      if (argmax_ws_) cudaFree(argmax_ws_);
      argmax_ws_ = nullptr;
      argmax_ws_bytes_ = 0;
      if (!check(cudaMalloc(&argmax_ws_, need), "cudaMalloc argmax workspace")) return;
      argmax_ws_bytes_ = need;
    }
    cuda::decode_argmax(logits, out, argmax_ws_, sms_, stream_, logprob);
    launched(logprob ? "argmax_logprob" : "argmax");
  }

 public:
  // Per-op totals since the last call (VV_CUDA_PROFILE=1), slowest first; empty when off.
  std::string take_profile_report() {
    flush();
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(prof_.begin(), prof_.end());
    prof_.clear();
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
    double total = 0;
    for (const auto& r : rows) total += r.second.first;
    std::string out;
    char line[256];
    for (const auto& r : rows) {
      std::snprintf(line, sizeof line, "  %-26s %10.3f ms %5.1f%% %9lld calls %9.2f us/call\n", r.first.c_str(),
                    r.second.first, 100 * r.second.first / std::max(total, 1e-9), static_cast<long long>(r.second.second),
                    1e3 * r.second.first / std::max<int64_t>(r.second.second, 1));
      out += line;
    }
    // How the flushes ran (kept whether or not ops are timed): a step that never replays pays its
    // launches (and a capture) every time.
    if (gstat_.first + gstat_.replayed + gstat_.captured + gstat_.ungraphed > 0) {
      std::snprintf(
          line, sizeof line,
          "  flushes: %lld replayed, %lld captured, %lld first sight (eager), %lld eager (size/graphs "
          "off), %lld graph-cache clears; %lld of the replays by handle\n",
          static_cast<long long>(gstat_.replayed), static_cast<long long>(gstat_.captured),
          static_cast<long long>(gstat_.first), static_cast<long long>(gstat_.ungraphed),
          static_cast<long long>(gstat_.clears), static_cast<long long>(gstat_.by_handle));
      out += line;
      std::snprintf(line, sizeof line,
                    "  flush host ms: captured %.3f, first sight %.3f, eager %.3f, replayed %.3f\n",
                    gstat_.captured_ms, gstat_.first_ms, gstat_.ungraphed_ms, gstat_.replayed_ms);
      out += line;
    }
    if (chain_trace_) {  // the chain's trace since the last report
      uint64_t words[cuda::kChainTraceWords] = {};
      if (cudaMemcpyAsync(words, chain_trace_, sizeof words, cudaMemcpyDeviceToHost, stream_) ==
              cudaSuccess &&
          cudaMemsetAsync(chain_trace_, 0, sizeof words, stream_) == cudaSuccess &&
          cudaStreamSynchronize(stream_) == cudaSuccess)
        out += cuda::decode_chain_trace_report(words);
    }
    if (gstat_.lt_plans > 0) {
      std::snprintf(line, sizeof line, "  cublaslt plans: %lld new, %.3f ms host\n",
                    static_cast<long long>(gstat_.lt_plans), gstat_.lt_plan_ms);
      out += line;
    }
    gstat_ = {};
    return out;
  }

 private:
  friend struct OpTimer;
  CudaBackend() = default;

  // The bytes that identify an op and its operands: equal signatures launch identical work.
  struct Sig {
    std::string b;
    explicit Sig(int op) { put(op); }
    template <typename T>
    void put(const T& v) {
      b.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    Sig& operator<<(const Tensor& t) {
      put(t.data);
      put(t.dtype);
      put(t.ndim);
      for (int i = 0; i < t.ndim; ++i) {
        put(t.shape[i]);
        put(t.stride[i]);
      }
      return *this;
    }
    Sig& operator<<(const AttentionRows& r) { return *this << r.row_seq << r.row_pos << r.block_tables << r.block_size; }
    Sig& operator<<(const AttentionShape& a) { return *this << a.heads << a.kv_heads << a.head_dim << a.scale; }
    Sig& operator<<(int v) {
      put(v);
      return *this;
    }
    Sig& operator<<(float v) {
      put(v);
      return *this;
    }
  };
  struct GraphEntry {
    cudaGraphExec_t exec = nullptr;
    bool failed = false;
    uint64_t id = 0;  // its handle (last_flush_handle) once captured
  };
  // Graphs pay for steps of many small launches (a decode step: ~370); an encoder pass (thousands
  // of large ops, run once per clip) would only pay the capture.
  static constexpr size_t kGraphMinOps = 32;
  static constexpr size_t kGraphMaxOps = 1024;
  // VV_CUDA_GRAPH_MIN_OPS=N (tests): sequences of N ops or more become graphs, so that the tiny model's
  // decode steps (fewer than kGraphMinOps) replay as the 7B's do.
  size_t graph_min_ops_ = std::getenv("VV_CUDA_GRAPH_MIN_OPS") &&
                                  std::atoll(std::getenv("VV_CUDA_GRAPH_MIN_OPS")) > 0
                              ? static_cast<size_t>(std::atoll(std::getenv("VV_CUDA_GRAPH_MIN_OPS")))
                              : kGraphMinOps;
  static constexpr size_t kMaxGraphs = 64;
  static inline thread_local CudaBackend* tl_pending = nullptr;

  template <typename Fn>
  void defer(const Sig& s, Fn&& fn, const OpRec* rec = nullptr) {
    if (!record_) {
      use_device();
      return fn();
    }
    if (tl_pending && tl_pending != this) tl_pending->flush();  // one backend's ops pending per thread
    sig_ += s.b;
    pending_.emplace_back(std::forward<Fn>(fn));
    pending_rec_.push_back(rec ? *rec : OpRec{});
    tl_pending = this;
    if (pending_.size() >= 8192) flush();
  }
  void clear_graphs() {
    if (graphs_.empty()) return;
    cudaStreamSynchronize(stream_);
    for (auto& [k, e] : graphs_)
      if (e.exec) cudaGraphExecDestroy(e.exec);
    graphs_.clear();
    graph_by_id_.clear();
    last_handle_ = 0;
  }
  // A workspace is about to be freed and reallocated: graphs hold its old address.
  void workspace_moved() { clear_graphs(); }

  bool check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (first_error_.empty()) {
      record_error(std::string(what) + ": " + cudaGetErrorString(e));
      std::fprintf(stderr, "vibevoice: CUDA error on device %d: %s\n", device_, first_error_.c_str());
    }
    return false;
  }
  // The first error, also on the backend a lane was made from (whose device_error() the runner
  // checks: a failed launch of the semantic encoder must fail the step as one of the main stream's).
  void record_error(const std::string& e) {
    if (first_error_.empty()) first_error_ = e;
    if (lane_parent_ && lane_parent_->first_error_.empty())
      lane_parent_->first_error_ = "second stream: " + e;
  }
  void launched(const char* op) { check(cudaGetLastError(), op); }

  // 1/θ^(2i/d) per frequency, computed on the host exactly as the reference does, uploaded once
  // per (θ, head_dim): later calls (the decode path) only look it up.
  const float* inv_freq(float theta, int head_dim) {
    const auto key = std::make_pair(theta, head_dim);
    auto it = inv_freq_.find(key);
    if (it != inv_freq_.end()) return it->second;
    if (capturing_) {  // first use inside a capture: allocation is not allowed there; run eagerly
      capture_broken_ = true;
      return nullptr;
    }
    const int half = head_dim / 2;
    std::vector<float> h(half);
    for (int i = 0; i < half; ++i) h[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    float* d = nullptr;
    check(cudaMalloc(&d, sizeof(float) * std::max(half, 1)), "cudaMalloc inv_freq");
    // On this backend's stream, so ordered before the kernels that read it. (A cudaMemcpy from pageable
    // memory runs on the legacy stream, which a non-blocking stream does not wait for, and may return
    // before its DMA has landed: the first rope of a new head dim then read a partial table. Seen in
    // session 26 as q, k and the K cache, and nothing else, differing in two gpu tests run as shards
    // beside each other.) Pageable sources are staged before the call returns, so h may go.
    check(cudaMemcpyAsync(d, h.data(), sizeof(float) * half, cudaMemcpyHostToDevice, stream_),
          "upload inv_freq");
    inv_freq_[key] = d;
    return d;
  }

  // ---- cuBLASLt ------------------------------------------------------------------------------
  static constexpr int kMaxLtAlgos = 16;
  // VV_CUDA_LT_TUNE: (N, K, ldd, weight dtype, bias, epilogue, bf16 output, row bucket) -> the choice.
  using TuneKey = std::tuple<int64_t, int64_t, int64_t, int, bool, int, bool, int64_t>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t wl = nullptr, al = nullptr, dl = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
    // VV_CUDA_LT_ALGOS > 1 or VV_CUDA_LT_TUNE: the candidates to time at first use, the heuristic's
    // best first (then, with VV_CUDA_LT_TUNE, split-K variants of those that take split-K).
    static constexpr size_t kMaxCands = 64;
    std::array<cublasLtMatmulAlgo_t, kMaxCands> cands{};
    std::array<int, kMaxCands> cand_splits{};  // each candidate's K slices (1: as the heuristic gave it)
    size_t ncands = 0;
    void add(const cublasLtMatmulAlgo_t& a, int splits) {
      if (ncands == kMaxCands) return;
      cands[ncands] = a;
      cand_splits[ncands++] = splits;
    }
    bool tuned = false;
    // VV_CUDA_LT_TUNE: timed with the L2 cleared; the choice then serves tune_key's bucket.
    bool tune_cold = false;
    TuneKey tune_key{};
  };
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, int, bool>;
  // Deterministic mode: (N, K, ldd, weight dtype, bias, epilogue) -> the algorithm every M uses.
  using FixedKey = std::tuple<int64_t, int64_t, int64_t, int, bool, int>;
  static constexpr int64_t kFixedAlgoRows = 128;
  std::map<FixedKey, std::optional<cublasLtMatmulAlgo_t>> fixed_algos_;

  void destroy_plan(Plan& p) {
    if (p.desc) lt_api_->desc_destroy(p.desc);
    if (p.wl) lt_api_->layout_destroy(p.wl);
    if (p.al) lt_api_->layout_destroy(p.al);
    if (p.dl) lt_api_->layout_destroy(p.dl);
  }

  // Column-major view: Dᵀ[N,M] = W[N,K] · Aᵀ: W is a K×N column-major matrix (ld K) taken
  // transposed, A a K×M one (ld K, packed), D an N×M one (ld = out's row stride).
  Plan* plan_for(int64_t M, int64_t N, int64_t K, int64_t ldd, DType wt, bool bias, int ep,
                 bool bf16_out = false) {
    const PlanKey key{M, N, K, ldd, static_cast<int>(wt), bias, ep, bf16_out};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.ok ? &it->second : nullptr;
    // A new shape asks cuBLASLt's heuristic on the host (the report's "cublaslt plans" line).
    struct PlanClock {
      GraphStats& g;
      std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
      ~PlanClock() {
        ++g.lt_plans;
        g.lt_plan_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      }
    } clock{gstat_};
    Plan& p = plans_[key];
    const cudaDataType_t in = wt == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    bool ok = lt_api_->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    ok = ok && lt_api_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)) == 0;
    ok = ok && lt_api_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)) == 0;
    if (bias) {
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
      ok = ok && lt_api_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)) == 0;
      const cudaDataType_t bt = CUDA_R_32F;
      ok = ok && lt_api_->desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)) == 0;
    }
    ok = ok && lt_api_->layout_create(&p.wl, in, K, N, K) == 0;
    ok = ok && lt_api_->layout_create(&p.al, in, K, M, K) == 0;
    ok = ok && lt_api_->layout_create(&p.dl, bf16_out ? CUDA_R_16BF : CUDA_R_32F, N, M, ldd) == 0;
    cublasLtMatmulPreference_t pref = nullptr;
    ok = ok && lt_api_->pref_create(&pref) == 0;
    ok = ok && lt_api_->pref_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws_bytes_,
                                                    sizeof(lt_ws_bytes_)) == 0;
    if (deterministic_) {
      // No split-K: a split's partial sums (and how many there are) depend on the problem's shape.
      const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
      ok = ok && lt_api_->pref_set_attribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none,
                                             sizeof(none)) == 0;
    }
    cublasLtMatmulHeuristicResult_t res[kMaxLtAlgos] = {};
    int found = 0;
    if (ok && deterministic_) {
      // One algorithm per weight shape for every M: the heuristic's choice at kFixedAlgoRows rows,
      // kept if it takes this M (cublasLtMatmulAlgoCheck), else this M's own (reported once).
      const FixedKey fk{N, K, ldd, static_cast<int>(wt), bias, ep};
      auto f = fixed_algos_.find(fk);
      if (f == fixed_algos_.end()) {
        cublasLtMatrixLayout_t al_ref = nullptr, dl_ref = nullptr;
        std::optional<cublasLtMatmulAlgo_t> chosen;
        const bool layouts = lt_api_->layout_create(&al_ref, in, K, kFixedAlgoRows, K) == 0 &&
                             lt_api_->layout_create(&dl_ref, CUDA_R_32F, N, kFixedAlgoRows, ldd) == 0;
        const cublasStatus_t hs = layouts ? lt_api_->algo_get_heuristic(lt_, p.desc, p.wl, al_ref, dl_ref,
                                                                        dl_ref, pref, 1, res, &found)
                                          : CUBLAS_STATUS_INVALID_VALUE;
        if (hs == CUBLAS_STATUS_SUCCESS && found > 0) chosen = res[0].algo;
        if (al_ref) lt_api_->layout_destroy(al_ref);
        if (dl_ref) lt_api_->layout_destroy(dl_ref);
        f = fixed_algos_.emplace(fk, chosen).first;
      }
      cublasLtMatmulHeuristicResult_t check{};
      if (f->second && lt_api_->algo_check(lt_, p.desc, p.wl, p.al, p.dl, p.dl, &*f->second, &check) == 0 &&
          check.workspaceSize <= lt_ws_bytes_) {
        p.algo = *f->second;
        p.ok = true;
        if (pref) lt_api_->pref_destroy(pref);
        return &p;
      }
      std::fprintf(stderr,
                   "vibevoice: deterministic GEMMs: the algorithm fixed for N=%lld K=%lld does not take "
                   "M=%lld; this M uses its own (its rows may differ from the same rows at other M)\n",
                   static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(M));
      found = 0;
    }
    const int want = tune_takes(M) ? kMaxLtAlgos : lt_algos_;
    ok = ok &&
         lt_api_->algo_get_heuristic(lt_, p.desc, p.wl, p.al, p.dl, p.dl, pref, want, res, &found) == 0 &&
         found > 0;
    if (pref) lt_api_->pref_destroy(pref);
    if (ok) p.algo = res[0].algo;
    if (ok && tune_takes(M)) {
      add_tune_candidates(p, res, found, M, N, K, ldd, wt, bias, ep, bf16_out);
    } else {
      for (int k = 0; ok && lt_algos_ > 1 && k < found; ++k) {
        p.add(res[k].algo, 1);
      }
    }
    p.ok = ok;
    return ok ? &p : nullptr;
  }

  // ---- VV_CUDA_LT_TUNE ----------------------------------------------------------------------
  // A decode-sized cuBLASLt GEMM (2..kTuneMaxRows rows, not deterministic) times its candidates at
  // first use and keeps the fastest (tune_plan). Its choice serves every row count of its bucket of
  // kTuneBucketRows rows that cublasLtMatmulAlgoCheck lets take it, so a scheduler's steps of 49..64
  // rows tune once.
  static constexpr int64_t kTuneMaxRows = 128, kTuneBucketRows = 16;
  bool tune_takes(int64_t M) const { return lt_tune_ && !deterministic_ && M >= 2 && M <= kTuneMaxRows; }
  std::map<TuneKey, cublasLtMatmulAlgo_t> tuned_algos_;

  void add_tune_candidates(Plan& p, const cublasLtMatmulHeuristicResult_t* res, int found, int64_t M,
                           int64_t N, int64_t K, int64_t ldd, DType wt, bool bias, int ep, bool bf16_out) {
    const TuneKey key{N, K, ldd, static_cast<int>(wt), bias, ep, bf16_out, (M - 1) / kTuneBucketRows};
    auto it = tuned_algos_.find(key);
    cublasLtMatmulHeuristicResult_t check{};
    if (it != tuned_algos_.end()) {
      if (lt_api_->algo_check(lt_, p.desc, p.wl, p.al, p.dl, p.dl, &it->second, &check) == 0 &&
          check.workspaceSize <= lt_ws_bytes_) {
        p.algo = it->second;
        p.tuned = true;
        return;
      }
    }
    p.tune_cold = true;
    p.tune_key = key;
    for (int k = 0; k < found; ++k) {
      p.add(res[k].algo, 1);
    }
    if (!lt_api_->algo_cap_get_attribute || !lt_api_->algo_config_get_attribute ||
        !lt_api_->algo_config_set_attribute)
      return;
    for (int k = 0; k < found; ++k) {
      int32_t takes_split = 0;
      uint32_t splits = 1;
      size_t written = 0;
      if (lt_api_->algo_cap_get_attribute(&res[k].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &takes_split,
                                          sizeof(takes_split), &written) != 0 ||
          !takes_split ||
          lt_api_->algo_config_get_attribute(&res[k].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits), &written) != 0 ||
          splits > 1)
        continue;
      for (const int n : {2, 3, 4, 6, 8}) {
        if (p.ncands == Plan::kMaxCands) return;
        cublasLtMatmulAlgo_t a = res[k].algo;
        const uint32_t s = static_cast<uint32_t>(n), scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        if (lt_api_->algo_config_set_attribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof(s)) != 0 ||
            lt_api_->algo_config_set_attribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                               sizeof(scheme)) != 0 ||
            lt_api_->algo_check(lt_, p.desc, p.wl, p.al, p.dl, p.dl, &a, &check) != 0 ||
            check.workspaceSize > lt_ws_bytes_)
          continue;
        p.add(a, n);
      }
    }
  }

  // The 16-bit A operand buffer holds at least `need` bytes (false: not now; inside a capture the
  // capture is marked broken and the flush runs its ops eagerly).
  bool ensure_pack(size_t need) {
    if (need <= pack_bytes_) return true;  // grows with the largest prefill chunk; never on the decode path
    if (capturing_) {
      capture_broken_ = true;
      return false;
    }
    workspace_moved();
    if (pack_) cudaFree(pack_);
    pack_ = nullptr;
    pack_bytes_ = 0;
    if (!check(cudaMalloc(&pack_, need), "cudaMalloc GEMM operand")) return false;
    pack_bytes_ = need;
    return true;
  }

  void gemm_lt(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep) {
    const int64_t M = out.rows(), K = a.cols();
    if (!ensure_pack(static_cast<size_t>(M * K) * 2)) return;
    cuda::pack_rows_half(a, pack_, w.dtype, stream_);
    gemm_lt_packed(a, w, bias, out, ep);
  }

  // Whether gemm_lt_packed takes the split-K skinny kernel (skinny_gemm.cuh): bf16 weights, no GELU
  // epilogue, and 2..128 rows with VV_CUDA_SKINNY_GEMM=1, or any row count in 128-row launches in
  // deterministic mode (its K slices depend on the weight's shape only, so a row's bits do not depend
  // on the rows beside it or on where it sits).
  bool skinny_takes(const Tensor& a, const Tensor& w, const Tensor& out, Epilogue ep) const {
    return skinny_fits(a, w, out, ep) && !(det_ws_ && stream_takes(a, w, out, ep));
  }
  bool skinny_fits(const Tensor& a, const Tensor& w, const Tensor& out, Epilogue ep) const {
    const int64_t M = out.rows();
    const bool rows_ok = deterministic_ ? M >= 1 : (skinny_gemm_ && M >= 2 && M <= cuda::kSkinnyGemmMaxRows);
    return rows_ok && sk_ws_ && w.dtype == DType::kBF16 && ep != Epilogue::kGelu &&
           out.dtype == DType::kF32 &&
           cuda::skinny_gemm_fits(std::min(M, cuda::kSkinnyGemmMaxRows), a.cols(), pack_, w.data,
                                  w.row_stride()) &&
           cuda::skinny_gemm_ws_bytes(std::min(M, cuda::kSkinnyGemmMaxRows), out.cols(),
                                      cuda::plan_skinny_gemm(out.cols(), a.cols(), sms_, sk_per_sm_)) <=
               sk_ws_bytes_;
  }

  // Whether VV_CUDA_STREAM_GEMM's range includes one-row GEMMs (its default, {1, 0}, is an empty range).
  bool stream_one_row() const { return stream_rows_.first == 1 && stream_rows_.second >= 1; }

  // Whether gemm_lt_packed takes the weight-streaming kernel (stream_gemm.cuh): bf16 weights, no GELU
  // epilogue, not deterministic (tiles shared by blocks are summed with atomics), and a row count in
  // the VV_CUDA_STREAM_GEMM range.
  bool stream_takes(const Tensor& a, const Tensor& w, const Tensor& out, Epilogue ep) const {
    const int64_t M = out.rows();
    if (deterministic_) {  // VV_CUDA_DETERMINISTIC_GEMM=ws: every bf16 GEMM, in 128-row launches
      return det_ws_ && stream_ws_ && M >= 1 && w.dtype == DType::kBF16 && ep != Epilogue::kGelu &&
             out.dtype == DType::kF32 &&
             cuda::stream_gemm_fits(std::min(M, cuda::kStreamGemmMaxRows), a.cols(), pack_, w.data,
                                    w.row_stride());
    }
    return M >= stream_rows_.first && M <= stream_rows_.second &&
           w.rows() * w.cols() * 2 >= stream_min_bytes_ && w.dtype == DType::kBF16 && ep != Epilogue::kGelu &&
           out.dtype == DType::kF32 && cuda::stream_gemm_fits(M, a.cols(), pack_, w.data, w.row_stride());
  }

  const char* stream_label(bool packed) const {
    switch (stream_kind_) {
      case cuda::StreamGemmKind::kWarpSpec:
        return packed ? "gemm.stream_ws_packed" : "gemm.stream_ws";
      case cuda::StreamGemmKind::kWgmma:
        return packed ? "gemm.stream_wgmma_packed" : "gemm.stream_wgmma";
      default:
        return packed ? "gemm.stream_mma_packed" : "gemm.stream_mma";
    }
  }

  // The first failed cublasLtMatmul becomes the device error (stderr once).
  void lt_check(cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS || !first_error_.empty()) return;
    record_error("cublasLtMatmul failed with status " + std::to_string(static_cast<int>(st)));
    std::fprintf(stderr, "vibevoice: %s\n", first_error_.c_str());
  }

  // The stream GEMM's device scratch (counts, the ws form's partial sums) and its cluster.
  cuda::StreamGemmScratch stream_scratch() const {
    cuda::StreamGemmScratch sc{stream_flags_,    kStreamFlags,       static_cast<float*>(stream_ws_),
                               stream_ws_bytes_, stream_ws_cluster_, stream_ws_min_units_};
    sc.ws_max_split = stream_ws_max_split_;
    sc.row_invariant = deterministic_;
    sc.pad128 = stream_ws_pad128_;
    return sc;
  }

  // gemm_lt once pack_ (or `ap`, when given) holds a's rows in w's 16-bit type (a itself is read only
  // by the fallback).
  void gemm_lt_packed(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep,
                      const void* ap = nullptr) {
    const int64_t M = out.rows(), N = out.cols(), K = a.cols();
    const void* const A = ap ? ap : pack_;
    auto skinny = [&] {
      const cuda::SkinnyGemmPlan plan = cuda::plan_skinny_gemm(N, K, sms_, sk_per_sm_);
      for (int64_t r = 0; r < M; r += cuda::kSkinnyGemmMaxRows) {  // one launch unless deterministic
        const int64_t m = std::min(cuda::kSkinnyGemmMaxRows, M - r);
        cuda::skinny_gemm(static_cast<const char*>(A) + r * K * 2, m, K, w.data, w.row_stride(), N, bias,
                          ep == Epilogue::kAddResidual, out.ptr<float>() + r * out.row_stride(),
                          out.row_stride(), plan, static_cast<float*>(sk_ws_), stream_);
      }
    };
    if (skinny_takes(a, w, out, ep)) {
      skinny();
      return;
    }
    if (deterministic_ && stream_takes(a, w, out, ep)) {
      // VV_CUDA_DETERMINISTIC_GEMM=ws: 128-row launches of the row-invariant ws form.
      for (int64_t r = 0; r < M; r += cuda::kStreamGemmMaxRows) {
        const int64_t m = std::min(cuda::kStreamGemmMaxRows, M - r);
        if (cuda::stream_gemm_ws(static_cast<const char*>(A) + r * K * 2, m, K, w.data, w.row_stride(), N,
                                 bias, ep == Epilogue::kAddResidual, out.ptr<float>() + r * out.row_stride(),
                                 out.row_stride(), sms_, stream_scratch(), stream_))
          continue;
        if (r == 0 && skinny_fits(a, w, out, ep)) {  // this shape never runs on it: the skinny kernel
          skinny();
          return;
        }
        record_error("the deterministic ws GEMM refused N=" + std::to_string(N) + " K=" + std::to_string(K) +
                     " at " + std::to_string(m) + " rows");
        return;
      }
      return;
    }
    if (stream_takes(a, w, out, ep)) {
      const cuda::StreamGemmKind ran = cuda::stream_gemm(
          A, M, K, w.data, w.row_stride(), N, bias, ep == Epilogue::kAddResidual, out.ptr<float>(),
          out.row_stride(), sms_, stream_kind_, stream_scratch(), stream_);
      if (ran != stream_kind_) {
        std::fprintf(stderr, "vibevoice: %s\n",
                     ran == cuda::StreamGemmKind::kMma
                         ? "no tensor-map entry point in the driver: the stream GEMM uses mma.sync"
                         : "the warp-specialised stream GEMM cannot run here (its scratch or registers): it "
                           "uses the one-barrier form");
        stream_kind_ = ran;
      }
      return;
    }
    Plan* p = plan_for(M, N, K, out.row_stride(), w.dtype, bias != nullptr, static_cast<int>(ep));
    if (!p) {  // no cuBLASLt algorithm for this shape/alignment: the SIMT path is always valid
      cuda::gemm_f32(a, w, bias, out, ep, stream_);
      return;
    }
    if (bias) lt_api_->desc_set_attribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    const float alpha = 1.0f, beta = ep == Epilogue::kAddResidual ? 1.0f : 0.0f;
    if (!p->tuned && p->ncands > 1 && !capturing_)
      tune_plan(*p, w.data, M, N, K, out.row_stride(), alpha, beta);
    const cublasStatus_t st =
        lt_api_->matmul(lt_, p->desc, &alpha, w.data, p->wl, A, p->al, &beta, out.data, p->dl, out.data,
                        p->dl, &p->algo, lt_ws_, lt_ws_bytes_, stream_);
    lt_check(st);
    if (ep == Epilogue::kGelu) cuda::gelu_inplace(out, stream_);  // cuBLASLt's GELU is the tanh form
  }

  // On a plan's first use (never inside a capture): time its candidates on this shape into a scratch
  // output and keep the fastest. VV_CUDA_LT_ALGOS=N (> 1; an experiment): the heuristic's first N, at
  // any row count. VV_CUDA_LT_TUNE=1 (decode-sized GEMMs, tune_takes): the heuristic's first 16 and
  // their split-K variants, each run after the L2 is overwritten (a decode step streams every weight
  // from HBM; an L2-warm timing favours what the real step does not see), the median of kTuneReps
  // runs; another algorithm replaces the heuristic's first only if it is kTuneMargin faster, and its
  // bucket's later plans take it. One line per tuned shape on stderr. Which algorithm wins may differ
  // between runs, so bf16 results may too (never in deterministic mode).
  static constexpr int kTuneReps = 5;
  static constexpr float kTuneMargin = 0.97f;
  void tune_plan(Plan& p, const void* w, int64_t M, int64_t N, int64_t K, int64_t ldd, float alpha,
                 float beta) {
    p.tuned = true;
    const auto t0 = std::chrono::steady_clock::now();
    const bool cold = p.tune_cold;
    if (cold && !l2_flush_) {
      int l2 = 0;
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_);
      const size_t bytes = std::max<size_t>(2 * static_cast<size_t>(l2), size_t{64} << 20);
      if (cudaMalloc(&l2_flush_, bytes) == cudaSuccess) {
        l2_flush_bytes_ = bytes;
      } else {
        cudaGetLastError();
        l2_flush_ = nullptr;
      }
    }
    void* d = nullptr;
    if (cudaMalloc(&d, static_cast<size_t>(M * ldd) * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    const int reps = cold ? kTuneReps : 3;
    std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * reps));
    for (auto& e : ev) cudaEventCreate(&e);
    std::vector<float> med(p.ncands, 0.f);
    for (size_t k = 0; k < p.ncands; ++k) {
      auto run = [&] {
        return lt_api_->matmul(lt_, p.desc, &alpha, w, p.wl, pack_, p.al, &beta, d, p.dl, d, p.dl,
                               &p.cands[k], lt_ws_, lt_ws_bytes_, stream_);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;
      for (int r = 0; r < reps; ++r) {
        if (cold && l2_flush_) cudaMemsetAsync(l2_flush_, r + 1, l2_flush_bytes_, stream_);
        cudaEventRecord(ev[static_cast<size_t>(2 * r)], stream_);
        run();
        cudaEventRecord(ev[static_cast<size_t>(2 * r + 1)], stream_);
      }
      cudaEventSynchronize(ev.back());
      std::vector<float> t(static_cast<size_t>(reps));
      for (int r = 0; r < reps; ++r)
        cudaEventElapsedTime(&t[static_cast<size_t>(r)], ev[static_cast<size_t>(2 * r)],
                             ev[static_cast<size_t>(2 * r + 1)]);
      std::sort(t.begin(), t.end());
      med[k] = t[t.size() / 2];
    }
    cudaGetLastError();
    for (auto& e : ev) cudaEventDestroy(e);
    cudaFree(d);
    size_t best = 0;
    for (size_t k = 0; k < med.size(); ++k)
      if (med[k] > 0 && (med[best] == 0 || med[k] < med[best])) best = k;
    const bool replace = best != 0 && (med[0] == 0 || !cold || med[best] < kTuneMargin * med[0]);
    if (replace) p.algo = p.cands[best];
    if (cold) tuned_algos_[p.tune_key] = p.algo;
    std::fprintf(stderr,
                 "vibevoice: cuBLASLt M=%lld N=%lld K=%lld%s: heuristic's first %.1f us, best (#%zu of %zu, "
                 "%d K slices) %.1f us: %s\n",
                 static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                 cold ? " (L2 cleared before each run)" : "", 1e3 * med[0], best, p.ncands,
                 p.cand_splits[best], 1e3 * med[best], replace ? "takes it" : "keeps the heuristic's first");
    gstat_.lt_plan_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  static int lt_algos_from_env() {
    const char* v = std::getenv("VV_CUDA_LT_ALGOS");
    const int n = v ? std::atoi(v) : 1;
    return n < 1 ? 1 : (n > kMaxLtAlgos ? kMaxLtAlgos : n);
  }
  int lt_algos_ = lt_algos_from_env();
  bool lt_tune_ = std::getenv("VV_CUDA_LT_TUNE") && std::string(std::getenv("VV_CUDA_LT_TUNE")) == "1";
  void* l2_flush_ = nullptr;  // VV_CUDA_LT_TUNE: written before each timed run to clear the L2
  size_t l2_flush_bytes_ = 0;
  // VV_CUDA_SKINNY_GEMM=1: bf16 GEMMs of 2..128 rows on the split-K kernel (skinny_gemm.cuh), an
  // experiment until measured; its partials' buffer (sized for any such shape) is allocated at creation.
  bool skinny_gemm_ =
      std::getenv("VV_CUDA_SKINNY_GEMM") && std::string(std::getenv("VV_CUDA_SKINNY_GEMM")) == "1";
  // VV_CUDA_STREAM_GEMM=LO-HI: bf16 GEMMs of LO..HI rows (within 1..128) on the weight-streaming
  // kernel (stream_gemm.cuh); "0" turns it off. Default: off until measured against cuBLASLt.
  std::pair<int64_t, int64_t> stream_rows_ = [] {
    std::pair<int64_t, int64_t> r{1, 0};
    const char* e = std::getenv("VV_CUDA_STREAM_GEMM");
    long long lo = 0, hi = 0;
    if (e && std::sscanf(e, "%lld-%lld", &lo, &hi) == 2 && lo >= 1 && hi >= lo) {
      r = {lo, std::min<int64_t>(hi, cuda::kStreamGemmMaxRows)};
    }
    return r;
  }();
  // VV_CUDA_STREAM_GEMM_MIN_MB=N (default 0): only weights of at least N MiB on the stream GEMM (the
  // rest stays on cuBLASLt), e.g. 64 for the 7B's gate_up, down and LM head but not q|k|v or o. An
  // A/B knob.
  int64_t stream_min_bytes_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_GEMM_MIN_MB");
    const long long mb = e ? std::atoll(e) : 0;
    return mb > 0 && mb < (int64_t{1} << 20) ? static_cast<int64_t>(mb) << 20 : int64_t{0};
  }();
  // The stream GEMM's per-tile flags (allocated with the backend when VV_CUDA_STREAM_GEMM is set).
  static constexpr size_t kStreamFlags = 4096;
  int* stream_flags_ = nullptr;
  // The warp-specialised stream GEMM's partial sums (VV_CUDA_STREAM_GEMM_KIND=ws).
  void* stream_ws_ = nullptr;
  size_t stream_ws_bytes_ = 0;
  // VV_CUDA_STREAM_WS_CLUSTER=2|4: pairs or fours of its blocks share a's rows through TMA multicast
  // (default 1: each block loads them; on the H100 the clusters were slower at every shape, session 22).
  // An A/B knob.
  int stream_ws_cluster_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_CLUSTER");
    const std::string v = e ? e : "";
    return v == "2" ? 2 : v == "4" ? 4 : 1;
  }();
  // VV_CUDA_STREAM_WS_MLP=1: with the SwiGLU form taking gate_up and the ws form down, the two in one
  // launch (stream_gemm_mlp: down's first weights load while gate_up finishes). Opt-in.
  bool stream_ws_mlp_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_MLP");
    return e && std::string(e) == "1";
  }();
  // VV_CUDA_STREAM_WS_MAX_SPLIT=N (0..1024, 0: none; default 8): its most segments a tile (fewer runs
  // than SMs on shapes with few tiles). An A/B knob.
  int stream_ws_max_split_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_MAX_SPLIT");
    const int n = e ? std::atoi(e) : 8;
    return n >= 0 && n <= 1024 ? n : 8;
  }();
  // VV_CUDA_STREAM_WS_MIN_UNITS=N (1..1024; default 1): its least 64-deep steps a run (fewer runs than
  // SMs on small shapes, smaller partial sums). An A/B knob.
  int stream_ws_min_units_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_MIN_UNITS");
    const int n = e ? std::atoi(e) : 1;
    return n >= 1 && n <= 1024 ? n : 1;
  }();
  // VV_CUDA_DETERMINISTIC_GEMM=ws (deterministic mode, sm_90): the bf16 GEMMs on the ws form in its
  // row-invariant settings instead of the skinny kernel (set at creation).
  bool det_ws_ = false;
  // VV_CUDA_STREAM_WS_PAD128=1: the ws form always in its 128-row form (row invariance without relying
  // on wgmma's sums being independent of its N). An A/B knob.
  bool stream_ws_pad128_ = [] {
    const char* e = std::getenv("VV_CUDA_STREAM_WS_PAD128");
    return e && std::string(e) == "1";
  }();
  // VV_CUDA_STREAM_GEMM_KIND=mma|wgmma|ws: the stream GEMM's compute; default wgmma on sm_90 (set at
  // creation; ws: the warp-specialised Hopper form).
  cuda::StreamGemmKind stream_kind_ = cuda::StreamGemmKind::kMma;
  // VV_CUDA_SKINNY_PER_SM=1..4 (default 2): blocks per SM its K slices aim at (an A/B knob).
  int sk_per_sm_ = [] {
    const char* e = std::getenv("VV_CUDA_SKINNY_PER_SM");
    const int v = e ? std::atoi(e) : 2;
    return v >= 1 && v <= 4 ? v : 2;
  }();
  void* sk_ws_ = nullptr;
  size_t sk_ws_bytes_ = 0;

  int device_ = 0;
  CudaCompute compute_ = CudaCompute::kF32;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  const cuda::CublasLtApi* lt_api_ = nullptr;  // loaded in bf16 mode only
  cublasLtHandle_t lt_ = nullptr;
  void* lt_ws_ = nullptr;
  size_t lt_ws_bytes_ = 0;
  void* pack_ = nullptr;
  size_t pack_bytes_ = 0;
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;
  int sms_ = 132;
  size_t smem_optin_ = 227 * 1024;  // a block's shared memory (cudaDeviceProp::sharedMemPerBlockOptin)
  size_t l2_bytes_ = 0;
  // VV_CUDA_GEMV_BULK (sm_90): one-row GEMVs stream their weights by cp.async.bulk where
  // cuda::DecodeGemv::bulk takes them. 1: every one; 3: every one, but gate_up is not paired with its
  // SwiGLU epilogue (silu_mul stays an op); 2: the lone ones only (batch-1's o and down), not the
  // flush's fused launches (so an unfused step's q/k/v differ from a fused one's); 4: the lone ones of
  // kBulkLongK or more columns only (batch-1's down projection: rows of 37.9 KB a warp streams with 4 KB
  // in flight on the default kernel), which are lone in fused and unfused steps alike (the default from
  // session 25 to 29); 0: none (the default again since session 30: the in-process A/B put it ahead).
  // 5: every one-row GEMV launch that streams at least gemv_bulk_min_ bytes of weights (the 7B's gate_up
  // with its norm prologue and SwiGLU epilogue, down, and the LM head with its norm prologue), the others
  // (q/k/v, o) on the default kernel. A launch's kernel follows from its own weights' size, so an unfused
  // step sends its gate_up, down and LM head to the bulk kernel too, and the bits agree.
  int gemv_bulk_ = [] {
    const char* v = std::getenv("VV_CUDA_GEMV_BULK");
    const std::string s = v ? v : "";
    return s == "1" ? 1 : s == "2" ? 2 : s == "3" ? 3 : s == "4" ? 4 : s == "5" ? 5 : 0;
  }();
  static constexpr int64_t kBulkLongK = 8192;
  // VV_CUDA_GEMV_BULK_MIN_MB (default 64): the weight bytes (MiB; 0: every launch) from which
  // VV_CUDA_GEMV_BULK=5 sends a launch to the bulk kernel.
  int64_t gemv_bulk_min_ = [] {
    const char* v = std::getenv("VV_CUDA_GEMV_BULK_MIN_MB");
    return (v ? std::clamp<int64_t>(std::atoll(v), 0, int64_t{1} << 30) : int64_t{64}) << 20;
  }();
  // Whether d's jobs stream at least gemv_bulk_min_ bytes of weights (VV_CUDA_GEMV_BULK=5).
  bool bulk_big(const cuda::DecodeGemv& d) const {
    int64_t bytes = 0;
    for (int i = 0; i < d.count; ++i) bytes += d.j[i].N * d.K * static_cast<int64_t>(dtype_size(d.wt));
    return bytes >= gemv_bulk_min_;
  }
  // VV_CUDA_DECODE_CHAIN=1 (opt-in; sm_90; sets VV_CUDA_GEMV_BULK=3, and is off where that variable is
  // set to anything else): a run of one-row GEMV launches
  // each reading what the one before wrote (a layer from its o projection to the next layer's q|k|v),
  // with rope_kv_write after them, runs as one persistent kernel with one weight stream
  // (cuda::decode_chain; fuse_chain_at). The same bits as the launches one by one.
  bool chain_ =
      std::getenv("VV_CUDA_DECODE_CHAIN") && std::string(std::getenv("VV_CUDA_DECODE_CHAIN")) == "1";
  unsigned* chain_bar_ = nullptr;  // the chain's grid barrier (2 counters)
  uint64_t* chain_trace_ = nullptr;  // VV_CUDA_CHAIN_TRACE=1: cuda::DecodeChain::trace
  // VV_CUDA_CHAIN_ATTN=1 (with the chain): a one-row step's SIMT decode attention becomes the chain's
  // first phase, so a layer (attention to the next layer's rope) is one launch.
  bool chain_attn_ =
      std::getenv("VV_CUDA_CHAIN_ATTN") && std::string(std::getenv("VV_CUDA_CHAIN_ATTN")) == "1";
  // VV_CUDA_CONV_GEMM (default on; =0 off): bf16 mode, GEMMs of f32 rows (the encoders' strided
  // convs: overlapping rows) by bf16 weights with N ∈ {32, 64, 128} and at least kConvGemmMinRows rows
  // run on cuda::conv_gemm, which rounds a's values to bf16 as it loads them instead of packing them
  // first. A row's bits do not depend on the row count.
  bool conv_gemm_ =
      !(std::getenv("VV_CUDA_CONV_GEMM") && std::string(std::getenv("VV_CUDA_CONV_GEMM")) == "0");
  static constexpr int64_t kConvGemmMinRows = 2048;
  // cuda::DecodeGemv::pair_rows (the norm + q/k/v GEMV two rows a warp); VV_CUDA_GEMV_PAIR=0: off.
  bool gemv_pair_ =
      !(std::getenv("VV_CUDA_GEMV_PAIR") && std::string(std::getenv("VV_CUDA_GEMV_PAIR")) == "0");
  // VV_CUDA_GEMV_NORM_LONE: the final norm and the LM head in one GEMV launch with the norm prologue on the
  // instance compiled for 4 blocks an SM (4, the default since session 33; DecodeGemv::min_blocks), on the
  // prologue's own instance of 3 (1), or as two launches (0). See fuse_gemv_at.
  int gemv_norm_lone_ = [] {
    const char* e = std::getenv("VV_CUDA_GEMV_NORM_LONE");
    const std::string v(e ? e : "");
    return v == "0" ? 0 : v == "1" ? 1 : 4;
  }();
  // cuda::DecodeGemv::balance (the default since session 33); VV_CUDA_GEMV_BALANCE=0 turns it off.
  bool gemv_balance_ =
      !(std::getenv("VV_CUDA_GEMV_BALANCE") && std::string(std::getenv("VV_CUDA_GEMV_BALANCE")) == "0");
  // VV_CUDA_L2_PREFETCH: 0 (default) off, 1 or 2 (prefetch_before_attention).
  int l2_prefetch_ = [] {
    const char* e = std::getenv("VV_CUDA_L2_PREFETCH");
    const std::string v(e ? e : "");
    return v == "1" ? 1 : v == "2" ? 2 : 0;
  }();
  std::map<PlanKey, Plan> plans_;
  std::map<std::pair<float, int>, float*> inv_freq_;
  cudaStream_t copy_stream_ = nullptr;  // copy_async (made on first use)
  cudaEvent_t lane_event_ = nullptr;    // wait_for (made on first use)
  CudaBackend* lane_parent_ = nullptr;  // the backend this one is a lane of (it outlives the lane)
  // make_lane gives a second stream unless VV_CUDA_LANES=0 (read at creation).
  bool lanes_ = !(std::getenv("VV_CUDA_LANES") && std::string(std::getenv("VV_CUDA_LANES")) == "0");
  CudaCompute requested_compute_ = CudaCompute::kF32;  // as created (compute_ may fall back to f32)
  cudaEvent_t copy_ready_ = nullptr;
  std::array<cudaEvent_t, 16> copy_done_{};
  uint64_t next_copy_ = 0;
  std::string first_error_;
  std::string profile_env_ = std::getenv("VV_CUDA_PROFILE") ? std::getenv("VV_CUDA_PROFILE") : "";
  bool profiling_ = profile_env_ == "1" || profile_env_ == "2";
  bool profile_shapes_ = profile_env_ == "2";
  std::string prof_suffix_;  // appended to the next timed op's label (VV_CUDA_PROFILE=2: a GEMM's shape)
  cudaEvent_t ev0_ = nullptr, ev1_ = nullptr;
  // VV_CUDA_GRAPHS=0 launches every op at once (no recording, no fusion, no graphs); profiling
  // records and fuses but launches without graphs.
  bool use_graphs_ = !profiling_ && !(std::getenv("VV_CUDA_GRAPHS") && std::string(std::getenv("VV_CUDA_GRAPHS")) == "0");
  // Profiling keeps recording (and fusing) without graphs, so its table shows the fused kernels.
  bool record_ = !(std::getenv("VV_CUDA_GRAPHS") && std::string(std::getenv("VV_CUDA_GRAPHS")) == "0");
  // VV_CUDA_SWIGLU_EPILOGUE=0: gate_up and silu_mul stay two launches (the paired-row GEMV reads two
  // weight streams per warp).
  bool swiglu_epilogue_ =
      !(std::getenv("VV_CUDA_SWIGLU_EPILOGUE") && std::string(std::getenv("VV_CUDA_SWIGLU_EPILOGUE")) == "0");
  // The flash attention block's form (cuda::FlashForm), set at creation (flash_form_from_env): wgfl on
  // sm_90 (H200, session 13: a 4K-chunk launch 222 µs against wgf's 285; session 12: wgf 286, narrow
  // 368, wg 322, wgp 333), the narrow form elsewhere. VV_CUDA_FLASH_QV=128 / 128x2 measured within 2 % of
  // narrow (session 11).
  cuda::FlashForm flash_form_ = cuda::FlashForm::kNarrow;
  // The encoders' FFN branch on cuBLASLt (conv_ffn_lt) from VV_CUDA_FFN_LT_MIN channels up (default
  // kFfnLtMin); VV_CUDA_FFN_LT=0 turns it off. One line on stderr the first time no algorithm takes it.
  bool ffn_lt_warned_ = false;
  bool ffn_lt_ = !(std::getenv("VV_CUDA_FFN_LT") && std::string(std::getenv("VV_CUDA_FFN_LT")) == "0");
  int64_t ffn_lt_min_ =
      std::getenv("VV_CUDA_FFN_LT_MIN") ? std::atoll(std::getenv("VV_CUDA_FFN_LT_MIN")) : kFfnLtMin;
  // The encoders' 128- and 256-channel FFNs (stages 2 and 3) on wgmma (cuda::conv_ffn_wg; sm_90 only)
  // instead of the mma.sync kernel and cuBLASLt; VV_CUDA_FFN_WG=0 turns it off (A/B).
  bool ffn_wg_ = !(std::getenv("VV_CUDA_FFN_WG") && std::string(std::getenv("VV_CUDA_FFN_WG")) == "0");
  // VV_CUDA_ATTN_LEAN=1 (opt-in until run on a GPU): cuda::decode_attention's `lean`.
  bool attn_lean_ = std::getenv("VV_CUDA_ATTN_LEAN") && std::string(std::getenv("VV_CUDA_ATTN_LEAN")) == "1";
  // cuda::decode_attention's `wide_merge` (the SIMT kernel's last block loads 8 splits for all of a
  // thread's outputs at once, not one output at a time); VV_CUDA_ATTN_WIDE_MERGE=0 turns it off (A/B).
  bool attn_wide_merge_ =
      !(std::getenv("VV_CUDA_ATTN_WIDE_MERGE") && std::string(std::getenv("VV_CUDA_ATTN_WIDE_MERGE")) == "0");
  // The fused SIMT decode attention (one-row bf16 steps) loads its block table's slots and its first
  // round's old K and V rows before the PDL wait (DecodeRope::pre); VV_CUDA_ATTN_PRE=0: after it.
  bool attn_pre_ = !(std::getenv("VV_CUDA_ATTN_PRE") && std::string(std::getenv("VV_CUDA_ATTN_PRE")) == "0");
  // With attn_pre_: the rotation's cosines and sines before the PDL wait too, and the new key's rows to the
  // block's scores through shared memory (DecodeRope::trig_pre); VV_CUDA_ATTN_TRIG_PRE=0: neither (A/B).
  bool attn_trig_pre_ =
      !(std::getenv("VV_CUDA_ATTN_TRIG_PRE") && std::string(std::getenv("VV_CUDA_ATTN_TRIG_PRE")) == "0");
  // DecodeRope::xpose (the butterfly's kernel); VV_CUDA_ATTN_XPOSE=0: the one before (A/B).
  bool attn_xpose_ =
      !(std::getenv("VV_CUDA_ATTN_XPOSE") && std::string(std::getenv("VV_CUDA_ATTN_XPOSE")) == "0");
  // cuda::plan_decode_attention's `one_wave`; VV_CUDA_ATTN_WAVE=0 turns it off (A/B).
  bool attn_wave_ =
      !(std::getenv("VV_CUDA_ATTN_WAVE") && std::string(std::getenv("VV_CUDA_ATTN_WAVE")) == "0");
  // DecodeRope::pipe (the default since session 30; VV_CUDA_ATTN_PIPE=0 turns it off).
  bool attn_pipe_ =
      !(std::getenv("VV_CUDA_ATTN_PIPE") && std::string(std::getenv("VV_CUDA_ATTN_PIPE")) == "0");
  // VV_CUDA_ATTN_L2PF=1 or 2 (opt-in): DecodeRope::kv_prefetch (1: before the PDL wait, 2: after it).
  int attn_kv_prefetch_ = [] {
    const char* e = std::getenv("VV_CUDA_ATTN_L2PF");
    const std::string v = e ? e : "";
    return v == "1" ? 1 : v == "2" ? 2 : 0;
  }();
  // DecodeRope::early_merge (with xpose; the default since session 29); VV_CUDA_ATTN_MERGE_EARLY=0: the
  // wide merge (A/B).
  bool attn_early_merge_ = !(std::getenv("VV_CUDA_ATTN_MERGE_EARLY") &&
                             std::string(std::getenv("VV_CUDA_ATTN_MERGE_EARLY")) == "0");
  // VV_CUDA_ATTN_STAMPS=1 (a probe): the fused SIMT decode attention stamps its blocks' stages
  // (cuda::attn_stamps_take); the sink is allocated in create.
  cuda::AttnStamp* stamp_recs_ = nullptr;
  unsigned* stamp_count_ = nullptr;
  unsigned stamp_cap_ = 0;
  // The encoders' stage-0 and stage-1 blocks (and stage 2's with the wgmma FFN) as one kernel each
  // (conv_block); VV_CUDA_ENC_BLOCK=0 turns it off (A/B).
  bool enc_block_ =
      !(std::getenv("VV_CUDA_ENC_BLOCK") && std::string(std::getenv("VV_CUDA_ENC_BLOCK")) == "0");
  // The prefill MLP through bf16 intermediates (fuse_mlp_at); VV_CUDA_MLP_FUSE=0 turns it off (A/B).
  bool mlp_fuse_ = !(std::getenv("VV_CUDA_MLP_FUSE") && std::string(std::getenv("VV_CUDA_MLP_FUSE")) == "0");
  // VV_CUDA_MLP_FUSE_ROWS: the fewest rows the MLP fusion takes (default 2: batched decode steps and
  // prompt chunks; H200, session 12: 64/128-row decode steps 5.77/6.52 ms against 5.87/6.75 with 256).
  // Below 2 it is 2 (one row: the GEMV path).
  int64_t mlp_fuse_rows_ = std::max<int64_t>(
      2, std::getenv("VV_CUDA_MLP_FUSE_ROWS") ? std::atoll(std::getenv("VV_CUDA_MLP_FUSE_ROWS")) : 2);
  // VV_CUDA_DECODE_GEMV=0: one-row GEMMs on cuda_ops' skinny GEMV (see fuse_skinny_at).
  bool decode_gemv_ =
      !(std::getenv("VV_CUDA_DECODE_GEMV") && std::string(std::getenv("VV_CUDA_DECODE_GEMV")) == "0");
  void* argmax_ws_ = nullptr;
  void* dec_attn_ws_ = nullptr;
  // VV_CUDA_DECODE_ATTN: mma (0), simt (1), auto (2, default); see decode_mma_takes.
  bool deterministic_ = false;  // CudaBackendOptions::deterministic
  int decode_attn_mode_ = [] {
    const char* e = std::getenv("VV_CUDA_DECODE_ATTN");
    const std::string v = e ? e : "";
    return v == "simt" ? 1 : v == "mma" ? 0 : 2;
  }();
  size_t dec_attn_ws_bytes_ = 0;
  size_t argmax_ws_bytes_ = 0;
  std::vector<std::function<void()>> pending_;
  std::vector<OpRec> pending_rec_;
  std::string sig_;
  std::map<std::string, GraphEntry> graphs_;
  std::unordered_map<uint64_t, cudaGraphExec_t> graph_by_id_;  // the captured graphs by handle
  uint64_t next_graph_id_ = 1;
  uint64_t last_handle_ = 0;  // the graph the last flush launched (0: it ran without one)
  // replay_flush's handles (a decode step launched without recording its ops again);
  // VV_CUDA_STEP_REPLAY=0 turns them off (every step records its ops and is looked up by signature).
  bool step_replay_ =
      !(std::getenv("VV_CUDA_STEP_REPLAY") && std::string(std::getenv("VV_CUDA_STEP_REPLAY")) == "0");
  bool capturing_ = false, capture_broken_ = false;
  // bf16 GEMM operands written by the rms_norm/silu_mul before them (fuse_lt_operand_at); on by
  // default (H200, 7B, full steps at 8bc5686: 64 rows 7.915 -> 7.788 ms, 128 rows 9.711 -> 9.341 ms;
  // the same bits, gpu test CudaLtOperandFusion). VV_CUDA_LT_FUSE=0 turns it off.
  bool lt_fuse_ = !(std::getenv("VV_CUDA_LT_FUSE") && std::string(std::getenv("VV_CUDA_LT_FUSE")) == "0");
  // An rms_norm fused with its GEMMs writes only their bf16 pack, not its f32 output, where the caller
  // discards that right after them (the default since session 33); VV_CUDA_NORM_DROP=0 writes it.
  bool norm_drop_ =
      !(std::getenv("VV_CUDA_NORM_DROP") && std::string(std::getenv("VV_CUDA_NORM_DROP")) == "0");
  // The tensor-core decode attention's variant where a VV_CUDA_MMA_DECODE* variable was set when this
  // backend was created (cuda::mma_decode_env_set); empty: the process-wide cuda::mma_decode_config(),
  // which tests change with cuda::set_mma_decode_config. So two backends of one process can differ
  // (cuda_decode_bench --ab).
  std::optional<cuda::MmaDecodeConfig> mma_cfg_ =
      cuda::mma_decode_env_set() ? std::optional<cuda::MmaDecodeConfig>(cuda::mma_decode_config_from_env())
                                 : std::nullopt;
  const cuda::MmaDecodeConfig* mma_cfg_ptr() const { return mma_cfg_ ? &*mma_cfg_ : nullptr; }
  cuda::MmaDecodeConfig mma_cfg() const { return mma_cfg_ ? *mma_cfg_ : cuda::mma_decode_config(); }
  // fuse_attn_operand_at (the default since session 30; VV_CUDA_ATTN_PACK=0 turns it off).
  bool attn_pack_ =
      !(std::getenv("VV_CUDA_ATTN_PACK") && std::string(std::getenv("VV_CUDA_ATTN_PACK")) == "0");
  // A decode step's rope and kv_write inside the decode attention (fuse_rope_attn_at; the same bits);
  // VV_CUDA_ROPE_ATTN=0 turns it off. The default since session 22: engine curve +3.8 % / +2.2 % at
  // 64 / 128 requests on the H100.
  bool rope_attn_ =
      !(std::getenv("VV_CUDA_ROPE_ATTN") && std::string(std::getenv("VV_CUDA_ROPE_ATTN")) == "0");
  // q's rope inside the flash kernel's wgmma forms (fuse_rope_flash_at); VV_CUDA_ROPE_FLASH=0 turns it
  // off (A/B).
  bool rope_flash_ =
      !(std::getenv("VV_CUDA_ROPE_FLASH") && std::string(std::getenv("VV_CUDA_ROPE_FLASH")) == "0");
  struct GraphStats {
    int64_t replayed = 0, captured = 0, first = 0, ungraphed = 0, clears = 0;
    int64_t by_handle = 0;  // of the replays, those launched by replay_flush (no ops recorded)
    double captured_ms = 0, first_ms = 0, ungraphed_ms = 0, replayed_ms = 0;  // host time of those flushes
    int64_t lt_plans = 0;   // cuBLASLt plans made for new GEMM shapes (heuristic queries)
    double lt_plan_ms = 0;  // host time they took
  } gstat_;
  std::map<std::string, std::pair<double, int64_t>> prof_;  // op -> (ms, calls)
};

OpTimer::OpTimer(CudaBackend* b, const char* name) : be(b), op(name) {
  if (!be->profiling_) return;
  if (!be->ev0_) {
    cudaEventCreate(&be->ev0_);
    cudaEventCreate(&be->ev1_);
  }
  cudaEventRecord(be->ev0_, be->stream_);
}

OpTimer::~OpTimer() {
  if (!be->profiling_) return;
  cudaEventRecord(be->ev1_, be->stream_);
  cudaEventSynchronize(be->ev1_);
  float ms = 0;
  cudaEventElapsedTime(&ms, be->ev0_, be->ev1_);
  auto& e = be->prof_[be->prof_suffix_.empty() ? std::string(op) : op + be->prof_suffix_];
  be->prof_suffix_.clear();
  e.first += ms;
  e.second += 1;
}

void release_device(void* p, size_t bytes) {
  // Recorded ops may still use this buffer: they are issued before the free's fences are recorded.
  CudaBackend::flush_this_thread();
  const int device = cuda::cache_free(p);
  if (device >= 0 && device < kMaxDevices) g_live[device].fetch_sub(bytes);
}

void release_pinned(void* p, size_t) {
  CudaBackend::flush_this_thread();  // a copy_async may still read it: cudaFreeHost waits for it
  cudaFreeHost(p);
}

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      r.reason = std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")";
      cudaGetLastError();  // clear it: it must not surface as a later op's error
    } else if (r.count == 0) {
      r.reason = "no CUDA device";
    }
    return r;
  }();
  return p;
}

}  // namespace

int cuda_device_count() { return probe().count; }

int cublaslt_version(std::string* why) {
  const cuda::CublasLtApi* api = cuda::cublaslt();
  if (!api) {
    if (why) *why = cuda::cublaslt_error();
    return 0;
  }
  return static_cast<int>(api->get_version());
}

std::string cuda_runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
}

std::string cuda_profile_report(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  return c ? c->take_profile_report() : std::string();
}
std::string cuda_unavailable_reason() { return probe().reason; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  return CudaBackend::create(options);
}

}  // namespace vv
