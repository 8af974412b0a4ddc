// GenerationCall: one submitted request between the engine and its exchange — submission and
// admission errors, the RequestEvent stream posted back to the exchange's executor, queue-wait and
// deadline timers, cancellation (client gone, deadline, drain) and the generation metrics. The
// transcription and chat handlers derive from it and write their own bodies and frames.
// Lives on (and is only touched from) its exchange's executor; the engine's sink only posts.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "service/api/api.h"

namespace vv::api {

class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(const Api& api, std::shared_ptr<RequestInfo> info, std::shared_ptr<Exchange> exchange, bool stream);
  virtual ~GenerationCall();

  // Submits; on refusal answers 503. A stream starts (200 + SSE headers) once admitted.
  void start(Request request);

 protected:
  enum class CancelReason { kNone, kClient, kDeadline, kQueueTimeout, kShutdown };

  virtual http::HttpResponse stream_head();
  virtual void on_started() {}
  virtual void on_delta(const RequestEvent& ev) = 0;
  virtual void on_segment(const RequestEvent& ev) = 0;
  virtual void on_done(const RequestEvent& ev) = 0;
  // Last changes to a finished request before it is counted and answered (e.g. a loop cut).
  virtual void adjust_done(RequestEvent&) {}
  // The SSE frame of an in-stream error.
  virtual std::string error_frame(const ApiError& e) = 0;

  void write_frame(const std::string& json);  // "data: <json>\n\n"
  void finish_stream_ok();                    // "data: [DONE]\n\n", end of body
  void record_finish(std::string_view finish_reason);
  void fail(const ApiError& e);  // response or in-stream error
  void cancel(CancelReason reason);

  const Api& api_;
  AppState& state_;
  std::shared_ptr<RequestInfo> info_;
  std::shared_ptr<Exchange> exchange_;
  const bool stream_;
  bool engine_stream_ = false;  // ask the engine for deltas even when answering in one piece
  RequestId engine_id_ = 0;
  bool submitted_ = false;
  bool started_ = false;
  bool ended_ = false;
  CancelReason reason_ = CancelReason::kNone;
  std::chrono::steady_clock::time_point admitted_;
  std::chrono::steady_clock::time_point last_token_;
  bool have_token_ = false;
  double audio_seconds_ = 0;
  std::uint64_t inflight_id_ = 0;
  // Held from submission to the terminal event: the engine's sink only has a weak reference, and
  // nothing else need keep the call alive while it waits for events.
  std::shared_ptr<GenerationCall> keep_alive_;

 private:
  void on_event(const RequestEvent& ev);
};

}  // namespace vv::api
