// CpuBackend: checks nothing (the model binds shapes once), splits each op into independent
// output slices on the thread pool, and runs each slice on the chosen ISA's kernel. Slices never
// split a reduction, so every output element is bitwise independent of the thread count.
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/thread_pool.h"

#include <cpuid.h>

namespace vv {
namespace {

using Isa = CpuBackendOptions::Isa;

Isa detect_isa(Isa wanted) {
  __builtin_cpu_init();
  // F16C through CPUID leaf 1 (ECX bit 29): clang 14 does not know the "f16c" feature string.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (wanted == Isa::kScalar) return Isa::kScalar;
  // No AVX-512 kernels yet: an AVX-512 request runs the AVX2 kernels.
  return avx2 ? Isa::kAvx2 : Isa::kScalar;
}

Tensor vec_slice(const Tensor& t, int64_t begin, int64_t count) {
  Tensor s = t;
  s.data = static_cast<char*>(t.data) + begin * static_cast<int64_t>(dtype_size(t.dtype));
  s.shape[0] = count;
  return s;
}

// Rows per task for a row-wise op so that each task touches at least ~16k elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }

// What a CPU backend's Buffers hold (allocated_bytes): each Buffer keeps a reference to its
// backend's counter in a 64-byte header before its data, so one freed after the backend is gone
// still finds it.
struct AllocCounter {
  std::atomic<size_t> live{0}, peak{0};
  std::atomic<int> refs{1};
  void add(size_t n) {
    const size_t now = live.fetch_add(n) + n;
    size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  void unref() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
};
constexpr size_t kHeader = 64;

void release_host(void* p, size_t bytes) {
  char* base = static_cast<char*>(p) - kHeader;
  AllocCounter* c = nullptr;
  std::memcpy(&c, base, sizeof c);
  c->live.fetch_sub(bytes);
  c->unref();
  std::free(base);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, bool pin, Isa isa) : pool_(threads, pin), isa_(isa) {}
  ~CpuBackend() override { counter_->unref(); }

  std::string name() const override {
    const char* isa = isa_ == Isa::kAvx2 ? "cpu-avx2" : "cpu-scalar";
    return std::string(isa) + " (" + std::to_string(pool_.size()) + " threads)";
  }

