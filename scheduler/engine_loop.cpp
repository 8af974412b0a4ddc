#include "scheduler/engine_loop.h"

#include <algorithm>
#include <filesystem>

#include "engine/model/device_tensor.h"
#include "engine/sampling/repetition_detector.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_condition.h"
#include "engine/sampling/stop_strings.h"
#include "engine/text/incremental_decoder.h"
#include "engine/text/prompt_builder.h"
#include "engine/transcript/segment_repetition.h"
#include "engine/transcript/transcript_assembler.h"
#include "engine/transcript/utf8_text.h"
#include "kernels/cpu/thread_pool.h"

namespace vv {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Whether a request's token needs its logits row on the host beyond the greedy id's logprob (which
// the device gives: SequenceRows::want_logprob).
bool reads_logits_row(const SamplingParams& p) {
  return p.temperature > 0 || p.top_logprobs > 0 || p.min_p > 0 || p.repetition_penalty != 1.0f ||
         p.presence_penalty != 0 || p.frequency_penalty != 0 || !p.logit_bias.empty();
}

}  // namespace

// The engine thread's state of one request.
struct EngineLoop::Live {
  RequestId id = 0;
  Request req;
  EventSink sink;
  bool transcription = true;
  std::vector<TokenId> prompt;
  std::int64_t audio_tokens = 0;
  std::int64_t first_audio = -1;  // index of the first audio token in the prompt; -1 = none

  // Encoding, clip by clip and segment by segment.
  std::size_t clip = 0;
  std::unique_ptr<SpeechJob> job;
  std::vector<SpeechRows> clips;
  SpeechRows joined;
  const Tensor* speech = nullptr;
  bool encoded = false;
  int encode_skips = 0;  // encoder launches this request waited through in a row

  // Decoding.
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StopCondition> stop;
  std::unique_ptr<RepetitionDetector> repetition;
  std::unique_ptr<IncrementalDecoder> text;
  std::unique_ptr<TranscriptAssembler> assembler;  // transcription
  std::unique_ptr<StopStringMatcher> stops;        // chat
  bool needs_logits = false;
  // Greedy with logprobs and nothing else that reads the row (a verbose_json transcription): the
  // device gives the token's logprob beside its id (SequenceRows::want_logprob), no logits cross.
  bool device_logprob = false;
  std::vector<TokenId> generated;
  std::string chat_text;
  std::vector<TokenLogprob> chat_logprobs;          // every entry (kDone)
  std::vector<std::vector<TokenLogprob>> chat_top;  // alternatives per entry (top_logprobs > 0)
  std::size_t logprobs_sent = 0;                    // entries already attached to a delta
  std::vector<TranscriptEvent> events;              // scratch

  // Transcription: where each generated token's text ends in the fed stream, and what it was fed
  // with, so that a repetition loop can be cut back at a segment boundary and the rest rebuilt.
  Seconds duration = 0;
  std::size_t fed = 0;
  std::vector<std::size_t> tok_end;
  std::vector<float> tok_logprob, tok_temp;
  std::unique_ptr<SegmentRepetitionDetector> segment_repetition;
  int recoveries = 0;
  std::int64_t dropped = 0;  // generated tokens cut away by recoveries (still counted in usage)
  bool got_first = false;

  bool admitted = false;
  bool terminal = false;
  Clock::time_point first_token{}, last_token{};
  RequestTimings timings;
};

EngineLoop::EngineLoop(Runner& runner, const Tokenizer& tokenizer, EngineLoopOptions options)
    : runner_(runner), tokenizer_(tokenizer), opt_(std::move(options)), scheduler_([&] {
        SchedulerConfig c;
        const RunnerOptions& ro = runner.options();
        c.num_blocks = runner.kv().num_blocks();
        c.block_size = runner.kv().block_size();
        c.max_running = std::max(1, std::min(opt_.max_running, ro.max_seqs));
        c.token_budget = std::max(ro.max_rows, c.max_running);
        c.prefill_chunk = ro.prefill_chunk;
        c.prefix_sharing = opt_.prefix_sharing;
        return c;
      }()) {
  paused_ = opt_.start_paused;
  pick_threads_ = opt_.output_threads > 0
                      ? opt_.output_threads
                      : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  local_.load.kv_blocks_total = scheduler_.config().num_blocks;
  local_.load.max_running = scheduler_.config().max_running;
  local_.load.max_waiting = opt_.max_waiting;
  local_.last_step = Clock::now();
  stats_ = local_;
}

Result<std::unique_ptr<EngineLoop>> EngineLoop::create(Runner& runner, const Tokenizer& tokenizer,
                                                       EngineLoopOptions options) {
  if (options.max_running < 1 || options.max_waiting < 0) {
    return invalid_argument("engine loop: max_running must be >= 1 and max_waiting >= 0");
  }
  if (runner.options().max_rows < 1 || runner.options().max_seqs < 1) {
    return invalid_argument("engine loop: the runner's max_rows and max_seqs must be positive");
  }
  std::unique_ptr<EngineLoop> loop(new EngineLoop(runner, tokenizer, std::move(options)));
  loop->thread_ = std::thread([p = loop.get()] { p->run(); });
  return loop;
}

EngineLoop::~EngineLoop() {
  shutdown();
}

void EngineLoop::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shut_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void EngineLoop::pause() {
  std::lock_guard<std::mutex> lk(mu_);
  paused_ = true;
}

void EngineLoop::resume() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

void EngineLoop::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineLoad EngineLoop::load() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineLoad l = stats_.load;
  l.waiting += static_cast<std::int64_t>(inbox_.size());
  l.ready = ready_.load() && !shut_;
  return l;
}

EncodeStats EngineLoop::encode_stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return encode_stats_;
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = stats_;
  s.load.waiting += static_cast<std::int64_t>(inbox_.size());
  s.load.ready = ready_.load() && !shut_;
  s.paused = s.paused || paused_;
  s.busy = s.busy || !inbox_.empty();
  return s;
}

