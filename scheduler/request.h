// Request, RequestEvent and EngineClient: the seam between the service (and the CLI) and the engine
// loop. A caller builds a Request (decoded audio, context, sampling), submits it with a sink, and
// receives RequestEvents on that sink until exactly one terminal event (kDone or kError). The loop
// never blocks on the sink: a sink must return quickly (post the event to a strand or a queue).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/audio/audio_preparer.h"
#include "engine/model/speech_embedder.h"
#include "engine/sampling/finish_reason.h"
#include "engine/sampling/sampling_params.h"
#include "engine/transcript/stream_events.h"
#include "engine/transcript/transcript.h"

namespace vv {

using RequestId = std::uint64_t;
using Clock = std::chrono::steady_clock;

struct Request {
  enum class Kind : std::uint8_t {
    kTranscription,  // audio[0] + context → the model's transcription prompt; segments come back
    kChat,           // prompt_ids already rendered (ChatML); its audio-token rows take audio[i] in order
  };
  Kind kind = Kind::kTranscription;
  std::string request_id;                   // external id (logs, headers); the loop does not read it
  std::vector<audio::PreparedAudio> audio;  // normalised 24 kHz clips, in prompt order
  std::string context;                      // transcription: "extra info" (compose_context); "" for none
  std::vector<TokenId> prompt_ids;          // chat: the whole rendered prompt
  SamplingParams sampling;
  EncodeOptions encode;
  std::vector<std::string> stop_strings;    // chat: cut before the first match (not included)
  bool stream = false;                      // emit kTextDelta / kSegment events as they form
  int priority = 0;                         // higher first (live streams); FIFO within a priority
  Clock::time_point arrival = Clock::now();
  std::optional<Clock::time_point> deadline;  // passed while queued or running → kError kCancelled
  // Still waiting (not yet admitted) at this time → kError kCancelled with cause kQueueTimeout.
  std::optional<Clock::time_point> queue_deadline;
  bool add_generation_prompt = false;  // transcription: append `<|im_start|>assistant\n` (vLLM form)
  // Test-only "scripted decoder" (API.md §15): when non-empty, generated token i is forced_ids[i]
  // instead of the sampled one (the sampler still sees the logits, logprobs are the model's for
  // the forced ids); after the last forced id the request ends with kStop unless that id already
  // ended it. Stop ids inside are honoured like sampled ones.
  std::vector<TokenId> forced_ids;
  // Transcription loop handling (API.md §3.7; asr.repetition_detection / asr.repetition_retries):
  // on a detected loop the output is cut back; while fewer than repetition_retries recoveries were
  // made, decoding resumes from the cut at a raised temperature, else it ends with kRepetition.
  // Off with sampling.ignore_eos (benchmarks).
  bool repetition_detection = true;
  int repetition_retries = 1;
};

struct RequestTimings {
  double queue_seconds = 0;         // arrival → first scheduled
  double time_to_first_token = 0;   // arrival → first generated token
  double encode_seconds = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double inter_token_seconds = 0;   // mean time between generated tokens (first → last)
  int preemptions = 0;              // times the request was preempted and recomputed
};

// Why a request ended in kError, so the service can pick the spec's error code without parsing
// messages (API.md §4.5, §13.3, §13.4).
enum class ErrorCause : std::uint8_t {
  kNone,
  kCancelled,     // cancel() (client disconnect)
  kDeadline,      // Request::deadline passed (queued or running)
  kQueueTimeout,  // Request::queue_deadline passed while still waiting
  kShutdown,      // the loop was shut down with the request unfinished
  kEngine,        // a device/step failure or an injected fault (engine_error)
  kCapacity,      // the KV pool cannot hold the request even alone (kResourceExhausted)
  kInvalid,       // the request was refused on the engine thread (e.g. speech rows ≠ audio tokens)
};

struct RequestEvent {
  enum class Type : std::uint8_t {
    kStarted,    // admitted: encoding/prefill begins
    kTextDelta,  // text: new generated text, cut at whole UTF-8 characters (stream only)
    kSegment,    // segment/segment_index: a finished transcript segment (transcription, stream only)
    kDone,       // terminal: transcript (transcription) or text (chat), usage, finish_reason
    kError,      // terminal: error (kCancelled after cancel() or a passed deadline)
  };
  Type type = Type::kStarted;
  RequestId id = 0;
  std::string text;                      // kTextDelta: the delta; kDone (chat): the whole completion
  std::vector<TokenLogprob> logprobs;    // kTextDelta: entries of the delta's tokens (sampling.logprobs)
  // Chat with sampling.top_logprobs = n > 0: top_logprobs[i] holds the n most likely tokens (most
  // likely first) at the position of logprobs[i]; empty otherwise. kDone (chat): logprobs and
  // top_logprobs of the whole completion.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::optional<Segment> segment;        // kSegment
  std::size_t segment_index = 0;         // kSegment; kTextDelta (transcription): the delta's segment
  Transcript transcript;                 // kDone (transcription)
  FinishReason finish_reason = FinishReason::kNone;  // kDone
  TokenUsage usage;                      // kDone: prompt audio/text tokens and generated tokens
  RequestTimings timings;                // kDone
  Status error;                          // kError
  ErrorCause cause = ErrorCause::kNone;  // kError
  std::vector<TokenId> prompt_ids;       // kDone: the rendered prompt (debug contract, --format ids)
  std::vector<TokenId> generated_ids;    // kDone: every generated id, stop id included

