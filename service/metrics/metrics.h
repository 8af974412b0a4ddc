// ServiceMetrics: every metric family of API.md §9 (proto/metrics.md) in one prometheus-cpp core
// registry, serialised in text format 0.0.4 by our own listener (GET /metrics). Created once at
// start and shared; prometheus-cpp metrics are thread-safe, so any thread may update them.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace vv::metrics {

struct BuildInfo {
  std::string version, git_sha, dtype, cuda;
};

class ServiceMetrics {
 public:
  explicit ServiceMetrics(const BuildInfo& build);
  // Replaces vibevoice_build_info's labels (the dtype and CUDA version are known once the model is
  // loaded on its device).
  void set_build_info(const BuildInfo& build);

  // The scrape body. `refresh` runs first (engine gauges, process gauges).
  std::string serialize();

  prometheus::Registry& registry() { return *registry_; }

  // Label helpers (closed sets, §9).
  static std::string route_label(std::string_view path, bool unprefixed_routes, std::string_view metrics_path);
  static std::string method_label(std::string_view method);

  prometheus::Gauge* ready;
  prometheus::Gauge* model_load_duration;
  prometheus::Family<prometheus::Counter>* http_requests;
  prometheus::Family<prometheus::Histogram>* http_request_duration;
  prometheus::Family<prometheus::Gauge>* http_in_flight;
  prometheus::Family<prometheus::Histogram>* http_request_size;
  prometheus::Gauge* http_connections;
  prometheus::Family<prometheus::Counter>* rejected;
  prometheus::Family<prometheus::Counter>* errors;
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Histogram>* request_duration;
  prometheus::Family<prometheus::Histogram>* queue_duration;
  prometheus::Family<prometheus::Histogram>* ttft;
  prometheus::Family<prometheus::Histogram>* inter_token;
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Gauge* max_running;
  prometheus::Gauge* max_waiting;
  prometheus::Family<prometheus::Counter>* audio_input_seconds;
  prometheus::Family<prometheus::Histogram>* audio_duration;
  prometheus::Histogram* audio_decode_duration;
  prometheus::Histogram* speech_encode_duration;
  prometheus::Family<prometheus::Histogram>* real_time_factor;
  prometheus::Family<prometheus::Counter>* prompt_tokens;
  prometheus::Family<prometheus::Counter>* generation_tokens;
  prometheus::Gauge* kv_pages_used;
  prometheus::Gauge* kv_pages_total;
  prometheus::Gauge* kv_page_tokens;
  prometheus::Family<prometheus::Counter>* engine_steps;
  prometheus::Family<prometheus::Histogram>* engine_step_duration;
  prometheus::Histogram* engine_batch_size;
  prometheus::Histogram* engine_batch_tokens;
  // Extension (not in API.md §9): the host time between two consecutive steps' runner calls
  // (StepReport::gap_seconds: scheduling, the plan, the last step's outputs), which the decoder waits.
  prometheus::Histogram* engine_host_gap;
  prometheus::Counter* preemptions;
  // Extensions (not in API.md §9; named after vLLM's prefix_cache_* pair): prompt tokens looked up
  // in the shared-prefix cache, and those found there (their KV computed once, shared).
  prometheus::Counter* prefix_cache_queries;
  prometheus::Counter* prefix_cache_hits;
  prometheus::Family<prometheus::Counter>* cancellations;
  prometheus::Family<prometheus::Counter>* repetition_recoveries;
  prometheus::Counter* parse_failures;
  prometheus::Family<prometheus::Gauge>* gpu_memory_used;
  prometheus::Family<prometheus::Gauge>* gpu_memory_total;
  prometheus::Family<prometheus::Gauge>* gpu_memory_allocated;
  prometheus::Gauge* realtime_sessions;
  prometheus::Family<prometheus::Counter>* realtime_sessions_total;
  prometheus::Family<prometheus::Counter>* realtime_items;
  prometheus::Gauge* realtime_buffered_audio;
  // process collector
  prometheus::Counter* process_cpu;
  prometheus::Gauge* process_rss;
  prometheus::Gauge* process_open_fds;
  prometheus::Gauge* process_max_fds;
  prometheus::Gauge* process_start_time;

  std::function<void()> refresh;  // set by the service: engine load → gauges

  // Buckets of §9.
  static prometheus::Histogram::BucketBoundaries duration_buckets();
  static prometheus::Histogram::BucketBoundaries short_duration_buckets();  // cut at 60
  static prometheus::Histogram::BucketBoundaries inter_token_buckets();

 private:
  void refresh_process();
  std::shared_ptr<prometheus::Registry> registry_;
  struct Declared {
    std::string name, help, type;
  };
  std::vector<Declared> declared_;
  double last_cpu_ = 0;
  std::mutex mu_;
  prometheus::Family<prometheus::Gauge>* build_info_ = nullptr;
  prometheus::Gauge* build_gauge_ = nullptr;
};

}  // namespace vv::metrics
