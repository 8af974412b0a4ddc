#include "service/metrics/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace vv::metrics {
namespace {

using prometheus::Histogram;

Histogram::BucketBoundaries ladder_to(double cut) {
  Histogram::BucketBoundaries all{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
  Histogram::BucketBoundaries out;
  for (double b : all) {
    if (b <= cut) out.push_back(b);
  }
  return out;
}

}  // namespace

Histogram::BucketBoundaries ServiceMetrics::duration_buckets() { return ladder_to(1800); }
Histogram::BucketBoundaries ServiceMetrics::short_duration_buckets() { return ladder_to(60); }
Histogram::BucketBoundaries ServiceMetrics::inter_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28};
}

ServiceMetrics::ServiceMetrics(const BuildInfo& build) : registry_(std::make_shared<prometheus::Registry>()) {
  auto& R = *registry_;
  auto counter = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Counter>* {
    declared_.push_back({name, help, "counter"});
    return &prometheus::BuildCounter().Name(name).Help(help).Register(R);
  };
  auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>* {
    declared_.push_back({name, help, "gauge"});
    return &prometheus::BuildGauge().Name(name).Help(help).Register(R);
  };
  auto histogram = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Histogram>* {
    declared_.push_back({name, help, "histogram"});
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(R);
  };
  build_info_ = gauge("vibevoice_build_info", "Build identity (always 1)");
  build_gauge_ = &build_info_->Add(
      {{"version", build.version}, {"git_sha", build.git_sha}, {"dtype", build.dtype}, {"cuda", build.cuda}});
  build_gauge_->Set(1);
  ready = &gauge("vibevoice_ready", "1 when /ready would return 200")->Add({});
  model_load_duration = &gauge("vibevoice_model_load_duration_seconds", "Time from start to weights loaded")->Add({});
  http_requests = counter("vibevoice_http_requests_total", "HTTP responses sent");
  http_request_duration =
      histogram("vibevoice_http_request_duration_seconds", "Headers received to last byte written");
  http_in_flight = gauge("vibevoice_http_requests_in_flight", "HTTP requests being handled");
  http_request_size = histogram("vibevoice_http_request_size_bytes", "Request body bytes");
  http_connections = &gauge("vibevoice_http_connections", "Open client TCP connections")->Add({});
  rejected = counter("vibevoice_requests_rejected_total", "Admission refusals");
  errors = counter("vibevoice_errors_total", "API errors returned (HTTP or in-stream)");
  requests = counter("vibevoice_requests_total", "Generation requests finished");
  request_duration = histogram("vibevoice_request_duration_seconds", "Admission to last byte");
  queue_duration = histogram("vibevoice_queue_duration_seconds", "Admission to first scheduled");
  ttft = histogram("vibevoice_time_to_first_token_seconds", "Admission to first generated token");
  inter_token = histogram("vibevoice_inter_token_latency_seconds", "Gap between consecutive generated tokens");
  running = &gauge("vibevoice_requests_running", "Sequences in the running batch")->Add({});
  waiting = &gauge("vibevoice_requests_waiting", "Admitted requests not yet running")->Add({});
  max_running = &gauge("vibevoice_max_running_requests", "Configured running slots")->Add({});
  max_waiting = &gauge("vibevoice_max_waiting_requests", "Configured waiting queue size")->Add({});
  audio_input_seconds = counter("vibevoice_audio_input_seconds_total", "Seconds of decoded audio accepted");
  audio_duration = histogram("vibevoice_audio_duration_seconds", "Per-request audio duration");
  audio_decode_duration = &histogram("vibevoice_audio_decode_duration_seconds", "Container decode + resample time")
                               ->Add({}, duration_buckets());
  speech_encode_duration =
      &histogram("vibevoice_speech_encode_duration_seconds", "Acoustic + semantic tokenizer time")
           ->Add({}, duration_buckets());
  real_time_factor = histogram("vibevoice_real_time_factor", "Processing time / audio duration");
  prompt_tokens = counter("vibevoice_prompt_tokens_total", "Prompt tokens processed");
  generation_tokens = counter("vibevoice_generation_tokens_total", "Tokens generated");
  kv_pages_used = &gauge("vibevoice_kv_cache_pages_used", "KV pages in use")->Add({});
  kv_pages_total = &gauge("vibevoice_kv_cache_pages_total", "KV pages allocated")->Add({});
  kv_page_tokens = &gauge("vibevoice_kv_cache_page_tokens", "Tokens per KV page")->Add({});
  engine_steps = counter("vibevoice_engine_steps_total", "Engine steps run");
  engine_step_duration = histogram("vibevoice_engine_step_duration_seconds", "Wall time per step");
  engine_batch_size = &histogram("vibevoice_engine_batch_size", "Sequences per step")
                           ->Add({}, Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
  engine_batch_tokens =
      &histogram("vibevoice_engine_batch_tokens", "Tokens per step")
           ->Add({}, Histogram::BucketBoundaries{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536});
  engine_host_gap = &histogram("vibevoice_engine_host_gap_seconds",
                               "Host time between consecutive engine steps' runner calls")
                         ->Add({}, Histogram::BucketBoundaries{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                                                               2.5e-3, 5e-3, 1e-2, 2.5e-2, 1e-1});
  preemptions = &counter("vibevoice_preemptions_total", "Sequences evicted for KV pressure")->Add({});
  prefix_cache_queries =
      &counter("vibevoice_prefix_cache_queries_total", "Prompt tokens looked up in the shared-prefix cache")
           ->Add({});
  prefix_cache_hits =
      &counter("vibevoice_prefix_cache_hits_total", "Prompt tokens whose KV was found shared (computed once)")
           ->Add({});
  cancellations = counter("vibevoice_cancellations_total", "Requests cancelled");
  repetition_recoveries = counter("vibevoice_repetition_recoveries_total", "Repetition loop recoveries");
  parse_failures =
      &counter("vibevoice_output_parse_failures_total", "Model output not parseable as segments")->Add({});
  gpu_memory_used = gauge("vibevoice_gpu_memory_used_bytes", "Device memory used (driver view)");
  gpu_memory_total = gauge("vibevoice_gpu_memory_total_bytes", "Device memory total (driver view)");
  gpu_memory_allocated = gauge("vibevoice_gpu_memory_allocated_bytes", "Process device allocations");
  realtime_sessions = &gauge("vibevoice_realtime_sessions", "Open WebSocket sessions")->Add({});
  realtime_sessions_total = counter("vibevoice_realtime_sessions_total", "WebSocket sessions ended");
  realtime_items = counter("vibevoice_realtime_items_total", "Realtime items transcribed");
  realtime_buffered_audio =
      &gauge("vibevoice_realtime_buffered_audio_seconds", "Uncommitted audio across sessions")->Add({});
  process_cpu = &counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds")->Add({});
  process_rss = &gauge("process_resident_memory_bytes", "Resident memory size in bytes")->Add({});
  process_open_fds = &gauge("process_open_fds", "Number of open file descriptors")->Add({});
  process_max_fds = &gauge("process_max_fds", "Maximum number of open file descriptors")->Add({});
  process_start_time = &gauge("process_start_time_seconds", "Start time of the process since unix epoch")->Add({});
  process_start_time->Set(static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()));
  // Zero-valued children of the closed label sets that dashboards and tests read before the
  // first event.
  for (const char* r : {"client_disconnect", "deadline", "shutdown"}) cancellations->Add({{"reason", r}});
  for (const char* r : {"not_ready", "shutting_down", "queue_full", "queue_timeout", "rate_limited",
                        "too_many_connections"}) {
    rejected->Add({{"reason", r}});
  }
  for (const char* o : {"recovered", "gave_up"}) repetition_recoveries->Add({{"outcome", o}});
}