  bool terminal() const { return type == Type::kDone || type == Type::kError; }
};

// Called on the engine thread; must not block or throw.
using EventSink = std::function<void(RequestEvent&&)>;

struct EngineLoad {
  std::int64_t running = 0;
  std::int64_t waiting = 0;
  std::int64_t kv_blocks_used = 0;
  std::int64_t kv_blocks_total = 0;
  std::int64_t max_running = 0;
  std::int64_t max_waiting = 0;
  bool ready = false;  // weights loaded, loop running
};

// Counters and gauges for the service's metrics (API.md §9). A snapshot; cumulative fields only grow.
struct EngineStats {
  EngineLoad load;
  bool paused = false;
  bool busy = false;                     // requests are waiting or running
  Clock::time_point last_step{};         // end of the last engine step (or loop start)
  std::int64_t steps = 0;
  std::int64_t rows_last_step = 0;       // decoder rows of the last step
  std::int64_t seqs_last_step = 0;       // sequences in the last step
  std::int64_t rows_total = 0;
  std::int64_t decode_rows_total = 0;    // one per generated token
  std::int64_t prefill_rows_total = 0;   // prompt rows computed (recompute included)
  std::int64_t prefix_hit_blocks = 0;    // KV blocks found shared with an earlier prompt
  std::int64_t prefix_query_blocks = 0;  // shareable blocks looked up
  std::int64_t preemptions = 0;
  std::int64_t requests_done = 0;
  std::int64_t requests_failed = 0;      // kError other than cancellation/deadline
  std::int64_t requests_cancelled = 0;   // cancel(), deadlines, shutdown
  double step_seconds_last = 0;
  std::int64_t repetition_recovered = 0;  // loops cut back and decoding resumed (§3.7)
  std::int64_t repetition_gave_up = 0;    // loops that ended a request with kRepetition
};

// What the service and the CLI hold: the engine loop (scheduler/engine_loop.h) or a test fake.
// Thread-safe.
class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Queues the request. kResourceExhausted when the waiting queue is full; kUnavailable-style
  // refusals (not ready, draining) are kResourceExhausted/kCancelled with a message saying which.
  virtual Result<RequestId> submit(Request request, EventSink sink) = 0;
  // Idempotent; a request still known gets a kError kCancelled event within one engine step.
  virtual void cancel(RequestId id) = 0;
  virtual EngineLoad load() const = 0;
  // Counters for the service's metrics (the EngineLoop's); other engines report their load only.
  virtual EngineStats stats() const {
    EngineStats s;
    s.load = load();
    return s;
  }
};

}  // namespace vv
