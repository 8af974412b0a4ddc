// A device error (Backend::device_error: a launch or library call that failed, as the CUDA backend
// records it) fails the runner's step with the device named, instead of returning ids computed
// from work that cannot be trusted; the engine loop then ends the request with an engine error. The
// device here is the CPU backend behind a wrapper that reports an injected error once a set number
// of GEMMs has run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/runner/cpu_runner.h"
#include "engine/runner/runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {
namespace {

class FaultAfterGemms final : public Backend {
 public:
  FaultAfterGemms(std::unique_ptr<Backend> inner, long fault_after)
      : in_(std::move(inner)), after_(fault_after) {}
  std::string device_error() const override {
    return gemms_.load() > after_ ? "injected: an illegal memory access was encountered" : "";
  }
  long gemms() const { return gemms_.load(); }

  std::string name() const override { return "faulty " + in_->name(); }
  Buffer allocate(size_t bytes) override { return in_->allocate(bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { in_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { in_->download(dst, src, bytes); }
  void synchronize() override { in_->synchronize(); }
  size_t allocated_bytes() const override { return in_->allocated_bytes(); }
  size_t peak_allocated_bytes() const override { return in_->peak_allocated_bytes(); }
  void reset_peak() override { in_->reset_peak(); }
  bool device_memory(size_t* f, size_t* t) override { return in_->device_memory(f, t); }
  Buffer allocate_host(size_t bytes) override { return in_->allocate_host(bytes); }
  uint64_t copy_async(void* dst, const void* src, size_t bytes) override {
    return in_->copy_async(dst, src, bytes);
  }
  void wait_copy(uint64_t ticket) override { in_->wait_copy(ticket); }
  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    ++gemms_;
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
  void silu_mul(const Tensor& gu, Tensor& out) override { in_->silu_mul(gu, out); }
  void embedding(const Tensor& t, const Tensor& ids, Tensor& out) override { in_->embedding(t, ids, out); }
  void copy(const Tensor& src, Tensor& dst) override { in_->copy(src, dst); }
  void rope(Tensor& x, const Tensor& pos, int heads, int hd, float theta) override {
    in_->rope(x, pos, heads, hd, theta);
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

 private:
  std::unique_ptr<Backend> in_;
  long after_;
  std::atomic<long> gemms_{0};
};

RunnerOptions fault_options() {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 512;
  o.max_seqs = 4;
  return o;
}

// The golden case's audio → greedy ids on a runner whose backend faults after `fault_after` GEMMs;
// `gemms` gets how many ran.
Result<std::vector<TokenId>> faulty_job(const Checkpoint& ckpt, const GoldenCase& gc, long fault_after,
                                        long& gemms) {
  auto be = std::make_unique<FaultAfterGemms>(make_cpu_backend(), fault_after);
  FaultAfterGemms* fb = be.get();
  VV_ASSIGN_OR_RETURN(auto runner, Runner::create(std::move(be), ckpt, fault_options()));
  const std::vector<float>& x = gc.tensor("input_values").data;
  VV_ASSIGN_OR_RETURN(SpeechRows speech, runner->encode(x.data(), static_cast<int64_t>(x.size())));
  GreedyRequest q;
  q.prompt = gc.prompt_ids();
  q.speech = &speech.rows.t;
  q.max_new_tokens = static_cast<int>(gc.generated_ids().size());
  auto ids = runner->generate_greedy(q);
  gemms = fb->gemms();
  return ids;
}

TEST(DeviceError, FailsTheStepNamingTheDeviceInsteadOfReturningIds) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();

  // No fault: the wrapper changes nothing (the golden ids); count the GEMMs of the whole job.
  long total = 0;
  auto clean = faulty_job(**ckpt, gc, 1L << 40, total);
  ASSERT_TRUE(clean.is_ok()) << clean.status().to_string();
  EXPECT_EQ(*clean, gc.generated_ids());
  ASSERT_GT(total, 100);
  // A fault during the encoder's GEMMs: the first decoder step reports it; a fault in the middle
  // of decoding: the step it happened in does.
  for (long after : {3L, total / 2}) {
    long ran = 0;
    auto ids = faulty_job(**ckpt, gc, after, ran);
    ASSERT_FALSE(ids.is_ok()) << "after " << after << " GEMMs (" << ran << " ran): ids returned";
    EXPECT_EQ(ids.status().code(), StatusCode::kInternal);
    EXPECT_NE(ids.status().message().find("faulty cpu"), std::string::npos) << ids.status().message();
    EXPECT_NE(ids.status().message().find("illegal memory access"), std::string::npos)
        << ids.status().message();
    EXPECT_GT(ran, after);
  }
}

}  // namespace
}  // namespace vv::test
