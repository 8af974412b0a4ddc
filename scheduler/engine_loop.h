// EngineLoop: the engine thread. Owns a Scheduler over the Runner's KV pool and drives the Runner:
// each iteration it takes new requests and cancellations from a queue, drops requests whose
// deadline passed, encodes the next audio segment of several admitted requests in one encoder
// launch (the packer: shortest remaining audio first, up to a samples budget), asks the Scheduler for a step
// (one decode row of every generating request plus chunked prefill, in ONE runner step), runs it,
// samples, and turns tokens into RequestEvents (text deltas at whole UTF-8 characters, finished
// segments, done with usage and finish reason, errors). It never blocks on I/O; sinks are called
// on the engine thread and must return quickly.
// Borrows the Runner and the Tokenizer (both must outlive the loop); the loop thread is the only
// one that touches the Runner. submit/cancel/load/stats/pause/resume/shutdown are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/status.h"
#include "engine/runner/runner.h"
#include "engine/sampling/sampler.h"
#include "engine/text/tokenizer.h"
#include "scheduler/batch_transcriber.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"

namespace vv {
namespace cpu {
class ThreadPool;
}  // namespace cpu

// Progress of one request (the CLI's progress bar): TranscriptionProgress with `request` = the
// RequestId. Called on the engine thread after each step that touched the request.
using RequestProgressFn = std::function<void(const TranscriptionProgress&)>;

// What one engine step did, for histograms (batch rows per step, inter-token latency).
struct StepReport {
  std::int64_t rows = 0;                    // decoder rows in the step
  std::int64_t seqs = 0;                    // sequences in the step
  std::int64_t decode_rows = 0;             // rows that produced a token
  std::int64_t prefill_rows = 0;            // prompt rows (first prefill or recompute)
  double seconds = 0;                       // the runner's execute()
  double stage_seconds = 0;                 // of which host time staging the rows (StepOutput)
  double record_seconds = 0;                // and host time recording the ops before the launch
  // Host time between the previous step's execute() return and this one's call, where the loop ran
  // the two in consecutive turns (0 for the loop's first step, after an idle nap, and after a turn
  // without a step): the decoder waits on the host for all of it. Of which: the previous step's
  // completion (the scheduler's bookkeeping, then handle_output over its rows) and observer
  // (on_step), this step's scheduling and its plan; the rest is the loop's other work (inbox,
  // cancels, deadlines, encoder launches, stats).
  double gap_seconds = 0;
  double gap_output_seconds = 0;
  double gap_observer_seconds = 0;
  double schedule_seconds = 0;
  double plan_seconds = 0;
  std::vector<double> inter_token_seconds;  // per token after a request's first: time since its previous one
};
using StepObserverFn = std::function<void(const StepReport&)>;

// What one encoder launch did (the packer's choice and its host time), for timelines.
struct EncodeReport {
  std::int64_t segments = 0;   // request segments in the launch
  std::int64_t samples = 0;    // samples encoded
  std::int64_t finishing = 0;  // requests whose audio the launch completed
  double start_seconds = 0;    // SpeechJob creation for requests starting their first clip
  double seconds = 0;          // the launch call's host time (a GPU may still run it)
};
using EncodeObserverFn = std::function<void(const EncodeReport&)>;

// The encoder packer's counters since the loop started.
struct EncodeStats {
  std::int64_t launches = 0;       // encoder launches (SpeechEmbedder::step calls)
  std::int64_t segments = 0;       // request segments encoded (a launch carries one or more)
  std::int64_t samples = 0;        // samples encoded
  std::int64_t most_segments = 0;  // the most segments one launch carried
  std::int64_t most_samples = 0;   // the most samples one launch carried
  double seconds = 0;              // summed host time of the launch calls (a GPU may still run them)
  std::int64_t warmup_launches = 0;  // EngineLoopOptions::warmup's launches (not counted above)
};

struct EngineLoopOptions {
  int max_running = 64;        // engine.max_running_requests (also capped by the runner's max_seqs)
  int max_waiting = 256;       // engine.max_waiting_requests: submit() refuses beyond this
  bool prefix_sharing = true;  // share the KV blocks of identical prompt prefixes
  // Context limit in positions (model.max_model_len; 0 = the model's max_position_embeddings): a
  // longer prompt is refused at submit, a request reaching it ends with kLength.
  std::int64_t max_model_len = 0;
  // Samples per encoder launch for requests that leave EncodeOptions::segment at 0 (0 = the
  // model's chunk, 60 s). 10 s bounds how long a cancel or deadline waits behind the encoder.
  std::int64_t encode_segment = 240000;
  // Samples per encoder launch over all the requests packed into it (their next segments, shortest
  // remaining audio first); capped by the runner's workspace (RunnerOptions::encoder_pack_samples,
  // 60 s by default). 0 = one request's segment per launch. The default, four 10 s segments, keeps
  // a launch short enough for cancels and deadlines while filling the GPU far better than one.
  std::int64_t encode_pack_samples = 4 * 240000;
  // Before reporting ready: one encoder launch of silence for each count of standard segments a
  // launch packs (1 .. encode_pack_samples / encode_segment), so that the first requests do not pay
  // what a new launch shape costs once (on CUDA: cuBLASLt plans, workspace growth; ~35 ms for the
  // first 10 s segment on the H200 against a few ms after). Off by default (on the CPU it is only
  // time); the service turns it on for GPU backends.
  bool warmup = false;
  RequestProgressFn progress;  // optional
  StepObserverFn on_step;      // optional; called on the engine thread after every step, must be quick
  EncodeObserverFn on_encode;  // optional; the same after every encoder launch
  // Test and bench hook: each generated position of a request with forced_ids (teacher forcing)
  // downloads its logits and passes them here (RequestId, position, logits; engine thread, quick).
  std::function<void(RequestId, std::size_t, std::span<const float>)> on_logits;
  // Threads (the engine's own included) that pick the tokens of a step's rows whose logits crossed
  // to the host (sampling, logprobs, top_logprobs, penalties: passes over the whole vocabulary each)
  // side by side; each request's sampler is its own, so the picks do not depend on the count.
  // 0 = the machine's cores, at most 8; 1 = the engine thread alone.
  int output_threads = 0;