Result<RequestId> EngineLoop::submit(Request request, EventSink sink) {
  if (!sink) return invalid_argument("submit: no event sink");
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (shut_) return Status(StatusCode::kCancelled, "the engine is shutting down");
  }
  if (!ready_.load()) return Status(StatusCode::kResourceExhausted, "the engine is not ready yet (loading)");
  VV_RETURN_IF_ERROR(validate(request.sampling));
  const ModelSpec& spec = runner_.spec();
  auto l = std::make_unique<Live>();
  l->transcription = request.kind == Request::Kind::kTranscription;
  if (l->transcription) {
    if (request.audio.size() != 1) {
      return invalid_argument("a transcription request takes exactly one audio clip, got " +
                              std::to_string(request.audio.size()));
    }
    const audio::PreparedAudio& a = request.audio[0];
    VV_ASSIGN_OR_RETURN(AsrPrompt p, build_asr_prompt(tokenizer_, a.frames, a.samples, request.context,
                                                      request.add_generation_prompt));
    l->prompt = std::move(p.ids);
  } else {
    if (request.prompt_ids.empty())
      return invalid_argument("prompt_ids: a chat request needs a rendered prompt");
    l->prompt = request.prompt_ids;
  }
  std::int64_t frames = 0;
  for (const auto& a : request.audio) {
    if (a.frames < 0 || static_cast<std::int64_t>(a.input_values.size()) < a.frames) {
      return invalid_argument("audio: a clip has " + std::to_string(a.input_values.size()) + " samples for " +
                              std::to_string(a.frames) + " frames");
    }
    frames += a.frames;
  }
  for (std::size_t i = 0; i < l->prompt.size(); ++i) {
    if (l->prompt[i] != spec.audio_token_id) continue;
    if (l->first_audio < 0) l->first_audio = static_cast<std::int64_t>(i);
    ++l->audio_tokens;
  }
  if (l->audio_tokens != frames) {
    return invalid_argument("prompt_ids: the prompt has " + std::to_string(l->audio_tokens) +
                            " audio tokens (" + std::to_string(spec.audio_token_id) +
                            ") but the audio clips have " + std::to_string(frames) + " frames");
  }
  const std::int64_t limit = context_limit();
  if (limit > 0 && static_cast<std::int64_t>(l->prompt.size()) >= limit) {
    return out_of_range("the prompt has " + std::to_string(l->prompt.size()) +
                        " tokens; the decoder's context is " + std::to_string(limit));
  }
  const SamplingParams& sp = request.sampling;
  l->sampler = std::make_unique<Sampler>(sp);
  l->sampler->observe_prompt(l->prompt);
  l->stop = std::make_unique<StopCondition>(sp);
  l->text = std::make_unique<IncrementalDecoder>(tokenizer_);
  // A forced token's logprob is not the argmax's: forced requests read the row for it.
  l->device_logprob = sp.logprobs && request.forced_ids.empty() && !reads_logits_row(sp);
  l->needs_logits = reads_logits_row(sp) || (sp.logprobs && !l->device_logprob) ||
                    (opt_.on_logits && !request.forced_ids.empty());
  if (l->transcription) {
    l->repetition = std::make_unique<RepetitionDetector>();
    l->segment_repetition = std::make_unique<SegmentRepetitionDetector>();
    l->duration = static_cast<double>(request.audio[0].samples) / std::max(1, spec.sample_rate);
    l->assembler = std::make_unique<TranscriptAssembler>(l->duration);
  } else {
    l->stops = std::make_unique<StopStringMatcher>(request.stop_strings);
  }
  l->encoded = request.audio.empty();
  l->req = std::move(request);
  l->sink = std::move(sink);

  std::lock_guard<std::mutex> lk(mu_);
  if (shut_) return Status(StatusCode::kCancelled, "the engine is shutting down");
  const std::int64_t waiting = stats_.load.waiting + static_cast<std::int64_t>(inbox_.size());
  if (waiting >= opt_.max_waiting) {
    return Status(StatusCode::kResourceExhausted,
                  "the waiting queue is full (" + std::to_string(opt_.max_waiting) + " requests)");
  }
  const RequestId id = next_id_++;
  l->id = id;
  inbox_.push_back(std::move(l));
  cv_.notify_all();
  return id;
}

std::int64_t EngineLoop::context_limit() const {
  const std::int64_t model = runner_.spec().decoder.max_position_embeddings;
  if (opt_.max_model_len <= 0) return model;
  return model > 0 ? std::min(model, opt_.max_model_len) : opt_.max_model_len;
}

void EngineLoop::emit(Live& l, RequestEvent&& e) {
  e.id = l.id;
  l.sink(std::move(e));
}

void EngineLoop::fail_request(Live& l, Status error, ErrorCause cause) {
  if (l.terminal) return;
  l.terminal = true;
  scheduler_.abort(l.id);
  l.job.reset();
  if (cause == ErrorCause::kCancelled || cause == ErrorCause::kDeadline ||
      cause == ErrorCause::kQueueTimeout || cause == ErrorCause::kShutdown) {
    ++local_.requests_cancelled;
  } else {
    ++local_.requests_failed;
  }
  RequestEvent e;
  e.type = RequestEvent::Type::kError;
  e.error = std::move(error);
  e.cause = cause;
  emit(l, std::move(e));
}