  Buffer allocate(size_t bytes) override {
    const size_t n = (std::max<size_t>(bytes, 1) + 63) / 64 * 64 + kHeader;
    char* base = static_cast<char*>(cpu::aligned_host_alloc(n));
    if (!base) return Buffer();
    std::memset(base, 0, n);
    counter_->refs.fetch_add(1);
    counter_->add(bytes);
    std::memcpy(base, &counter_, sizeof counter_);
    return Buffer(base + kHeader, bytes, &release_host);
  }
  size_t allocated_bytes() const override { return counter_->live.load(); }
  size_t peak_allocated_bytes() const override { return counter_->peak.load(); }
  void reset_peak() override { counter_->peak.store(counter_->live.load()); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}

  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    if (out.rows() == 0 || out.cols() == 0) return;
    if (isa_ == Isa::kAvx2) {
      avx2::gemm(pool_, a, w, bias, out, ep);
      return;
    }
    const int64_t M = out.rows(), N = out.cols();
    const int64_t nb = 16, mb = 32;
    const int64_t n_tasks = (N + nb - 1) / nb, m_tasks = (M + mb - 1) / mb;
    pool_.parallel_for(n_tasks * m_tasks, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n0 = (t % n_tasks) * nb, m0 = (t / n_tasks) * mb;
        const int64_t nc = std::min(nb, N - n0), mc = std::min(mb, M - m0);
        Tensor as = a.row_slice(m0, mc);
        Tensor ws = w.row_slice(n0, nc);
        Tensor os = out.row_slice(m0, mc).col_slice(n0, nc);
        Tensor bs;
        if (bias && bias->data) bs = vec_slice(*bias, n0, nc);
        ref::gemm(as, ws, bias && bias->data ? &bs : nullptr, os, ep);
      }
    });
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    pool_.parallel_for(x.rows(), row_grain(x.cols()), [&](int64_t b, int64_t e) {
      Tensor o = out.row_slice(b, e - b);
      if (isa_ == Isa::kAvx2) {
        avx2::rms_norm(x.row_slice(b, e - b), weight, eps, o);
      } else {
        ref::rms_norm(x.row_slice(b, e - b), weight, eps, o);
      }
    });
  }

  void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                               Tensor& out) override {
    // Split over channels: each task sees every time step of its channels.
    const int64_t C = x.cols();
    const int64_t cb = 64;
    pool_.parallel_for((C + cb - 1) / cb, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, x.rows())),
                       [&](int64_t b, int64_t e) {
                         const int64_t c0 = b * cb, cc = std::min(C, e * cb) - c0;
                         Tensor hs = history.data ? history.col_slice(c0, cc) : history;
                         Tensor o = out.col_slice(c0, cc);
                         const Tensor bs = bias.data ? vec_slice(bias, c0, cc) : bias;
                         if (isa_ == Isa::kAvx2) {
                           avx2::depthwise_conv1d_causal(x.col_slice(c0, cc), hs, w.row_slice(c0, cc), bs, o);
                         } else {
                           ref::depthwise_conv1d_causal(x.col_slice(c0, cc), hs, w.row_slice(c0, cc), bs, o);
                         }
                       });
  }

  void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) override {
    pool_.parallel_for(x.rows(), row_grain(x.cols()), [&](int64_t b, int64_t e) {
      Tensor xs = x.row_slice(b, e - b);
      if (isa_ == Isa::kAvx2) {
        avx2::add_scaled(xs, scale, y.row_slice(b, e - b));
      } else {
        ref::add_scaled(xs, scale, y.row_slice(b, e - b));
      }
    });
  }

  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    pool_.parallel_for(out.rows(), row_grain(out.cols()), [&](int64_t rb, int64_t re) {
      Tensor o = out.row_slice(rb, re - rb);
      if (isa_ == Isa::kAvx2) {
        avx2::add(a.row_slice(rb, re - rb), b.row_slice(rb, re - rb), o);
      } else {
        ref::add(a.row_slice(rb, re - rb), b.row_slice(rb, re - rb), o);
      }
    });
  }

  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    pool_.parallel_for(out.rows(), row_grain(out.cols()), [&](int64_t b, int64_t e) {
      Tensor o = out.row_slice(b, e - b);
      if (isa_ == Isa::kAvx2) {
        avx2::silu_mul(gate_up.row_slice(b, e - b), o);
      } else {
        ref::silu_mul(gate_up.row_slice(b, e - b), o);
      }
    });
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    pool_.parallel_for(out.rows(), row_grain(out.cols()), [&](int64_t b, int64_t e) {
      Tensor o = out.row_slice(b, e - b);
      ref::embedding(table, vec_slice(ids, b, e - b), o);
    });
  }

  void copy(const Tensor& src, Tensor& dst) override {
    pool_.parallel_for(src.rows(), row_grain(src.cols()), [&](int64_t b, int64_t e) {
      Tensor d = dst.row_slice(b, e - b);
      ref::copy(src.row_slice(b, e - b), d);
    });
  }

  void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) override {
    pool_.parallel_for(x.rows(), row_grain(x.cols()), [&](int64_t b, int64_t e) {
      Tensor xs = x.row_slice(b, e - b);
      ref::rope(xs, vec_slice(pos, b, e - b), heads, head_dim, theta);
    });
  }

  void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                const AttentionShape& shape) override {
    pool_.parallel_for(k.rows(), row_grain(k.cols()), [&](int64_t b, int64_t e) {
      AttentionRows rs = rows;
      rs.row_seq = vec_slice(rows.row_seq, b, e - b);
      rs.row_pos = vec_slice(rows.row_pos, b, e - b);
      ref::kv_write(k.row_slice(b, e - b), v.row_slice(b, e - b), rs, cache, shape);
    });
  }

  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                       Tensor& out) override {
    // Tasks are (row, head) for the reference, (row, kv head) for AVX2, which loads each k/v row
    // once for all the query heads that share it.
    const int64_t per_row = isa_ == Isa::kAvx2 ? shape.kv_heads : shape.heads;
    const int heads_per_task = static_cast<int>(shape.heads / per_row);
    pool_.parallel_for(q.rows() * per_row, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t r = t / per_row;
        const int h = static_cast<int>(t % per_row) * heads_per_task;
        AttentionRows rs = rows;
        rs.row_seq = vec_slice(rows.row_seq, r, 1);
        rs.row_pos = vec_slice(rows.row_pos, r, 1);
        Tensor o = out.row_slice(r, 1);
        if (isa_ == Isa::kAvx2) {
          avx2::paged_attention(q.row_slice(r, 1), rs, cache, shape, o, h, h + heads_per_task);
        } else {
          ref::paged_attention(q.row_slice(r, 1), rs, cache, shape, o, h, h + heads_per_task);
        }
      }
    });
  }

  void argmax_logprob(const Tensor& logits, Tensor& ids, Tensor& logprob) override {
    pool_.parallel_for(logits.rows(), 1, [&](int64_t b, int64_t e) {
      const Tensor l = logits.row_slice(b, e - b);
      Tensor o = vec_slice(ids, b, e - b), p = vec_slice(logprob, b, e - b);
      if (isa_ == Isa::kAvx2) {
        avx2::argmax(l, o);
        avx2::logprob_at(l, o, p);
      } else {
        ref::argmax(l, o);
        ref::logprob_at(l, o, p);
      }
    });
  }
  void argmax(const Tensor& logits, Tensor& out) override {
    pool_.parallel_for(logits.rows(), 1, [&](int64_t b, int64_t e) {
      Tensor o = vec_slice(out, b, e - b);
      if (isa_ == Isa::kAvx2) {
        avx2::argmax(logits.row_slice(b, e - b), o);
      } else {
        ref::argmax(logits.row_slice(b, e - b), o);
      }
    });
  }

 private:
  cpu::ThreadPool pool_;
  Isa isa_;
  AllocCounter* counter_ = new AllocCounter();  // shared with the live Buffers (refs)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(resolve_cpu_threads(options.threads), options.pin, detect_isa(options.isa));
}

}  // namespace vv
