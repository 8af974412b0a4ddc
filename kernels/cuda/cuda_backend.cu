// CudaBackend: device memory, one non-blocking stream, and the dispatch of each op to its kernel
// (cuda_ops.cu) or to cuBLASLt. GEMM routing: few rows (decode) → the bandwidth-bound skinny
// kernel with f32 activations; many rows → cuBLASLt on the tensor cores (kBF16 compute, activations
// rounded to the weight's 16-bit type, f32 accumulation, bias and residual in cuBLASLt's epilogue)
// or the f32 SIMT GEMM (kF32 compute, which must match the CPU reference to f32 rounding).
// CUDA errors are sticky: the first one is kept (status()) and printed once; later ops still run.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.cuh"

namespace vv {
namespace {

// Rows up to which a GEMM takes the skinny path. In f32 mode the SIMT GEMM re-reads weights per
// 64-row tile anyway, so the skinny path (which re-reads them from cache per 8 rows) wins longer.
constexpr int64_t kSkinnyRowsBf16 = 16;
constexpr int64_t kSkinnyRowsF32 = 64;

void release_device(void* p, size_t) { cudaFree(p); }

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& [key, plan] : plans_) destroy_plan(plan);
    if (lt_) cublasLtDestroy(lt_);
    if (lt_ws_) cudaFree(lt_ws_);
    if (pack_) cudaFree(pack_);
    for (auto& [key, p] : inv_freq_) cudaFree(p);
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
    if (cudaSetDevice(o.device) != cudaSuccess) return internal_error("CUDA backend: cudaSetDevice failed");
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, o.device);
    b->device_name_ = prop.name;
    if (cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking) != cudaSuccess) {
      return internal_error("CUDA backend: cannot create a stream on device " + std::to_string(o.device));
    }
    if (cublasLtCreate(&b->lt_) != CUBLAS_STATUS_SUCCESS) return internal_error("CUDA backend: cublasLtCreate failed");
    b->lt_ws_bytes_ = 32u << 20;
    if (cudaMalloc(&b->lt_ws_, b->lt_ws_bytes_) != cudaSuccess) {
      return internal_error("CUDA backend: cannot allocate the cuBLASLt workspace");
    }
    return std::unique_ptr<Backend>(std::move(b));
  }

  std::string name() const override {
    return "cuda:" + std::to_string(device_) + " (" + device_name_ + ", " +
           (compute_ == CudaCompute::kBF16 ? "bf16" : "f32") + " GEMMs)";
  }

  Buffer allocate(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    if (!check(cudaMalloc(&p, n), "cudaMalloc")) return Buffer();
    check(cudaMemsetAsync(p, 0, n, stream_), "cudaMemsetAsync");
    return Buffer(p, bytes, &release_device);
  }
  // Pageable sources are staged by the driver before the call returns, so the host buffer may be
  // reused at once; the copy itself is ordered on the stream.
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download sync");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "synchronize"); }

  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    const int64_t M = out.rows();
    if (M == 0 || out.cols() == 0) return;
    const float* bp = bias && bias->data ? bias->ptr<const float>() : nullptr;
    const bool half_w = w.dtype == DType::kBF16 || w.dtype == DType::kF16;
    if (M <= (compute_ == CudaCompute::kBF16 ? kSkinnyRowsBf16 : kSkinnyRowsF32)) {
      cuda::gemv(a, w, bp, out, ep, stream_);
    } else if (compute_ == CudaCompute::kBF16 && half_w) {
      gemm_lt(a, w, bp, out, ep);
    } else {
      cuda::gemm_f32(a, w, bp, out, ep, stream_);
    }
    launched("gemm");
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    cuda::rms_norm(x, weight, eps, out, stream_);
    launched("rms_norm");
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                               Tensor& out) override {
    cuda::depthwise_conv1d_causal(x, history, w, bias, out, stream_);
    launched("depthwise_conv1d_causal");
  }
  void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) override {
    cuda::add_scaled(x, scale, y, stream_);
    launched("add_scaled");
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    cuda::add(a, b, out, stream_);
    launched("add");
  }
  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    cuda::silu_mul(gate_up, out, stream_);
    launched("silu_mul");
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    cuda::embedding(table, ids, out, stream_);
    launched("embedding");
  }
  void copy(const Tensor& src, Tensor& dst) override {
    if (src.rows() == 0 || src.cols() == 0) return;
    const size_t es = dtype_size(src.dtype);
    check(cudaMemcpy2DAsync(dst.data, dst.row_stride() * es, src.data, src.row_stride() * es, src.cols() * es,
                            src.rows(), cudaMemcpyDeviceToDevice, stream_),
          "copy");
  }
  void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) override {
    cuda::rope(x, pos, heads, head_dim, inv_freq(theta, head_dim), stream_);
    launched("rope");
  }
  void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                const AttentionShape& shape) override {
    cuda::kv_write(k, v, rows, cache, shape, stream_);
    launched("kv_write");
  }
  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out) override {
    cuda::paged_attention(q, rows, cache, shape, out, stream_);
    launched("paged_attention");
  }
  void argmax(const Tensor& logits, Tensor& out) override {
    cuda::argmax(logits, out, stream_);
    launched("argmax");
  }

 private:
  CudaBackend() = default;

  bool check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    if (first_error_.empty()) {
      first_error_ = std::string(what) + ": " + cudaGetErrorString(e);
      std::fprintf(stderr, "vibevoice: CUDA error on device %d: %s\n", device_, first_error_.c_str());
    }
    return false;
  }
  void launched(const char* op) { check(cudaGetLastError(), op); }

  // 1/θ^(2i/d) per frequency, computed on the host exactly as the reference does, uploaded once
  // per (θ, head_dim): later calls (the decode path) only look it up.
  const float* inv_freq(float theta, int head_dim) {
    const auto key = std::make_pair(theta, head_dim);
    auto it = inv_freq_.find(key);
    if (it != inv_freq_.end()) return it->second;
    const int half = head_dim / 2;
    std::vector<float> h(half);
    for (int i = 0; i < half; ++i) h[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    float* d = nullptr;
    check(cudaMalloc(&d, sizeof(float) * std::max(half, 1)), "cudaMalloc inv_freq");
    check(cudaMemcpy(d, h.data(), sizeof(float) * half, cudaMemcpyHostToDevice), "upload inv_freq");
    inv_freq_[key] = d;
    return d;
  }

  // ---- cuBLASLt ------------------------------------------------------------------------------
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t wl = nullptr, al = nullptr, dl = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, int>;

  static void destroy_plan(Plan& p) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.wl) cublasLtMatrixLayoutDestroy(p.wl);
    if (p.al) cublasLtMatrixLayoutDestroy(p.al);
    if (p.dl) cublasLtMatrixLayoutDestroy(p.dl);
  }

  // Column-major view: Dᵀ[N,M] = W[N,K] · Aᵀ: W is a K×N column-major matrix (ld K) taken
  // transposed, A a K×M one (ld K, packed), D an N×M one (ld = out's row stride).
  Plan* plan_for(int64_t M, int64_t N, int64_t K, int64_t ldd, DType wt, bool bias, int ep) {
    const PlanKey key{M, N, K, ldd, static_cast<int>(wt), bias, ep};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.ok ? &it->second : nullptr;
    Plan& p = plans_[key];
    const cudaDataType_t in = wt == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    bool ok = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    ok = ok && cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)) == 0;
    ok = ok && cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)) == 0;
    if (bias) {
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
      ok = ok && cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)) == 0;
      const cudaDataType_t bt = CUDA_R_32F;
      ok = ok && cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)) == 0;
    }
    ok = ok && cublasLtMatrixLayoutCreate(&p.wl, in, K, N, K) == 0;
    ok = ok && cublasLtMatrixLayoutCreate(&p.al, in, K, M, K) == 0;
    ok = ok && cublasLtMatrixLayoutCreate(&p.dl, CUDA_R_32F, N, M, ldd) == 0;
    cublasLtMatmulPreference_t pref = nullptr;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0;
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_ws_bytes_,
                                                    sizeof(lt_ws_bytes_)) == 0;
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    ok = ok && cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.wl, p.al, p.dl, p.dl, pref, 1, &res, &found) == 0 &&
         found > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p.algo = res.algo;
    p.ok = ok;
    return ok ? &p : nullptr;
  }

  void gemm_lt(const Tensor& a, const Tensor& w, const float* bias, Tensor& out, Epilogue ep) {
    const int64_t M = out.rows(), N = out.cols(), K = a.cols();
    const size_t need = static_cast<size_t>(M * K) * 2;
    if (need > pack_bytes_) {  // grows with the largest prefill chunk; never on the decode path
      if (pack_) cudaFree(pack_);
      pack_ = nullptr;
      pack_bytes_ = 0;
      if (!check(cudaMalloc(&pack_, need), "cudaMalloc GEMM operand")) return;
      pack_bytes_ = need;
    }
    cuda::pack_rows_half(a, pack_, w.dtype, stream_);
    Plan* p = plan_for(M, N, K, out.row_stride(), w.dtype, bias != nullptr, static_cast<int>(ep));
    if (!p) {  // no cuBLASLt algorithm for this shape/alignment: the SIMT path is always valid
      cuda::gemm_f32(a, w, bias, out, ep, stream_);
      return;
    }
    if (bias) cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    const float alpha = 1.0f, beta = ep == Epilogue::kAddResidual ? 1.0f : 0.0f;
    const cublasStatus_t st = cublasLtMatmul(lt_, p->desc, &alpha, w.data, p->wl, pack_, p->al, &beta, out.data, p->dl,
                                             out.data, p->dl, &p->algo, lt_ws_, lt_ws_bytes_, stream_);
    if (st != CUBLAS_STATUS_SUCCESS && first_error_.empty()) {
      first_error_ = "cublasLtMatmul failed with status " + std::to_string(static_cast<int>(st));
      std::fprintf(stderr, "vibevoice: %s\n", first_error_.c_str());
    }
    if (ep == Epilogue::kGelu) cuda::gelu_inplace(out, stream_);  // cuBLASLt's GELU is the tanh form
  }

  int device_ = 0;
  CudaCompute compute_ = CudaCompute::kF32;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_ws_ = nullptr;
  size_t lt_ws_bytes_ = 0;
  void* pack_ = nullptr;
  size_t pack_bytes_ = 0;
  std::map<PlanKey, Plan> plans_;
  std::map<std::pair<float, int>, float*> inv_freq_;
  std::string first_error_;
};

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
std::string cuda_unavailable_reason() { return probe().reason; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  return CudaBackend::create(options);
}

}  // namespace vv