  // Test hooks (API.md §15 "test hooks"); all off by default. The service maps them to test-only
  // environment variables.
  std::chrono::milliseconds ready_delay{0};  // load().ready (and submit) only after this long
  bool start_paused = false;                 // as if pause() was called before the first step
  std::string pause_file;      // while this file exists the loop takes no step (checked every ~20 ms)
  int fault_after_tokens = 0;  // > 0: every request fails (kError kInternal, cause kEngine,
                               // "injected engine fault") right after its N-th generated token
};

class EngineLoop : public EngineClient {
 public:
  // Starts the engine thread. The KV pool is the runner's (KvCache::num_blocks blocks); the loop
  // manages its block ids itself, so nothing else may reserve blocks of this runner meanwhile.
  static Result<std::unique_ptr<EngineLoop>> create(Runner& runner, const Tokenizer& tokenizer,
                                                    EngineLoopOptions options = {});
  ~EngineLoop() override;  // shutdown()

  // Validates the request (sampling, prompt, audio tokens vs speech frames, context length),
  // renders a transcription prompt, and queues it. Refusals: kResourceExhausted when the waiting
  // queue is full or the engine is not ready yet; kCancelled after shutdown(); kInvalidArgument /
  // kOutOfRange for a malformed request.
  Result<RequestId> submit(Request request, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineLoad load() const override;
  EngineStats stats() const override;
  EncodeStats encode_stats() const;

  // Test hooks: while paused the loop takes no step (cancellations are still honoured).
  void pause();
  void resume();
  // Cancels everything unfinished (kError kCancelled, cause kShutdown) and joins the thread.
  void shutdown();

 private:
  struct Live;
  EngineLoop(Runner& runner, const Tokenizer& tokenizer, EngineLoopOptions options);
  void run();
  void take_inbox(std::vector<std::unique_ptr<Live>>& added, std::vector<RequestId>& cancelled, bool& stop);
  void admit_new(std::vector<std::unique_ptr<Live>>& added);
  void check_deadlines();
  void warm_up();
  bool paused_now();
  // The packer: the next segment of several encoding requests in one launch (false: none waited).
  bool encode_segments();
  EncodeOptions encode_options(const Live& l) const;
  std::int64_t next_encode_samples(const Live& l) const;
  void finish_clip(Live& l);
  bool run_step();
  // A generated position's token: forced, sampled or greedy (the device's), with its logprob and
  // alternatives where asked. Reads and advances only l's own sampler, so rows may run in parallel.
  struct Picked {
    TokenId next = 0;
    float logprob = 0.0f;
    std::vector<TokenLogprobEntry> top;
  };
  // logits: the row's, empty where none crossed.
  Picked pick(Live& l, TokenId next, std::span<const float> logits, float device_logprob);
  void handle_output(Live& l, Picked&& p);
  // Repetition loops (API.md §3.7): the stream offset to cut back to when one is detected; the cut
  // itself (state rebuilt from the kept tokens); recovery at a raised temperature or kRepetition.
  std::optional<std::size_t> find_loop(Live& l, TokenId next);
  void cut_back(Live& l, std::size_t offset);
  FinishReason handle_loop(Live& l, std::size_t offset);
  void finish_request(Live& l, FinishReason reason);
  void fail_request(Live& l, Status error, ErrorCause cause);
  void emit(Live& l, RequestEvent&& e);
  std::int64_t context_limit() const;
  void flush_transcript_events(Live& l);
  void publish_stats();

  Runner& runner_;
  const Tokenizer& tokenizer_;
  EngineLoopOptions opt_;
  Scheduler scheduler_;

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  Clock::time_point pause_checked_{};
  bool pause_file_present_ = false;
  EngineStats local_;
  EncodeStats encode_local_;
  double decode_time_ = 0;  // seconds of steps that had decode rows (progress tok/s)
  // The previous step's execute() return and its host time after it (StepReport::gap_seconds).
  std::optional<Clock::time_point> prev_exec_end_;
  double prev_output_s_ = 0, prev_observer_s_ = 0;
  int pick_threads_ = 1;  // EngineLoopOptions::output_threads resolved (at construction)
  std::unique_ptr<cpu::ThreadPool> pick_pool_;  // pick_threads_ threads, made on first use
  // A step's logits rows (StepPlan::logits_host): pinned, logits_host_rows_ rows of V floats.
  Buffer logits_host_;
  std::int64_t logits_host_rows_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Live>> inbox_;
  std::vector<RequestId> cancels_;
  EngineStats stats_;  // the published snapshot
  EncodeStats encode_stats_;
  RequestId next_id_ = 1;
  bool stop_ = false;
  bool shut_ = false;
  bool paused_ = false;
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

}  // namespace vv
