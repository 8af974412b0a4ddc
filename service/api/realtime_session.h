// RealtimeSession: one live-transcription WebSocket session (API.md §11–§12) as a function of the
// client's messages, independent of the socket: it keeps the session object (GA or beta dialect),
// validates client events, buffers appended audio, runs the server VAD, commits items, transcribes
// them one at a time in commit order through the EngineClient, and emits the server events in the
// §12.1 order. The WebSocket connection (service/http/websocket_connection.h) implements the
// transport; unit tests implement it with a queue.
// Threading: every method runs on the transport's serial executor (post()); engine events are
// posted there too. The transport must outlive nothing: the session holds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "service/api/api.h"
#include "service/api/realtime_audio.h"

namespace vv::api {

// What a realtime connection needs from its socket. close() sends the close frame after the
// messages already queued; after it, send_text() is ignored.
class RealtimeTransport {
 public:
  virtual ~RealtimeTransport() = default;
  virtual void post(std::function<void()> fn) = 0;                   // thread-safe
  virtual void after(double seconds, std::function<void()> fn) = 0;  // dropped once closed
  virtual void send_text(std::string json) = 0;
  virtual void close(int code, std::string reason) = 0;
  virtual bool closed() const = 0;
};

// The result of an accepted §10.2 handshake.
struct RealtimeHandshake {
  bool beta = false;        // OpenAI-Beta: realtime=v1 or subprotocol openai-beta.realtime-v1
  std::string subprotocol;  // "realtime" when offered, else ""
  std::string model;        // the name the client sent in ?model= (alias or served), else the first served
  std::string request_id;   // the upgrade's x-request-id
  std::shared_ptr<void> session_slot;  // counts toward realtime.max_sessions while held
  std::shared_ptr<void> key_slot;      // per-key concurrency (§13.2) while held
};

// The session settings of §11.2.
struct RealtimeSettings {
  InputFormat format;
  std::string model;
  std::optional<std::string> language;
  std::string prompt;
  std::vector<std::string> keywords;
  bool vad = true;
  std::string vad_type = "server_vad";  // as the client named it (semantic_vad is mapped)
  std::optional<std::string> eagerness;
  VadOptions vad_options;
  std::string noise_reduction = "null";  // raw JSON, echoed
  bool logprobs = false;                 // include item.input_audio_transcription.logprobs
};

// Merges a session.update's `session` object (JSON text, GA or beta shape) into `current`; the
// error (code, param) when it is invalid, in which case nothing changes. `format_locked`: audio
// was already appended, so the input format may not change.
std::variant<RealtimeSettings, ApiError> merge_realtime_settings(const AppState& state,
                                                                 const RealtimeSettings& current,
                                                                 std::string_view session_json,
                                                                 bool format_locked);
// The defaults of a new session (realtime.* settings; the handshake's model).
RealtimeSettings default_realtime_settings(const AppState& state, const std::string& model);

class RealtimeSession : public std::enable_shared_from_this<RealtimeSession> {
 public:
  RealtimeSession(const Api& api, RealtimeHandshake handshake, std::shared_ptr<RealtimeTransport> transport);
  ~RealtimeSession();

  void start();  // sends session.created, arms the lifetime and idle timers
  void on_text(std::string_view message);
  void on_binary(std::string_view message);
  // The connection has ended (client close, protocol error, write failure): cancel the work.
  void on_closed();
  // The WebSocket is gone (close handshake done or socket dropped) and the connection has counted
  // the session in vibevoice_realtime_sessions_total: the open-sessions gauge drops now, so a
  // scrape that sees it lower also sees the session counted. Idempotent.
  void on_connection_ended();
  // §13.4 step 3: no more appends; close 1001 once committed items are done.
  void drain();
  // §13.4 step 4: remaining items fail with shutting_down, then close 1001.
  void shutdown();

  const std::string& id() const { return id_; }
  const RealtimeSettings& settings() const { return settings_; }
  std::string session_json() const;

 private:
  struct Item {
    std::string id;
    std::string previous_id;  // "" = null
    std::int64_t start_sample = 0;
    std::int64_t end_sample = 0;
    std::vector<float> samples;
  };

  void send(std::string type, std::string body);  // {"type":…,"event_id":…<body>}
  void send_error(const ApiError& e, const std::optional<std::string>& client_event_id);
  void close(int code, std::string reason);

  void append_bytes(std::string_view bytes, const std::optional<std::string>& event_id);
  void commit(std::string_view reason, std::int64_t end_sample, const std::optional<std::string>& event_id);
  void trim_idle_buffer();
  void pump();
  void start_item(audio::PreparedAudio audio);
  Request transcription_request(const std::string& suffix, audio::PreparedAudio audio) const;
  void on_engine_event(const RequestEvent& ev);
  void item_failed(const ApiError& e);
  void item_finished();
  void check_finish();
  void arm_idle_timer(double seconds);
  // Interim results (API.md §12.1 extension, realtime.interim_interval_ms > 0).
  void maybe_interim();
  void start_interim(std::uint64_t seq, const std::string& item_id, std::int64_t end_sample,
                     audio::PreparedAudio audio);
  void on_interim_event(std::uint64_t seq, const std::string& item_id, std::int64_t end_sample,
                        const RequestEvent& ev);
  void cancel_interim();
  void note_buffer();

  std::int64_t ms(std::int64_t sample) const;
  std::string new_id(std::string_view prefix) const;

  const Api& api_;
  AppState& state_;
  RealtimeHandshake hs_;
  std::shared_ptr<RealtimeTransport> transport_;
  std::string id_;
  RealtimeSettings settings_;
  SampleDecoder decoder_;
  VoiceActivityDetector vad_;
  bool appended_ = false;  // the format is fixed after the first append

  std::vector<float> buffer_;      // uncommitted audio
  std::int64_t buffer_start_ = 0;  // session sample of buffer_[0]
  std::int64_t total_samples_ = 0;
  std::string pending_item_id_;    // VAD: the item speech_started named
  std::int64_t speech_start_ = 0;  // VAD: start of the item (prefix padding included)
  std::string last_item_id_;
  double reported_buffer_s_ = 0;  // this session's share of vibevoice_realtime_buffered_audio_seconds

  std::deque<std::shared_ptr<Item>> queue_;
  std::shared_ptr<Item> current_;
  bool current_submitted_ = false;
  RequestId engine_id_ = 0;
  std::string current_text_;
  std::size_t current_segments_ = 0;
  std::chrono::steady_clock::time_point current_started_;
  std::size_t items_done_ = 0;
  std::int64_t pending_items_ = 0;  // queued + current, mirrored in AppState::realtime_items_pending

  bool finishing_ = false;
  bool draining_ = false;
  bool shutdown_ = false;
  bool closed_ = false;
  bool gauge_counted_ = false;  // start() raised the open-sessions gauge; on_connection_ended() lowers it
  std::chrono::steady_clock::time_point last_data_ = std::chrono::steady_clock::now();
  // Interim results: at most one re-transcription of the pending item's audio at a time; `seq`
  // moves on at every commit, so a result for audio that has since been committed is dropped.
  std::chrono::steady_clock::time_point last_interim_{};
  bool interim_busy_ = false;        // preparing or in the engine
  RequestId interim_engine_id_ = 0;  // 0 = not submitted
  std::uint64_t interim_seq_ = 0;
  std::uint64_t inflight_id_ = 0;
};

}  // namespace vv::api
