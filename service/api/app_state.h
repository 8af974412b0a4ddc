// AppState: what every handler reads — the settings, the engine (once loaded), the tokenizer,
// readiness and drain state, the API-key digests and per-key in-flight counts, the metrics.
// Created once by `vibevoice serve`; the atomics and the mutex-guarded parts may be touched from
// any thread; the rest is immutable after start.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/settings.h"
#include "engine/audio/audio_preparer.h"
#include "engine/text/tokenizer.h"
#include "scheduler/request.h"
#include "service/api/sha256.h"
#include "service/api/test_hooks.h"
#include "service/metrics/metrics.h"

namespace vv::api {

enum class Readiness { kLoading, kWarmingUp, kReady, kError };

class AppState {
 public:
  AppState(config::Settings settings, metrics::ServiceMetrics& metrics);

  const config::Settings settings;
  metrics::ServiceMetrics& metrics;
  TestHooks hooks;
  std::string version = "0.0.0";
  std::string git_sha;      // 40 hex
  std::string build_date;   // RFC 3339
  // The CUDA runtime version /version reports ("" = null: a CPU device or a CPU-only build); set
  // before the server's threads start.
  std::string cuda;
  // The compute dtype /version reports: set at start, resolved by the loader thread once the
  // checkpoint is open (model.dtype auto on a GPU is the checkpoint's).
  void set_dtype(std::string d) {
    std::lock_guard<std::mutex> lk(mu_);
    dtype_ = std::move(d);
  }
  std::string dtype() const {
    std::lock_guard<std::mutex> lk(mu_);
    return dtype_;
  }
  std::int64_t start_unix = 0;

  // Lifecycle.
  std::atomic<Readiness> readiness{Readiness::kLoading};
  std::atomic<double> load_progress{0.0};
  std::atomic<bool> draining{false};   // §13.4 step 1: /ready 503
  std::atomic<bool> refusing{false};   // §13.4 step 3: new requests 503 shutting_down
  void set_error(std::string reason);
  std::string error_reason() const;

  // Set once the weights are loaded (before readiness becomes kReady); then immutable.
  std::shared_ptr<EngineClient> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  audio::PrepareOptions prepare;

  // The scripted decoder (VIBEVOICE_TEST_SCRIPT): forced ids for transcriptions (and chat with
  // hooks.script_chat); empty = off.
  std::vector<TokenId> script_ids;

  // Runs blocking work (audio decode) off the I/O threads.
  std::function<void(std::function<void()>)> run_blocking;

  // Auth (§0.5).
  std::vector<Digest> key_digests;
  bool auth_enabled() const { return !key_digests.empty(); }
  // Per-key concurrency (§13.2): a slot is held while the request is in flight.
  std::shared_ptr<void> acquire_key_slot(const Digest& key);  // null when the key is at its limit

  // Open WebSocket sessions (realtime.max_sessions, §10.2).
  std::atomic<std::int64_t> realtime_sessions{0};
  // Committed realtime items not yet completed/failed: the drain (§13.4 step 4) waits for them.
  std::atomic<std::int64_t> realtime_items_pending{0};

  // Engine stall watch (§8): the last time any engine event arrived, and requests in flight.
  std::atomic<std::int64_t> last_engine_event_ns{0};
  std::atomic<std::int64_t> engine_requests_in_flight{0};
  void note_engine_event();

  // Work in flight that a drain must be able to cancel (§13.4 step 4): id → cancel function.
  std::uint64_t register_inflight(std::function<void()> cancel);
  void unregister_inflight(std::uint64_t id);
  void cancel_all_inflight();
  std::size_t inflight_count() const;

  // vibevoice_generation_tokens_total as tokens are generated (the engine's progress reports), not
  // only when a request ends: track() after submit, progress() from the engine thread, finish() at
  // the end (counts the remainder, then forgets the id).
  void track_tokens(RequestId id, const std::string& endpoint);
  void progress_tokens(RequestId id, std::int64_t generated);
  void finish_tokens(RequestId id, std::int64_t generated);

  // Median of recent request durations (for Retry-After estimates).
  void note_request_seconds(double s);
  double recent_median_seconds() const;

 private:
  mutable std::mutex mu_;
  std::string dtype_ = "float32";
  std::string error_reason_;
  std::map<Digest, std::int64_t> key_in_flight_;
  std::vector<double> recent_;
  std::map<std::uint64_t, std::function<void()>> inflight_;
  struct TokenCount {
    std::string endpoint;
    std::int64_t counted = 0;
    prometheus::Counter* counter = nullptr;  // generation_tokens{endpoint}, looked up once
  };
  std::map<RequestId, TokenCount> tokens_;
  std::uint64_t next_inflight_ = 1;
  std::size_t recent_next_ = 0;
};

// Reads auth.api_keys and auth.api_keys_file into digests; an error names the file.
Result<std::vector<Digest>> load_key_digests(const config::Settings& settings);

}  // namespace vv::api