void EngineLoop::take_inbox(std::vector<std::unique_ptr<Live>>& added, std::vector<RequestId>& cancelled,
                            bool& stop) {
  std::unique_lock<std::mutex> lk(mu_);
  const bool idle = live_.empty();
  const bool paused = paused_ || pause_file_present_;
  if (inbox_.empty() && cancels_.empty() && !stop_ && (idle || paused)) {
    // Nothing to compute: sleep until something arrives or resume() is called. The nap is bounded
    // so that the pause file is polled and deadlines of paused requests still fire.
    prev_exec_end_.reset();  // the next step's gap would be this nap
    cv_.wait_for(lk, std::chrono::milliseconds(paused ? 10 : 50), [&] {
      return !inbox_.empty() || !cancels_.empty() || stop_ || (paused && !paused_ && !pause_file_present_);
    });
  }
  added.swap(inbox_);
  // Until this turn publishes its stats, the taken requests are in neither inbox_ nor the
  // snapshot: count them as waiting now, or a submit() meanwhile would see room that is not there
  // and let the queue grow past max_waiting.
  stats_.load.waiting += static_cast<std::int64_t>(added.size());
  cancelled.swap(cancels_);
  stop = stop_;
}

void EngineLoop::admit_new(std::vector<std::unique_ptr<Live>>& added) {
  for (auto& l : added) {
    Sequence s;
    s.id = l->id;
    s.priority = l->req.priority;
    s.tokens = l->prompt;
    s.shareable = l->first_audio >= 0 ? l->first_audio : static_cast<std::int64_t>(l->prompt.size());
    s.computable = l->encoded ? -1 : l->first_audio;
    scheduler_.add(std::move(s));
    live_.emplace(l->id, std::move(l));
  }
  added.clear();
}

void EngineLoop::check_deadlines() {
  const auto now = Clock::now();
  for (auto& [id, l] : live_) {
    if (l->terminal) continue;
    if (l->req.deadline && now >= *l->req.deadline) {
      fail_request(*l, Status(StatusCode::kCancelled, "deadline exceeded"), ErrorCause::kDeadline);
    } else if (!l->admitted && l->req.queue_deadline && now >= *l->req.queue_deadline) {
      fail_request(*l, Status(StatusCode::kCancelled, "queue timeout: still waiting at the deadline"),
                   ErrorCause::kQueueTimeout);
    }
  }
}

