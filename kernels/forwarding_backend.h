// A Backend that passes every call to another one. Wrappers (op counters, fault injectors, test
// doubles) derive from it and override only what they change, so an op added to the op set reaches
// the wrapped device through all of them (a wrapper that listed the ops itself ran the encoders'
// fused branches as their unfused defaults when those were added).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace vv {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

  std::string name() const override { return in_->name(); }
  std::string device_error() const override { return in_->device_error(); }
  Buffer allocate(size_t bytes) override { return in_->allocate(bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { in_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { in_->download(dst, src, bytes); }
  void synchronize() override { in_->synchronize(); }
  size_t allocated_bytes() const override { return in_->allocated_bytes(); }
  size_t peak_allocated_bytes() const override { return in_->peak_allocated_bytes(); }
  void reset_peak() override { in_->reset_peak(); }
  bool device_memory(size_t* free_bytes, size_t* total_bytes) override {
    return in_->device_memory(free_bytes, total_bytes);
  }
  Buffer allocate_host(size_t bytes) override { return in_->allocate_host(bytes); }
  uint64_t copy_async(void* dst, const void* src, size_t bytes) override {
    return in_->copy_async(dst, src, bytes);
  }
  void wait_copy(uint64_t ticket) override { in_->wait_copy(ticket); }
  // No lane of its own (a wrapper that wants one wraps the inner backend's); the order between two
  // wrappers is the order between what they wrap.
  void wait_for(Backend& other) override {
    auto* f = dynamic_cast<ForwardingBackend*>(&other);
    in_->wait_for(f ? f->inner() : other);
  }
  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    in_->gemm(a, w, bias, out, ep);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    in_->rms_norm(x, w, eps, out);
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& h, const Tensor& w, const Tensor& b,
                               Tensor& out) override {
    in_->depthwise_conv1d_causal(x, h, w, b, out);
  }
  void add_scaled(Tensor& x, const Tensor& s, const Tensor& y) override { in_->add_scaled(x, s, y); }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override { in_->add(a, b, out); }
  void conv_mixer(Tensor& x, const Tensor& nw, float eps, const Tensor& h, const Tensor& w, const Tensor& b,
                  const Tensor& g, Tensor& u, Tensor& v) override {
    in_->conv_mixer(x, nw, eps, h, w, b, g, u, v);
  }
  void conv_ffn(Tensor& x, const Tensor& nw, float eps, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2, const Tensor& g, Tensor& u, Tensor& v, Tensor& h) override {
    in_->conv_ffn(x, nw, eps, w1, b1, w2, b2, g, u, v, h);
  }
  bool conv_block(Tensor& x, float eps, const Tensor& history, const ConvBlockWeights& wt, Tensor& u,
                  Tensor& v, Tensor& h) override {
    return in_->conv_block(x, eps, history, wt, u, v, h);
  }
  void silu_mul(const Tensor& gu, Tensor& out) override { in_->silu_mul(gu, out); }
  void discard(const Tensor& t) override { in_->discard(t); }
  void embedding(const Tensor& t, const Tensor& ids, Tensor& out) override { in_->embedding(t, ids, out); }
  void copy(const Tensor& src, Tensor& dst) override { in_->copy(src, dst); }
  void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) override {
    in_->rope(x, pos, heads, head_dim, theta);
  }
  void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
                const AttentionShape& shape) override {
    in_->kv_write(k, v, rows, cache, shape);
  }
  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                       const AttentionShape& shape, Tensor& out) override {
    in_->paged_attention(q, rows, cache, shape, out);
  }
  void argmax(const Tensor& logits, Tensor& out) override { in_->argmax(logits, out); }
  void argmax_logprob(const Tensor& logits, Tensor& ids, Tensor& logprob) override {
    in_->argmax_logprob(logits, ids, logprob);
  }

 protected:
  Backend& inner() { return *in_; }

 private:
  std::unique_ptr<Backend> in_;
};

}  // namespace vv
