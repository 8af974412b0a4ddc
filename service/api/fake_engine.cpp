#include "service/api/fake_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/text/prompt_builder.h"
#include "engine/transcript/transcript_assembler.h"

namespace vv::api {

struct FakeEngine::Job {
  RequestId id = 0;
  Request request;
  EventSink sink;
  std::vector<TokenId> tokens;  // the answer, then the stop id
  std::size_t next = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t audio_tokens = 0;
  std::unique_ptr<TranscriptAssembler> assembler;
  std::string chat_text;
  std::size_t segments_sent = 0;
  Clock::time_point started;
  bool first_token = true;
  Clock::time_point first_token_at;
};

FakeEngine::FakeEngine(const Tokenizer& tokenizer, FakeEngineOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::int64_t> FakeEngine::prompt_tokens(std::int64_t frames, std::int64_t samples,
                                               const std::string& context) {
  {
    std::lock_guard<std::mutex> lock(prompt_mu_);
    if (last_prompt_.tokens >= 0 && last_prompt_.frames == frames && last_prompt_.samples == samples &&
        last_prompt_.context == context) {
      return last_prompt_.tokens;
    }
  }
  VV_ASSIGN_OR_RETURN(AsrPrompt prompt, build_asr_prompt(tokenizer_, frames, samples, context, true));
  const auto tokens = static_cast<std::int64_t>(prompt.ids.size());
  std::lock_guard<std::mutex> lock(prompt_mu_);
  last_prompt_ = {frames, samples, context, tokens};
  return tokens;
}

Result<RequestId> FakeEngine::submit(Request request, EventSink sink) {
  auto job = std::make_unique<Job>();
  const bool transcription = request.kind == Request::Kind::kTranscription;
  std::string answer;
  if (request.forced_ids.empty()) {
    if (transcription) {
      const double d = request.audio.empty() ? 0.0
                                             : static_cast<double>(request.audio[0].samples) / 24000.0;
      char buf[160];
      std::snprintf(buf, sizeof buf, "[{\"Start\":0.00,\"End\":%.2f,\"Speaker\":0,\"Content\":\"fake transcript\"}]", d);
      answer = buf;
    } else {
      answer = "Hello! This is the fake engine.";
    }
  }
  if (request.forced_ids.empty()) {
    auto ids = tokenizer_.encode(answer, /*parse_special=*/false);
    if (!ids.is_ok()) return ids.status();
    job->tokens = std::move(ids).value();
    job->tokens.push_back(kImEndId);
  } else {
    job->tokens = request.forced_ids;
  }
  for (const auto& a : request.audio) job->audio_tokens += a.frames;
  if (transcription) {
    // Only the counts: `cond ? PreparedAudio{} : audio[0]` would copy the whole clip.
    const std::int64_t frames = request.audio.empty() ? 0 : request.audio[0].frames;
    const std::int64_t samples = request.audio.empty() ? 0 : request.audio[0].samples;
    VV_ASSIGN_OR_RETURN(job->prompt_tokens, prompt_tokens(frames, samples, request.context));
    job->assembler = std::make_unique<TranscriptAssembler>(static_cast<double>(samples) / 24000.0);
  } else {
    job->prompt_tokens = static_cast<std::int64_t>(request.prompt_ids.size());
  }
  job->request = std::move(request);
  job->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(mu_);
  const auto in_flight = static_cast<std::int64_t>(waiting_.size() + running_.size());
  if (in_flight >= options_.max_running + options_.max_waiting) {
    return Status(StatusCode::kResourceExhausted, "the waiting queue is full");
  }
  job->id = next_id_++;
  const RequestId id = job->id;
  waiting_.push_back(std::move(job));
  cv_.notify_all();
  return id;
}

void FakeEngine::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

EngineLoad FakeEngine::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineLoad l;
  l.running = static_cast<std::int64_t>(running_.size());
  l.waiting = static_cast<std::int64_t>(waiting_.size());
  l.kv_blocks_total = 4096;
  for (const auto& j : running_) l.kv_blocks_used += (j->prompt_tokens + static_cast<std::int64_t>(j->next) + 15) / 16;
  l.max_running = options_.max_running;
  l.max_waiting = options_.max_waiting;
  l.ready = true;
  return l;
}

void FakeEngine::finish(Job& job, FinishReason reason) {
  RequestEvent ev;
  ev.type = RequestEvent::Type::kDone;
  ev.id = job.id;
  ev.finish_reason = reason;
  ev.usage.audio_tokens = job.audio_tokens;
  ev.usage.text_tokens = job.prompt_tokens - job.audio_tokens;
  ev.usage.output_tokens = static_cast<std::int64_t>(job.next);
  ev.timings.queue_seconds = std::chrono::duration<double>(job.started - job.request.arrival).count();
  ev.timings.time_to_first_token =
      job.first_token ? 0.0 : std::chrono::duration<double>(job.first_token_at - job.request.arrival).count();
  if (job.assembler) {
    std::vector<TranscriptEvent> out;
    job.assembler->finish(out);
    for (auto& te : out) {
      if (job.request.stream && te.kind == TranscriptEvent::Kind::kDelta && !te.delta.empty()) {
        RequestEvent d;
        d.type = RequestEvent::Type::kTextDelta;
        d.id = job.id;
        d.text = te.delta;
        job.sink(std::move(d));
      } else if (job.request.stream && te.kind == TranscriptEvent::Kind::kSegment) {
        RequestEvent s;
        s.type = RequestEvent::Type::kSegment;
        s.id = job.id;
        s.segment_index = te.segment_index;
        s.segment = job.assembler->transcript().segments[te.segment_index];
        job.sink(std::move(s));
      }
    }
    ev.transcript = job.assembler->transcript();
    ev.transcript.finish_reason = reason;
  } else {
    ev.text = job.chat_text;
  }
  job.sink(std::move(ev));
}

bool FakeEngine::step_job(Job& job) {
  const auto& hooks = options_.hooks;
  if (hooks.fault_after_tokens >= 0 && static_cast<std::int64_t>(job.next) >= hooks.fault_after_tokens) {
    RequestEvent ev;
    ev.type = RequestEvent::Type::kError;
    ev.id = job.id;
    ev.error = internal_error("injected engine fault after " + std::to_string(job.next) + " tokens");
    ev.cause = ErrorCause::kEngine;
    job.sink(std::move(ev));
    return false;
  }
  if (job.next >= job.tokens.size()) {
    finish(job, FinishReason::kStop);
    return false;
  }
  const TokenId id = job.tokens[job.next];
  if (std::find(job.request.sampling.stop_ids.begin(), job.request.sampling.stop_ids.end(), id) !=
      job.request.sampling.stop_ids.end()) {
    finish(job, FinishReason::kStop);
    return false;
  }
  if (static_cast<std::int64_t>(job.next) >= job.request.sampling.max_new_tokens) {
    finish(job, FinishReason::kLength);
    return false;
  }
  ++job.next;
  if (job.first_token) {
    job.first_token = false;
    job.first_token_at = Clock::now();
  }
  const std::string_view bytes = tokenizer_.token_bytes(id);
  if (job.assembler) {
    std::vector<TranscriptEvent> out;
    GeneratedToken gt{id, bytes, -0.01f, job.request.sampling.temperature};
    job.assembler->feed_token(gt, out);
    if (job.request.stream) {
      std::string delta;
      std::vector<TokenLogprob> lps;
      auto flush = [&] {
        if (delta.empty()) return;
        RequestEvent d;
        d.type = RequestEvent::Type::kTextDelta;
        d.id = job.id;
        d.text = std::move(delta);
        if (job.request.sampling.logprobs) {
          TokenLogprob lp;
          lp.token = std::string(bytes);
          lp.bytes = std::string(bytes);
          lp.logprob = -0.01;
          d.logprobs.push_back(lp);
        }
        job.sink(std::move(d));
        delta.clear();
      };
      for (auto& te : out) {
        if (te.kind == TranscriptEvent::Kind::kDelta) {
          delta += te.delta;
        } else {
          flush();
          RequestEvent s;
          s.type = RequestEvent::Type::kSegment;
          s.id = job.id;
          s.segment_index = te.segment_index;
          s.segment = job.assembler->transcript().segments[te.segment_index];
          job.sink(std::move(s));
        }
      }
      flush();
    }
  } else {
    const std::size_t before = job.chat_text.size();
    job.chat_text.append(bytes);
    // Stop strings: cut before the first match, not included.
    for (const auto& s : job.request.stop_strings) {
      auto at = job.chat_text.find(s);
      if (!s.empty() && at != std::string::npos) {
        job.chat_text.resize(at);
        if (job.request.stream && at > before) {
          RequestEvent d;
          d.type = RequestEvent::Type::kTextDelta;
          d.id = job.id;
          d.text = job.chat_text.substr(before);
          job.sink(std::move(d));
        }
        finish(job, FinishReason::kStop);
        return false;
      }
    }
    if (job.request.stream) {
      RequestEvent d;
      d.type = RequestEvent::Type::kTextDelta;
      d.id = job.id;
      d.text = job.chat_text.substr(before);
      if (!d.text.empty()) job.sink(std::move(d));
    }
  }
  return true;
}

void FakeEngine::run() {
  using namespace std::chrono;
  for (;;) {
    std::vector<std::unique_ptr<Job>> dropped;
    std::vector<std::unique_ptr<Job>> timed_out;
    std::vector<Job*> step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, milliseconds(20), [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) return;
      // Cancellations first: removed before the next step (queued or running).
      for (RequestId id : cancelled_) {
        auto match = [&](const std::unique_ptr<Job>& j) { return j->id == id; };
        if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
          dropped.push_back(std::move(*it));
          waiting_.erase(it);
        }
        if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
          dropped.push_back(std::move(*it));
          running_.erase(it);
        }
      }
      cancelled_.clear();
      // Requests still waiting past their queue deadline leave the queue.
      const auto now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->request.queue_deadline && now >= *(*it)->request.queue_deadline) {
          timed_out.push_back(std::move(*it));
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      const bool paused = options_.hooks.paused();
      if (!paused) {
        while (!waiting_.empty() && static_cast<std::int64_t>(running_.size()) < options_.max_running) {
          running_.push_back(std::move(waiting_.front()));
          waiting_.pop_front();
          running_.back()->started = Clock::now();
          RequestEvent ev;
          ev.type = RequestEvent::Type::kStarted;
          ev.id = running_.back()->id;
          running_.back()->sink(std::move(ev));
        }
        for (auto& j : running_) step.push_back(j.get());
      }
    }
    for (auto& j : dropped) {
      RequestEvent ev;
      ev.type = RequestEvent::Type::kError;
      ev.id = j->id;
      ev.error = Status(StatusCode::kCancelled, "cancelled");
      ev.cause = ErrorCause::kCancelled;
      j->sink(std::move(ev));
    }
    for (auto& j : timed_out) {
      RequestEvent ev;
      ev.type = RequestEvent::Type::kError;
      ev.id = j->id;
      ev.error = Status(StatusCode::kCancelled, "queue timeout");
      ev.cause = ErrorCause::kQueueTimeout;
      j->sink(std::move(ev));
    }
    // Deadlines, as the real loop does: a passed deadline cancels at the next step.
    std::vector<RequestId> ended;
    for (Job* j : step) {
      if (j->request.deadline && Clock::now() >= *j->request.deadline) {
        RequestEvent ev;
        ev.type = RequestEvent::Type::kError;
        ev.id = j->id;
        ev.error = Status(StatusCode::kCancelled, "deadline exceeded");
        ev.cause = ErrorCause::kDeadline;
        j->sink(std::move(ev));
        ended.push_back(j->id);
        continue;
      }
      if (!step_job(*j)) ended.push_back(j->id);
    }
    if (!ended.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      std::erase_if(running_, [&](const std::unique_ptr<Job>& j) {
        return std::find(ended.begin(), ended.end(), j->id) != ended.end();
      });
    }
    if (options_.hooks.token_delay_ms > 0 && !step.empty()) {
      std::this_thread::sleep_for(milliseconds(options_.hooks.token_delay_ms));
    }
  }
}

}  // namespace vv::api