bool EngineLoop::paused_now() {
  if (!opt_.pause_file.empty()) {
    const auto now = Clock::now();
    if (now - pause_checked_ >= std::chrono::milliseconds(20)) {
      pause_checked_ = now;
      std::error_code ec;
      const bool present = std::filesystem::exists(opt_.pause_file, ec);
      std::lock_guard<std::mutex> lk(mu_);
      pause_file_present_ = present;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  return paused_ || pause_file_present_;
}

void EngineLoop::warm_up() {
  SpeechEmbedder& speech = runner_.speech();
  const std::int64_t hop = speech.hop();
  const std::int64_t seg =
      std::min(opt_.encode_segment > 0 ? opt_.encode_segment : speech.acoustic().max_segment(),
               speech.acoustic().max_segment()) /
      hop * hop;
  if (seg <= 0) return;
  const std::int64_t budget =
      opt_.encode_pack_samples > 0 ? std::min(opt_.encode_pack_samples, speech.max_pack()) : seg;
  const std::vector<float> silence(static_cast<std::size_t>(seg), 0.f);
  EncodeOptions eo;
  eo.segment = seg;
  for (std::int64_t k = 1; k * seg <= std::max(budget, seg); ++k) {
    std::vector<std::unique_ptr<SpeechJob>> jobs;
    std::vector<SpeechJob*> ptrs;
    for (std::int64_t j = 0; j < k; ++j) {
      auto job = speech.start(silence.data(), seg, eo);
      if (!job.is_ok()) return;  // a request will report the same error
      jobs.push_back(std::move(job).value());
      ptrs.push_back(jobs.back().get());
    }
    if (!speech.step(ptrs).is_ok()) return;
    ++encode_local_.warmup_launches;
  }
  runner_.backend().synchronize();
}

EncodeOptions EngineLoop::encode_options(const Live& l) const {
  EncodeOptions eo = l.req.encode;
  if (eo.segment == 0 && opt_.encode_segment > 0) {
    // Shorter launches than the model's 60 s chunk keep the loop responsive (a cancel or a
    // deadline waits for at most one launch); segmented encoding is exact for any multiple of
    // the hop (MODEL.md §5.7).
    const std::int64_t hop = runner_.speech().hop();
    const std::int64_t seg =
        std::min(opt_.encode_segment, runner_.speech().acoustic().max_segment()) / hop * hop;
    if (seg > 0) eo.segment = seg;
  }
  return eo;
}

// Samples the request's next launch encodes: its job's next segment, or (not started yet) the first
// segment of its current clip, as SpeechEmbedder::start() will cut it.
std::int64_t EngineLoop::next_encode_samples(const Live& l) const {
  if (l.job) return l.job->next_samples();
  const std::int64_t hop = runner_.speech().hop();
  const std::int64_t n = static_cast<std::int64_t>(l.req.audio[l.clip].input_values.size());
  const std::int64_t padded = (n + hop - 1) / hop * hop;
  const std::int64_t seg = encode_options(l).segment;
  return std::min(seg > 0 ? seg : runner_.speech().acoustic().max_segment(), padded);
}

bool EngineLoop::encode_segments() {
  // Which requests: shortest remaining audio first, so that a short clip arriving during a long
  // one's encoding waits for at most the launch in flight, not the long clip; a request passed over
  // kMaxSkips launches in a row goes first, so a stream of short clips cannot starve a long one.
  // Then, in that order, every request whose next segment still fits the launch's samples budget:
  // one launch per step encodes the next segment of several requests (a request's segments depend
  // on each other through the carried convolution state, so one each). A launch that completes the
  // first request's audio (it is prefilled, and gets its first token, right after) takes only
  // requests it also completes: a long request's segment riding along would add its own encode time
  // to their time to first token, while the long one only waits one launch (and kMaxSkips bounds
  // how often).
  constexpr int kMaxSkips = 3;
  const std::int64_t hop = runner_.speech().hop();
  auto remaining = [hop](const Live& l) {
    std::int64_t n = 0;
    for (std::size_t c = l.clip; c < l.req.audio.size(); ++c) {
      n += static_cast<std::int64_t>(l.req.audio[c].input_values.size());
    }
    if (l.job) n -= l.job->frames_done() * hop;
    return n;
  };
  struct Candidate {
    Live* l;
    std::int64_t left;
  };
  std::vector<Candidate> encoding;
  for (RequestId id : scheduler_.running()) {
    auto it = live_.find(id);
    if (it == live_.end() || it->second->terminal || it->second->encoded) continue;
    encoding.push_back({it->second.get(), remaining(*it->second)});
  }
  if (encoding.empty()) return false;
  std::stable_sort(encoding.begin(), encoding.end(), [](const Candidate& a, const Candidate& b) {
    const bool sa = a.l->encode_skips >= kMaxSkips, sb = b.l->encode_skips >= kMaxSkips;
    if (sa != sb) return sa;
    if (sa) return a.l->encode_skips > b.l->encode_skips;
    return a.left < b.left;
  });
  const std::int64_t budget =
      opt_.encode_pack_samples > 0 ? std::min(opt_.encode_pack_samples, runner_.speech().max_pack()) : 0;
  std::vector<Live*> pack;
  std::int64_t samples = 0, finishing = 0;
  double start_seconds = 0;
  bool finishing_only = false;  // the first request in the pack completes its audio in this launch
  for (const Candidate& c : encoding) {
    Live& l = *c.l;
    const std::int64_t len = next_encode_samples(l);
    const bool completes = c.left <= len;
    if (!pack.empty() && (budget == 0 || samples + len > budget || (finishing_only && !completes))) continue;
    if (!l.job) {
      const auto ts = Clock::now();
      const audio::PreparedAudio& clip = l.req.audio[l.clip];
      auto job = runner_.speech().start(
          clip.input_values.data(), static_cast<std::int64_t>(clip.input_values.size()), encode_options(l));
      if (!job.is_ok()) {
        fail_request(l, Status(job.status().code(), "encoder: " + job.status().message()),
                     ErrorCause::kInvalid);
        continue;
      }
      l.job = std::move(job).value();
      start_seconds += seconds_between(ts, Clock::now());
    }
    // The started job's own cut decides (the estimate above mirrors it; a launch never exceeds
    // the budget, which the workspace holds).
    const std::int64_t next = l.job->next_samples();
    if (!pack.empty() && samples + next > budget) continue;
    if (pack.empty()) finishing_only = completes;
    pack.push_back(&l);
    samples += next;
    finishing += completes ? 1 : 0;
  }
  for (const Candidate& c : encoding) {
    const bool in = std::find(pack.begin(), pack.end(), c.l) != pack.end();
    c.l->encode_skips = in ? 0 : c.l->encode_skips + 1;
  }
  if (pack.empty()) return true;  // every candidate failed to start

  const auto t0 = Clock::now();
  std::vector<SpeechJob*> jobs;
  for (Live* l : pack) jobs.push_back(l->job.get());
  Status s = runner_.speech().step(jobs);
  const double seconds = seconds_between(t0, Clock::now());
  ++encode_local_.launches;
  encode_local_.seconds += seconds;
  encode_local_.segments += static_cast<std::int64_t>(pack.size());
  encode_local_.samples += samples;
  encode_local_.most_segments = std::max<std::int64_t>(encode_local_.most_segments, pack.size());
  encode_local_.most_samples = std::max(encode_local_.most_samples, samples);
  for (Live* lp : pack) {
    Live& l = *lp;
    l.timings.encode_seconds += seconds;  // each waited for the whole launch
    if (!s.is_ok()) {
      fail_request(l, Status(s.code(), "encoder: " + s.message()), ErrorCause::kEngine);
      continue;
    }
    if (opt_.progress) {
      opt_.progress({TranscriptionProgress::Phase::kEncoding, static_cast<std::size_t>(l.id),
                     l.job->frames_done(), l.job->frames(), 0});
    }
    if (l.job->done()) finish_clip(l);
  }
  if (opt_.on_encode) {
    opt_.on_encode({static_cast<std::int64_t>(pack.size()), samples, finishing, start_seconds, seconds});
  }
  return true;
}

// The request's current clip is encoded: keep its rows, and once every clip is, join them and let
// the scheduler prefill the request.
void EngineLoop::finish_clip(Live& l) {
  const audio::PreparedAudio& clip = l.req.audio[l.clip];
  SpeechRows rows = l.job->take();
  l.job.reset();
  if (rows.frames() != clip.frames) {
    fail_request(l,
                 invalid_argument("encoder: " + std::to_string(rows.frames()) +
                                  " speech rows for a clip of " + std::to_string(clip.frames) + " frames"),
                 ErrorCause::kInvalid);
    return;
  }
  l.clips.push_back(std::move(rows));
  if (++l.clip < l.req.audio.size()) return;
  if (l.clips.size() == 1) {
    l.joined = std::move(l.clips[0]);
  } else {
    // Several clips (chat): one [F, H] tensor, so that every chunk reads its rows from one place.
    std::int64_t total = 0;
    for (const auto& c : l.clips) total += c.frames();
    l.joined.rows = alloc_f32(runner_.backend(), total, runner_.spec().decoder.hidden_size);
    std::int64_t at = 0;
    for (const auto& c : l.clips) {
      Tensor dst = l.joined.rows.t.row_slice(at, c.frames());
      runner_.backend().copy(c.rows.t, dst);
      at += c.frames();
    }
  }
  l.clips.clear();
  for (auto& a : l.req.audio)
    std::vector<float>().swap(a.input_values);  // only the speech rows are needed now
  l.speech = &l.joined.rows.t;
  l.encoded = true;
  scheduler_.set_computable(l.id, -1);
}

bool EngineLoop::run_step() {
  const auto t_entry = Clock::now();
  SchedulerStep step = scheduler_.schedule();
  const auto t_sched = Clock::now();
  for (RequestId id : step.failed) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    const std::int64_t positions =
        static_cast<std::int64_t>(it->second->prompt.size() + it->second->generated.size());
    fail_request(*it->second,
                 Status(StatusCode::kResourceExhausted,
                        "the KV cache cannot hold this request (" + std::to_string(positions) +
                            " positions; " + std::to_string(scheduler_.config().num_blocks) + " blocks of " +
                            std::to_string(scheduler_.config().block_size) + ")"),
                 ErrorCause::kCapacity);
  }
  for (RequestId id : step.preempted) {
    auto it = live_.find(id);
    if (it != live_.end()) ++it->second->timings.preemptions;
  }
  const auto now = Clock::now();
  for (RequestId id : step.admitted) {
    auto it = live_.find(id);
    if (it == live_.end() || it->second->admitted) continue;
    Live& l = *it->second;
    l.admitted = true;
    l.timings.queue_seconds = seconds_between(l.req.arrival, now);
    RequestEvent e;
    e.type = RequestEvent::Type::kStarted;
    emit(l, std::move(e));
  }
  if (step.chunks.empty()) {
    prev_exec_end_.reset();  // a turn without a step (waiting for the encoder): no gap to report
    return !step.failed.empty() || !step.admitted.empty();
  }

  StepPlan plan;
  std::vector<Live*> who;
  bool any_decode = false, any_logits = false;
  for (const ScheduledChunk& c : step.chunks) {
    Live& l = *live_.at(c.id);
    const Sequence& s = *scheduler_.find(c.id);
    SequenceRows rows;
    rows.ids.assign(s.tokens.begin() + c.start, s.tokens.begin() + c.start + c.count);
    rows.start_pos = c.start;
    rows.blocks = scheduler_.kv().table(c.id);
    rows.speech = l.speech;
    const auto plen = static_cast<std::int64_t>(l.prompt.size());
    // Past the prompt (every decode row) that is all of its audio tokens, counted at submission.
    rows.speech_begin = c.start >= plen ? l.audio_tokens
                                        : std::count(l.prompt.begin(), l.prompt.begin() + c.start,
                                                     runner_.spec().audio_token_id);
    rows.want_output = c.want_output;
    rows.want_logits = c.want_output && l.needs_logits;  // only those rows' logits cross to the host
    rows.want_logprob = c.want_output && l.device_logprob;
    if (c.start >= plen) any_decode = true;
    any_logits = any_logits || rows.want_logits;
    plan.seqs.push_back(std::move(rows));
    who.push_back(&l);
  }
  // Logits rows go to pinned host memory of the loop's own (one copy a run of rows, no allocation).
  const std::int64_t V = runner_.spec().decoder.vocab_size;
  if (any_logits) {
    const auto need = static_cast<std::int64_t>(plan.seqs.size());
    if (need > logits_host_rows_) {
      const std::int64_t rows = std::max<std::int64_t>(need, scheduler_.config().max_running);
      logits_host_ = runner_.backend().allocate_host(static_cast<std::size_t>(rows * V) * sizeof(float));
      logits_host_rows_ = logits_host_.data() ? rows : 0;
    }
    if (logits_host_.data()) plan.logits_host = static_cast<float*>(logits_host_.data());
  }

  const auto t0 = Clock::now();
  auto res = runner_.execute(plan);
  const auto t1 = Clock::now();
  const double dt = seconds_between(t0, t1);
  if (!res.is_ok()) {
    prev_exec_end_ = t1;
    prev_output_s_ = prev_observer_s_ = 0;
    for (Live* l : who)
      fail_request(*l, Status(res.status().code(), "engine step: " + res.status().message()),
                   ErrorCause::kEngine);
    return true;
  }
  scheduler_.complete(step);
  ++local_.steps;
  local_.rows_last_step = step.rows();
  local_.seqs_last_step = static_cast<std::int64_t>(step.chunks.size());
  local_.rows_total += step.rows();
  local_.step_seconds_last = dt;
  local_.last_step = t1;
  if (any_decode) decode_time_ += dt;
  StepReport report;
  report.rows = step.rows();
  report.seqs = static_cast<std::int64_t>(step.chunks.size());
  report.seconds = dt;
  report.stage_seconds = res->stage_seconds;
  report.record_seconds = res->record_seconds;
  report.schedule_seconds = seconds_between(t_entry, t_sched);
  report.plan_seconds = seconds_between(t_sched, t0);
  if (prev_exec_end_) {
    report.gap_seconds = seconds_between(*prev_exec_end_, t0);
    report.gap_output_seconds = prev_output_s_;
    report.gap_observer_seconds = prev_observer_s_;
  }
  prev_exec_end_ = t1;

  // The rows whose logits crossed to the host first: each pick is one to three passes over the
  // vocabulary, so several run side by side (each on its own request's sampler).
  const auto logits_of = [&](std::size_t j) -> std::span<const float> {
    if (!plan.seqs[j].want_output || !plan.seqs[j].want_logits) return {};
    if (plan.logits_host)
      return {plan.logits_host + static_cast<std::int64_t>(j) * V, static_cast<std::size_t>(V)};
    if (j < res->logits.size() && !res->logits[j].empty()) return res->logits[j];
    return {};
  };
  std::vector<std::size_t> heavy;
  for (std::size_t j = 0; j < step.chunks.size(); ++j) {
    if (step.chunks[j].want_output && !logits_of(j).empty()) heavy.push_back(j);
  }
  std::vector<std::optional<Picked>> picked(heavy.empty() ? 0 : step.chunks.size());
  const auto pick_rows = [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::size_t j = heavy[static_cast<std::size_t>(i)];
      picked[j] = pick(*who[j], res->next[j], logits_of(j), 0.0f);
    }
  };
  if (heavy.size() >= 2 && pick_threads_ > 1) {
    if (!pick_pool_)
      pick_pool_ = std::make_unique<cpu::ThreadPool>(pick_threads_, false);  // the caller counts
    pick_pool_->parallel_for(static_cast<std::int64_t>(heavy.size()), 1, pick_rows);
  } else {
    pick_rows(0, static_cast<std::int64_t>(heavy.size()));
  }
  for (std::size_t j = 0; j < step.chunks.size(); ++j) {
    const ScheduledChunk& c = step.chunks[j];
    Live& l = *who[j];
    const bool prefill = c.start < static_cast<std::int64_t>(l.prompt.size()) || c.count > 1;
    (prefill ? l.timings.prefill_seconds : l.timings.decode_seconds) += dt;
    if (prefill) {
      local_.prefill_rows_total += c.count;
      report.prefill_rows += c.count;
    }
    if (!c.want_output) {
      if (opt_.progress) {
        opt_.progress({TranscriptionProgress::Phase::kPrefill, static_cast<std::size_t>(l.id),
                       c.start + c.count, static_cast<std::int64_t>(l.prompt.size()), 0});
      }
      continue;
    }
    ++local_.decode_rows_total;
    ++report.decode_rows;
    if (!l.generated.empty()) report.inter_token_seconds.push_back(seconds_between(l.last_token, t1));
    if (const std::span<const float> logits = logits_of(j); !logits.empty()) {
      if (!l.req.forced_ids.empty() && l.generated.size() < l.req.forced_ids.size() && opt_.on_logits)
        opt_.on_logits(l.id, l.generated.size(), logits);
    }
    const float device_lp = j < res->logprob.size() ? res->logprob[j] : 0.0f;
    handle_output(
        l, j < picked.size() && picked[j] ? std::move(*picked[j]) : pick(l, res->next[j], {}, device_lp));
  }
  const auto t_out = Clock::now();
  prev_output_s_ = seconds_between(t1, t_out);
  if (opt_.on_step) opt_.on_step(report);
  prev_observer_s_ = opt_.on_step ? seconds_between(t_out, Clock::now()) : 0.0;
  return true;
}