void ServiceMetrics::refresh_process() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    if (cpu > last_cpu_) {
      process_cpu->Increment(cpu - last_cpu_);
      last_cpu_ = cpu;
    }
  }
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_rss = 0;
  if (statm >> pages_total >> pages_rss) process_rss->Set(static_cast<double>(pages_rss) * sysconf(_SC_PAGESIZE));
  std::error_code ec;
  std::size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  process_open_fds->Set(static_cast<double>(fds));
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) process_max_fds->Set(static_cast<double>(rl.rlim_cur));
}

void ServiceMetrics::set_build_info(const BuildInfo& build) {
  std::lock_guard<std::mutex> lock(mu_);
  build_info_->Remove(build_gauge_);
  build_gauge_ = &build_info_->Add(
      {{"version", build.version}, {"git_sha", build.git_sha}, {"dtype", build.dtype}, {"cuda", build.cuda}});
  build_gauge_->Set(1);
}

std::string ServiceMetrics::serialize() {
  std::lock_guard<std::mutex> lock(mu_);
  refresh_process();
  if (refresh) refresh();
  std::string text = prometheus::TextSerializer().Serialize(registry_->Collect());
  // Families without samples yet (labelled families before their first event, GPU gauges on the
  // CPU) still get their HELP/TYPE lines, so every §9 family is always listed.
  for (const auto& d : declared_) {
    if (text.find("# TYPE " + d.name + " ") == std::string::npos) {
      text += "# HELP " + d.name + " " + d.help + "\n# TYPE " + d.name + " " + d.type + "\n";
    }
  }
  return text;
}

std::string ServiceMetrics::route_label(std::string_view path, bool unprefixed, std::string_view metrics_path) {
  std::string p(path);
  if (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p == metrics_path) return "/metrics";
  static const char* kFixed[] = {"/health", "/healthz", "/livez", "/ready", "/readyz", "/version"};
  for (const char* f : kFixed) {
    if (p == f) return p;
  }
  std::string v1 = p;
  if (p.rfind("/v1/", 0) != 0) {
    if (!unprefixed) return "other";
    v1 = "/v1" + p;
  }
  static const char* kV1[] = {"/v1/audio/transcriptions", "/v1/audio/translations", "/v1/chat/completions",
                              "/v1/models", "/v1/realtime"};
  for (const char* r : kV1) {
    if (v1 == r) return v1;
  }
  if (v1.rfind("/v1/models/", 0) == 0 && v1.size() > 11) return "/v1/models/{id}";
  return "other";
}

std::string ServiceMetrics::method_label(std::string_view m) {
  if (m == "GET" || m == "POST" || m == "OPTIONS" || m == "HEAD") return std::string(m);
  return "other";
}

}  // namespace vv::metrics
