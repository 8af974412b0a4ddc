#include "service/api/generation_call.h"

namespace vv::api {
namespace {

ApiError server_error(int status, std::string code, std::string message, int retry_after = 0) {
  ApiError e;
  e.status = status;
  e.code = std::move(code);
  e.message = std::move(message);
  e.retry_after_s = retry_after;
  return e;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

GenerationCall::GenerationCall(const Api& api, std::shared_ptr<RequestInfo> info, std::shared_ptr<Exchange> exchange,
                               bool stream)
    : api_(api), state_(api.state()), info_(std::move(info)), exchange_(std::move(exchange)), stream_(stream) {}

GenerationCall::~GenerationCall() {
  if (inflight_id_) state_.unregister_inflight(inflight_id_);
}

http::HttpResponse GenerationCall::stream_head() {
  http::HttpResponse r;
  r.set("Content-Type", "text/event-stream");
  r.set("Cache-Control", "no-cache");
  r.set("X-Accel-Buffering", "no");
  return r;
}

void GenerationCall::start(Request request) {
  if (exchange_->disconnected()) return;
  request.stream = stream_ || engine_stream_;
  request.request_id = info_->request_id;
  request.arrival = std::chrono::steady_clock::now();
  request.deadline = info_->deadline;
  request.queue_deadline =
      request.arrival + std::chrono::microseconds(
                            static_cast<std::int64_t>(state_.settings.f("limits.max_queue_wait_s") * 1e6));
  admitted_ = request.arrival;
  std::weak_ptr<GenerationCall> weak = shared_from_this();
  std::shared_ptr<Exchange> ex = exchange_;
  AppState* state = &state_;
  auto sink = [weak, ex, state](RequestEvent&& ev) {
    state->note_engine_event();
    auto shared = std::make_shared<RequestEvent>(std::move(ev));
    ex->post([weak, shared] {
      if (auto self = weak.lock()) self->on_event(*shared);
    });
  };
  auto id = state_.engine->submit(std::move(request), std::move(sink));
  if (!id.is_ok() && id.status().code() != StatusCode::kResourceExhausted) {
    // The engine refused the request itself (not capacity): the request is at fault.
    ended_ = true;
    ApiError e;
    e.status = 400;
    e.code = "invalid_value";
    e.message = "The request was refused: " + id.status().message().substr(0, 200);
    exchange_->respond(api_.fail(info_.get(), e));
    return;
  }
  if (!id.is_ok()) {
    ended_ = true;
    state_.metrics.rejected->Add({{"reason", "queue_full"}}).Increment();
    int retry = static_cast<int>(state_.recent_median_seconds());
    exchange_->respond(api_.fail(info_.get(), server_error(503, "server_overloaded",
                                                           "The server is overloaded; retry later.", retry)));
    return;
  }
  engine_id_ = *id;
  submitted_ = true;
  state_.track_tokens(engine_id_, info_->endpoint);
  state_.engine_requests_in_flight.fetch_add(1);
  state_.note_engine_event();
  auto self = shared_from_this();
  keep_alive_ = self;
  exchange_->on_disconnect([weak] {
    if (auto s = weak.lock()) s->cancel(CancelReason::kClient);
  });
  inflight_id_ = state_.register_inflight([weak, ex] {
    ex->post([weak] {
      if (auto s = weak.lock()) s->cancel(CancelReason::kShutdown);
    });
  });
  exchange_->after(state_.settings.f("limits.max_queue_wait_s"), [weak] {
    auto s = weak.lock();
    if (s && !s->started_ && !s->ended_) s->cancel(CancelReason::kQueueTimeout);
  });
  const double to_deadline = std::chrono::duration<double>(info_->deadline - std::chrono::steady_clock::now()).count();
  exchange_->after(std::max(0.0, to_deadline), [weak] {
    auto s = weak.lock();
    if (s && !s->ended_) s->cancel(CancelReason::kDeadline);
  });
  if (stream_) exchange_->begin_stream(stream_head());
}

void GenerationCall::cancel(CancelReason reason) {
  if (ended_ || reason_ != CancelReason::kNone) return;
  reason_ = reason;
  const char* label = reason == CancelReason::kClient     ? "client_disconnect"
                      : reason == CancelReason::kDeadline ? "deadline"
                      : reason == CancelReason::kShutdown ? "shutdown"
                                                          : nullptr;
  if (label) state_.metrics.cancellations->Add({{"reason", label}}).Increment();
  if (reason == CancelReason::kQueueTimeout) state_.metrics.rejected->Add({{"reason", "queue_timeout"}}).Increment();
  if (submitted_) state_.engine->cancel(engine_id_);
}

void GenerationCall::write_frame(const std::string& json) { exchange_->write("data: " + json + "\n\n"); }

void GenerationCall::finish_stream_ok() {
  exchange_->write("data: [DONE]\n\n");
  exchange_->end_stream();
}

void GenerationCall::record_finish(std::string_view finish_reason) {
  auto& m = state_.metrics;
  m.requests->Add({{"endpoint", info_->endpoint}, {"finish_reason", std::string(finish_reason)}}).Increment();
  const double d = since(admitted_);
  m.request_duration
      ->Add({{"endpoint", info_->endpoint}, {"stream", stream_ ? "true" : "false"}},
            metrics::ServiceMetrics::duration_buckets())
      .Observe(d);
  state_.note_request_seconds(d);
}

void GenerationCall::fail(const ApiError& e) {
  if (stream_) {
    state_.metrics.errors->Add({{"endpoint", info_->endpoint}, {"code", e.code}}).Increment();
    exchange_->write("data: " + error_frame(e) + "\n\n");
    exchange_->end_stream();
  } else {
    exchange_->respond(api_.fail(info_.get(), e));
  }
}

void GenerationCall::on_event(const RequestEvent& ev) {
  if (ended_) return;
  // Released when this function returns after a terminal event.
  std::shared_ptr<GenerationCall> hold = ev.terminal() ? std::move(keep_alive_) : nullptr;
  auto& m = state_.metrics;
  switch (ev.type) {
    case RequestEvent::Type::kStarted:
      started_ = true;
      m.queue_duration->Add({{"endpoint", info_->endpoint}}, metrics::ServiceMetrics::short_duration_buckets())
          .Observe(since(admitted_));
      on_started();
      return;
    case RequestEvent::Type::kTextDelta:
    case RequestEvent::Type::kSegment:
      if (reason_ != CancelReason::kNone) return;
      if (ev.type == RequestEvent::Type::kTextDelta) {
        const auto now = std::chrono::steady_clock::now();
        if (have_token_) {
          m.inter_token->Add({{"endpoint", info_->endpoint}}, metrics::ServiceMetrics::inter_token_buckets())
              .Observe(std::chrono::duration<double>(now - last_token_).count());
        }
        have_token_ = true;
        last_token_ = now;
        on_delta(ev);
      } else {
        on_segment(ev);
      }
      return;
    case RequestEvent::Type::kDone: {
      ended_ = true;
      state_.engine_requests_in_flight.fetch_sub(1);
      if (reason_ == CancelReason::kClient) return;
      m.ttft->Add({{"endpoint", info_->endpoint}}, metrics::ServiceMetrics::short_duration_buckets())
          .Observe(ev.timings.time_to_first_token > 0 ? ev.timings.time_to_first_token : since(admitted_));
      m.prompt_tokens->Add({{"endpoint", info_->endpoint}, {"kind", "audio"}})
          .Increment(static_cast<double>(ev.usage.audio_tokens));
      m.prompt_tokens->Add({{"endpoint", info_->endpoint}, {"kind", "text"}})
          .Increment(static_cast<double>(ev.usage.text_tokens));
      state_.finish_tokens(engine_id_, ev.usage.output_tokens);
      if (ev.timings.encode_seconds > 0) m.speech_encode_duration->Observe(ev.timings.encode_seconds);
      if (audio_seconds_ > 0) {
        m.real_time_factor
            ->Add({{"endpoint", info_->endpoint}},
                  prometheus::Histogram::BucketBoundaries{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2})
            .Observe(since(admitted_) / audio_seconds_);
      }
      RequestEvent done = ev;
      adjust_done(done);
      record_finish(finish_reason_name(done.finish_reason));
      on_done(done);
      return;
    }
    case RequestEvent::Type::kError: {
      ended_ = true;
      state_.finish_tokens(engine_id_, 0);
      state_.engine_requests_in_flight.fetch_sub(1);
      if (reason_ == CancelReason::kClient) {
        record_finish("cancelled");
        return;
      }
      CancelReason r = reason_;
      if (r == CancelReason::kNone) {
        // The engine ended it by itself: its cause says why.
        if (ev.cause == ErrorCause::kDeadline ||
            (ev.cause == ErrorCause::kNone && ev.error.code() == StatusCode::kCancelled &&
             std::chrono::steady_clock::now() >= info_->deadline)) {
          r = CancelReason::kDeadline;
          state_.metrics.cancellations->Add({{"reason", "deadline"}}).Increment();
        } else if (ev.cause == ErrorCause::kQueueTimeout) {
          r = CancelReason::kQueueTimeout;
          state_.metrics.rejected->Add({{"reason", "queue_timeout"}}).Increment();
        } else if (ev.cause == ErrorCause::kShutdown) {
          r = CancelReason::kShutdown;
          state_.metrics.cancellations->Add({{"reason", "shutdown"}}).Increment();
        } else if (ev.cause == ErrorCause::kCapacity) {
          record_finish("error");
          ApiError e = server_error(503, "server_overloaded", "The request does not fit in the engine's memory.", 5);
          fail(e);
          return;
        } else if (ev.cause == ErrorCause::kInvalid) {
          record_finish("error");
          ApiError e = server_error(400, "invalid_value", ev.error.message().substr(0, 200));
          fail(e);
          return;
        }
      }
      switch (r) {
        case CancelReason::kDeadline:
          record_finish("cancelled");
          fail(server_error(504, "deadline_exceeded", "The request's deadline passed before it completed."));
          return;
        case CancelReason::kQueueTimeout:
          record_finish("cancelled");
          fail(server_error(503, "queue_timeout", "The request waited too long in the queue; retry later.",
                            static_cast<int>(state_.recent_median_seconds())));
          return;
        case CancelReason::kShutdown: {
          record_finish("cancelled");
          ApiError e = server_error(503, "shutting_down", "The server is shutting down; retry on another replica.", 5);
          e.close = true;
          fail(e);
          return;
        }
        default:
          record_finish("error");
          fail(server_error(500, "engine_error", "The engine failed while serving this request."));
          return;
      }
    }
  }
}

}  // namespace vv::api
