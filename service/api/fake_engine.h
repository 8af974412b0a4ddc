// FakeEngine: a scripted EngineClient for tests and for `VIBEVOICE_TEST_FAKE_ENGINE=1`. Instead of
// running the model it emits Request::forced_ids (the scripted decoder) token by token, or a fixed answer without them (one token per running request
// per step), through the same TranscriptAssembler as the real loop, with the engine's admission
// (running slots, waiting queue), cancellation within one step, and the test hooks (pause file,
// fault after N tokens, step delay). Owns one engine thread; every public method is thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/text/tokenizer.h"
#include "scheduler/request.h"
#include "service/api/test_hooks.h"

namespace vv::api {

struct FakeEngineOptions {
  std::int64_t max_running = 64;
  std::int64_t max_waiting = 256;
  TestHooks hooks;
};

class FakeEngine : public EngineClient {
 public:
  // Borrows the tokenizer (it must outlive the engine).
  FakeEngine(const Tokenizer& tokenizer, FakeEngineOptions options);
  ~FakeEngine() override;

  Result<RequestId> submit(Request request, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineLoad load() const override;

 private:
  struct Job;
  void run();
  bool step_job(Job& job);  // false when the job ended
  void finish(Job& job, FinishReason reason);
  // The ASR prompt's length, for usage. The last answer is kept: the service benchmarks run this
  // engine as their no-op engine and send the same clip over and over, and tokenizing the prompt
  // (the real engine's work, not the service's) would otherwise be part of what they measure.
  Result<std::int64_t> prompt_tokens(std::int64_t frames, std::int64_t samples, const std::string& context);

  const Tokenizer& tokenizer_;
  FakeEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> waiting_;
  std::vector<std::unique_ptr<Job>> running_;
  std::vector<RequestId> cancelled_;
  RequestId next_id_ = 1;
  std::mutex prompt_mu_;
  struct {
    std::int64_t frames = 0;
    std::int64_t samples = 0;
    std::string context;
    std::int64_t tokens = -1;  // < 0: none yet
  } last_prompt_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vv::api