void EngineLoop::flush_transcript_events(Live& l) {
  if (!l.req.stream) {
    l.events.clear();
    return;
  }
  const Transcript& t = l.assembler->transcript();
  RequestEvent delta;
  bool have_delta = false;
  auto flush_delta = [&] {
    if (!have_delta) return;
    if (l.req.sampling.logprobs && l.logprobs_sent < t.logprobs.size()) {
      delta.logprobs.assign(t.logprobs.begin() + static_cast<std::ptrdiff_t>(l.logprobs_sent),
                            t.logprobs.end());
      l.logprobs_sent = t.logprobs.size();
    }
    emit(l, std::move(delta));
    delta = RequestEvent();
    have_delta = false;
  };
  for (TranscriptEvent& ev : l.events) {
    if (ev.kind == TranscriptEvent::Kind::kDelta) {
      if (ev.delta.empty()) continue;
      if (have_delta && delta.segment_index != ev.segment_index) flush_delta();
      if (!have_delta) {
        delta.type = RequestEvent::Type::kTextDelta;
        delta.segment_index = ev.segment_index;
        have_delta = true;
      }
      delta.text += ev.delta;
    } else {
      flush_delta();
      if (ev.segment_index < t.segments.size()) {
        RequestEvent seg;
        seg.type = RequestEvent::Type::kSegment;
        seg.segment = t.segments[ev.segment_index];
        seg.segment_index = ev.segment_index;
        emit(l, std::move(seg));
      }
    }
  }
  flush_delta();
  l.events.clear();
}

