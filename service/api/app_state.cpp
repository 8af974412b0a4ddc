#include "service/api/app_state.h"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace vv::api {

AppState::AppState(config::Settings s, metrics::ServiceMetrics& m) : settings(std::move(s)), metrics(m) {}

void AppState::set_error(std::string reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_reason_ = std::move(reason);
  }
  readiness.store(Readiness::kError);
}

std::string AppState::error_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_reason_;
}

std::shared_ptr<void> AppState::acquire_key_slot(const Digest& key) {
  const std::int64_t limit = settings.i("auth.max_concurrent_requests_per_key");
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t& n = key_in_flight_[key];
  if (n >= limit) return nullptr;
  ++n;
  // The slot is released when the last copy of the returned pointer goes away.
  return std::shared_ptr<void>(static_cast<void*>(this), [this, key](void*) {
    std::lock_guard<std::mutex> l(mu_);
    if (--key_in_flight_[key] <= 0) key_in_flight_.erase(key);
  });
}

void AppState::note_engine_event() {
  last_engine_event_ns.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::uint64_t AppState::register_inflight(std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t id = next_inflight_++;
  inflight_[id] = std::move(cancel);
  return id;
}

void AppState::unregister_inflight(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  inflight_.erase(id);
}

void AppState::cancel_all_inflight() {
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, fn] : inflight_) fns.push_back(fn);
  }
  for (auto& fn : fns) fn();
}

std::size_t AppState::inflight_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_.size();
}

void AppState::track_tokens(RequestId id, const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  TokenCount& t = tokens_[id];
  t.endpoint = endpoint;
  t.counter = &metrics.generation_tokens->Add({{"endpoint", endpoint}});
}

void AppState::progress_tokens(RequestId id, std::int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tokens_.find(id);
  if (it == tokens_.end() || generated <= it->second.counted) return;
  it->second.counter->Increment(static_cast<double>(generated - it->second.counted));
  it->second.counted = generated;
}

void AppState::finish_tokens(RequestId id, std::int64_t generated) {
  progress_tokens(id, generated);
  std::lock_guard<std::mutex> lock(mu_);
  tokens_.erase(id);
}

void AppState::note_request_seconds(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (recent_.size() < 64) {
    recent_.push_back(s);
  } else {
    recent_[recent_next_++ % 64] = s;
  }
}

double AppState::recent_median_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (recent_.empty()) return 1.0;
  std::vector<double> v = recent_;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

Result<std::vector<Digest>> load_key_digests(const config::Settings& settings) {
  std::vector<Digest> out;
  for (const auto& k : settings.list("auth.api_keys")) out.push_back(sha256(k));
  const std::string& file = settings.s("auth.api_keys_file");
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return not_found("auth.api_keys_file: cannot read '" + file + "'");
    std::string line;
    while (std::getline(in, line)) {
      auto b = line.find_first_not_of(" \t\r");
      if (b == std::string::npos || line[b] == '#') continue;
      auto e = line.find_last_not_of(" \t\r");
      out.push_back(sha256(line.substr(b, e - b + 1)));
    }
  }
  return out;
}

}  // namespace vv::api
