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
#include "kernels/forwarding_backend.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {
namespace {

class FaultAfterGemms final : public ForwardingBackend {
 public:
  FaultAfterGemms(std::unique_ptr<Backend> inner, long fault_after)
      : ForwardingBackend(std::move(inner)), after_(fault_after) {}
  std::string device_error() const override {
    return gemms_.load() > after_ ? "injected: an illegal memory access was encountered" : "";
  }
  long gemms() const { return gemms_.load(); }

  std::string name() const override { return "faulty " + ForwardingBackend::name(); }
  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    ++gemms_;
    inner().gemm(a, w, bias, out, ep);
  }

 private:
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