std::optional<std::size_t> EngineLoop::find_loop(Live& l, TokenId next) {
  // Rule (a): 4 identical segments in a row → cut after the first of them.
  bool segment_done = false;
  for (const TranscriptEvent& ev : l.events) {
    if (ev.kind != TranscriptEvent::Kind::kSegment) continue;
    segment_done = true;
    const auto& segs = l.assembler->transcript().segments;
    if (ev.segment_index >= segs.size()) continue;
    if (auto first = l.segment_repetition->add(segs[ev.segment_index].text)) {
      return l.assembler->segment_end_offset(*first).value_or(0);
    }
  }
  // Rule (b): the last 256 tokens periodic (every 64 tokens and after a segment) → cut to the last
  // segment completed before the window.
  std::optional<RepetitionLoop> loop = l.repetition->append(next);
  if (!loop && segment_done) loop = l.repetition->check();
  if (!loop) return std::nullopt;
  const auto w = static_cast<std::size_t>(loop->window_start);
  const std::size_t begin = w == 0 ? 0 : l.tok_end[std::min(w, l.tok_end.size()) - 1];
  const std::size_t n = l.assembler->segments_ending_by(begin);
  return n == 0 ? 0 : l.assembler->segment_end_offset(n - 1).value_or(0);
}

void EngineLoop::cut_back(Live& l, std::size_t offset) {
  std::size_t keep = 0;
  while (keep < l.generated.size() && (keep == 0 ? 0 : l.tok_end[keep - 1]) < offset) ++keep;
  l.dropped += static_cast<std::int64_t>(l.generated.size() - keep);
  l.generated.resize(keep);
  l.tok_logprob.resize(keep);
  l.tok_temp.resize(keep);
  l.tok_end.clear();
  const SamplingParams& sp = l.req.sampling;
  l.stop = std::make_unique<StopCondition>(sp);
  l.repetition = std::make_unique<RepetitionDetector>();
  l.text = std::make_unique<IncrementalDecoder>(tokenizer_);
  l.assembler = std::make_unique<TranscriptAssembler>(l.duration);
  l.segment_repetition->reset();
  l.fed = 0;
  std::vector<TranscriptEvent> scratch;  // already delivered (or never to be): not re-emitted
  for (std::size_t k = 0; k < keep; ++k) {
    const TokenId id = l.generated[k];
    l.stop->append(id);
    l.repetition->append(id);
    if (!l.stop->is_stop_id(id)) {
      const std::string piece = l.text->push(id);
      l.assembler->feed_token({id, piece, l.tok_logprob[k], l.tok_temp[k]}, scratch);
      l.fed += piece.size();
      for (const TranscriptEvent& ev : scratch) {
        const auto& segs = l.assembler->transcript().segments;
        if (ev.kind == TranscriptEvent::Kind::kSegment && ev.segment_index < segs.size()) {
          l.segment_repetition->add(segs[ev.segment_index].text);
        }
      }
      scratch.clear();
    }
    l.tok_end.push_back(l.fed);
  }
  l.events.clear();
  l.logprobs_sent = l.assembler->transcript().logprobs.size();
}

FinishReason EngineLoop::handle_loop(Live& l, std::size_t offset) {
  cut_back(l, offset);
  if (l.recoveries < l.req.repetition_retries) {
    ++l.recoveries;
    ++local_.repetition_recovered;
    l.sampler->set_temperature(recovery_temperature(l.sampler->params().temperature));
    l.needs_logits = true;  // sampled from now on
    l.device_logprob = false;
    scheduler_.truncate(l.id, static_cast<std::int64_t>(l.prompt.size() + l.generated.size()));
    return FinishReason::kNone;
  }
  ++local_.repetition_gave_up;
  return FinishReason::kRepetition;
}

EngineLoop::Picked EngineLoop::pick(Live& l, TokenId next, std::span<const float> logits,
                                    float device_logprob) {
  const SamplingParams& sp = l.req.sampling;
  Picked p;
  p.next = next;
  const std::size_t k = l.generated.size();
  if (!l.req.forced_ids.empty() && k < l.req.forced_ids.size()) {
    p.next = l.req.forced_ids[k];
    if (!logits.empty()) {
      p.logprob = token_logprob(logits, p.next);
      if (sp.top_logprobs > 0) p.top = top_logprobs(logits, static_cast<std::size_t>(sp.top_logprobs));
    }
    l.sampler->observe(p.next);
  } else if (!logits.empty() && l.needs_logits) {
    SampledToken st = l.sampler->sample(logits);
    p.next = st.id;
    p.logprob = sp.logprobs ? st.logprob : 0.0f;
    p.top = std::move(st.top_logprobs);
  } else if (l.device_logprob) {
    p.logprob = device_logprob;  // the greedy id's, from the device (SequenceRows::want_logprob)
    l.sampler->observe(p.next);
  }
  return p;
}

void EngineLoop::handle_output(Live& l, Picked&& p) {
  const SamplingParams& sp = l.req.sampling;
  const TokenId next = p.next;
  const float logprob = p.logprob;
  std::vector<TokenLogprobEntry> top = std::move(p.top);
  const auto now = Clock::now();
  if (!l.got_first) {
    l.got_first = true;
    l.first_token = now;
    l.timings.time_to_first_token = seconds_between(l.req.arrival, now);
  }
  l.last_token = now;
  l.generated.push_back(next);
  scheduler_.append_token(l.id, next);

  FinishReason reason = l.stop->append(next);
  if (!l.stop->is_stop_id(next)) {
    const std::string piece = l.text->push(next);
    if (l.transcription) {
      l.assembler->feed_token({next, piece, logprob, l.sampler->params().temperature}, l.events);
      l.fed += piece.size();
    } else {
      if (sp.logprobs) {
        const std::string_view bytes = tokenizer_.token_bytes(next);
        l.chat_logprobs.push_back(
            {utf8::sanitize(bytes), std::min(0.0, static_cast<double>(logprob)), std::string(bytes)});
        if (sp.top_logprobs > 0) {
          std::vector<TokenLogprob> alts;
          for (const TokenLogprobEntry& t : top) {
            const std::string_view b = tokenizer_.token_bytes(t.id);
            alts.push_back(
                {utf8::sanitize(b), std::min(0.0, static_cast<double>(t.logprob)), std::string(b)});
          }
          l.chat_top.push_back(std::move(alts));
        }
      }
      std::string out = piece;
      if (!l.stops->empty()) {
        StopStringMatcher::Step st = l.stops->feed(piece);
        out = std::move(st.text);
        if (st.stopped) reason = FinishReason::kStop;
      }
      l.chat_text += out;
      if (l.req.stream && !out.empty()) {
        RequestEvent e;
        e.type = RequestEvent::Type::kTextDelta;
        e.text = std::move(out);
        if (sp.logprobs) {
          e.logprobs.assign(l.chat_logprobs.begin() + static_cast<std::ptrdiff_t>(l.logprobs_sent),
                            l.chat_logprobs.end());
          if (!l.chat_top.empty()) {
            e.top_logprobs.assign(l.chat_top.begin() + static_cast<std::ptrdiff_t>(l.logprobs_sent),
                                  l.chat_top.end());
          }
          l.logprobs_sent = l.chat_logprobs.size();
        }
        emit(l, std::move(e));
      }
    }
  }
  bool recovered = false;
  if (l.transcription) {
    l.tok_end.push_back(l.fed);
    l.tok_logprob.push_back(logprob);
    l.tok_temp.push_back(l.sampler->params().temperature);
    if (reason == FinishReason::kNone && l.req.repetition_detection && !sp.ignore_eos) {
      if (auto cut = find_loop(l, next)) {
        reason = handle_loop(l, *cut);
        recovered = reason == FinishReason::kNone;
      }
    }
    flush_transcript_events(l);
  }
  if (reason == FinishReason::kNone && !l.req.forced_ids.empty() &&
      l.generated.size() >= l.req.forced_ids.size()) {
    reason = FinishReason::kStop;
  }
  // The context holds `limit` tokens (prompt and generated, as HF's max_length counts them); the
  // last one is never fed back, so a pool of `limit` positions is enough.
  const std::int64_t limit = context_limit();
  if (reason == FinishReason::kNone && limit > 0 &&
      static_cast<std::int64_t>(l.prompt.size() + l.generated.size()) >= limit) {
    reason = FinishReason::kLength;
  }
  if (opt_.fault_after_tokens > 0 && static_cast<int>(l.generated.size()) == opt_.fault_after_tokens) {
    fail_request(
        l,
        internal_error("injected engine fault after " + std::to_string(opt_.fault_after_tokens) + " tokens"),
        ErrorCause::kEngine);
    return;
  }
  if (reason == FinishReason::kNone && !recovered && next == runner_.spec().audio_token_id) {
    // Fed back, the placeholder would ask for a speech row the request does not have.
    fail_request(l, internal_error("the model generated the audio placeholder token " + std::to_string(next)),
                 ErrorCause::kEngine);
    return;
  }
  if (opt_.progress) {
    opt_.progress({reason == FinishReason::kNone ? TranscriptionProgress::Phase::kDecoding
                                                 : TranscriptionProgress::Phase::kDone,
                   static_cast<std::size_t>(l.id), static_cast<std::int64_t>(l.generated.size()),
                   sp.max_new_tokens,
                   decode_time_ > 0 ? static_cast<double>(local_.decode_rows_total) / decode_time_ : 0});
  }
  if (reason != FinishReason::kNone) finish_request(l, reason);
}

void EngineLoop::finish_request(Live& l, FinishReason reason) {
  RequestEvent done;
  done.type = RequestEvent::Type::kDone;
  done.finish_reason = reason;
  std::string tail = l.text->flush();
  if (l.transcription) {
    if (!tail.empty()) l.assembler->feed(tail, l.events);
    l.assembler->finish(l.events);
    flush_transcript_events(l);
    done.transcript = l.assembler->transcript();
    done.transcript.finish_reason = reason;
    if (!l.req.sampling.logprobs) done.transcript.logprobs.clear();
    done.text = done.transcript.text;
  } else {
    std::string out = std::move(tail);
    if (!l.stops->empty() && !l.stops->stopped()) {
      out = l.stops->feed(out).text;
      out += l.stops->flush();
    }
    l.chat_text += out;
    if (l.req.stream && !out.empty()) {
      RequestEvent e;
      e.type = RequestEvent::Type::kTextDelta;
      e.text = out;
      if (l.req.sampling.logprobs) {  // entries of tokens whose text was held back until now
        e.logprobs.assign(l.chat_logprobs.begin() + static_cast<std::ptrdiff_t>(l.logprobs_sent),
                          l.chat_logprobs.end());
        if (!l.chat_top.empty()) {
          e.top_logprobs.assign(l.chat_top.begin() + static_cast<std::ptrdiff_t>(l.logprobs_sent),
                                l.chat_top.end());
        }
        l.logprobs_sent = l.chat_logprobs.size();
      }
      emit(l, std::move(e));
    }
    done.text = l.chat_text;
    if (l.req.sampling.logprobs) {
      done.logprobs = l.chat_logprobs;
      done.top_logprobs = l.chat_top;
    }
  }
  done.usage.audio_tokens = l.audio_tokens;
  done.usage.text_tokens = static_cast<std::int64_t>(l.prompt.size()) - l.audio_tokens;
  done.usage.output_tokens = static_cast<std::int64_t>(l.generated.size()) + l.dropped;
  l.timings.inter_token_seconds = l.generated.size() > 1 ? seconds_between(l.first_token, l.last_token) /
                                                               static_cast<double>(l.generated.size() - 1)
                                                         : 0.0;
  done.timings = l.timings;
  done.prompt_ids = l.prompt;
  done.generated_ids = l.generated;
  l.terminal = true;
  scheduler_.finish(l.id);
  ++local_.requests_done;
  emit(l, std::move(done));
}

void EngineLoop::publish_stats() {
  local_.load.running = static_cast<std::int64_t>(scheduler_.running().size());
  local_.load.waiting = static_cast<std::int64_t>(scheduler_.waiting().size());
  local_.load.kv_blocks_used = scheduler_.kv().pool().used_blocks();
  local_.prefix_hit_blocks = scheduler_.kv().prefix_hit_blocks();
  local_.prefix_query_blocks = scheduler_.kv().prefix_query_blocks();
  local_.preemptions = scheduler_.preemptions();
  local_.busy = !live_.empty();
  std::lock_guard<std::mutex> lk(mu_);
  const bool paused = paused_ || pause_file_present_;
  stats_ = local_;
  stats_.paused = paused;
  encode_stats_ = encode_local_;
}

void EngineLoop::run() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (opt_.ready_delay.count() > 0) cv_.wait_for(lk, opt_.ready_delay, [&] { return stop_; });
  }
  if (opt_.warmup) warm_up();
  local_.last_step = Clock::now();
  publish_stats();  // before ready: whoever sees ready also sees the warm-up's counters
  ready_ = true;
  std::vector<std::unique_ptr<Live>> added;
  std::vector<RequestId> cancelled;
  bool stop = false;
  while (true) {
    take_inbox(added, cancelled, stop);
    admit_new(added);
    for (RequestId id : cancelled) {
      auto it = live_.find(id);
      if (it != live_.end())
        fail_request(*it->second, Status(StatusCode::kCancelled, "cancelled"), ErrorCause::kCancelled);
    }
    cancelled.clear();
    if (stop) break;
    check_deadlines();
    if (!paused_now()) {
      // The step first: its scheduling admits what just arrived, so that the encoder's choice
      // below (shortest remaining audio first) already sees a short request that came in during
      // a long one's segment, instead of running one more long segment before admitting it.
      run_step();
      encode_segments();
    }
    for (auto it = live_.begin(); it != live_.end();) {
      it = it->second->terminal ? live_.erase(it) : std::next(it);
    }
    publish_stats();
  }
  for (auto& [id, l] : live_) {
    fail_request(*l, Status(StatusCode::kCancelled, "the engine is shutting down"), ErrorCause::kShutdown);
  }
  live_.clear();
  std::vector<std::unique_ptr<Live>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left.swap(inbox_);
  }
  for (auto& l : left) {
    fail_request(*l, Status(StatusCode::kCancelled, "the engine is shutting down"), ErrorCause::kShutdown);
  }
  publish_stats();
}

}  // namespace vv
