// `vibevoice serve`: the OpenAI-compatible HTTP service (API.md). Validates the settings (exit 2),
// binds the listener (exit 1 if it cannot), then loads the weights in the background while
// /health and /ready already answer, warms up, becomes ready, and drains on SIGTERM/SIGINT (§13.4).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <spdlog/spdlog.h>

#include "config/settings.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/text/tokenizer.h"
#include "kernels/device/backend_factory.h"
#include "service/api/api.h"
#include "service/api/app_state.h"
#include "service/api/engine_factory.h"
#include "service/api/service_log.h"
#include "service/api/test_hooks.h"
#include "service/cli/commands.h"
#include "service/http/http_server.h"
#include "service/metrics/metrics.h"

extern char** environ;

namespace vv::cli {
namespace {

namespace fs = std::filesystem;
using std::chrono::steady_clock;

std::string build_date() {
  // The binary's build time (RFC 3339), from the compiler's __DATE__/__TIME__.
  std::tm tm{};
  std::istringstream in(std::string(__DATE__) + " " + __TIME__);
  in >> std::get_time(&tm, "%b %d %Y %H:%M:%S");
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string full_sha() {
  std::string sha = VV_GIT_SHA;
  if (sha.size() != 40) sha = std::string(40, '0');
  return sha;
}

struct Loader {
  std::thread thread;
  std::atomic<bool> done{false};
  std::atomic<bool> failed{false};
  std::string error;
};

// Background: tokenizer, checkpoint, engine, warm-up. Sets readiness; on failure `failed`.
void load_model(api::AppState& state, Loader& loader, std::shared_ptr<api::EngineHandle>& handle) {
  const auto t0 = steady_clock::now();
  const auto& s = state.settings;
  auto fail = [&](const std::string& why) {
    loader.error = why;
    state.set_error(why);
    loader.failed = true;
    loader.done = true;
  };
  auto delay_progress = [&](double upto) {
    // The load-delay hook: progress rises linearly over the delay.
    const auto total = std::chrono::milliseconds(state.hooks.load_delay_ms);
    while (steady_clock::now() - t0 < total * upto) {
      const double p = std::chrono::duration<double>(steady_clock::now() - t0).count() /
                       std::max(1e-9, std::chrono::duration<double>(total).count());
      state.load_progress.store(std::min(upto, p));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  const std::string tok_path =
      s.s("model.tokenizer").empty() ? (fs::path(s.s("model.path")) / "tokenizer.json").string() : s.s("model.tokenizer");
  auto tok = Tokenizer::load_file(tok_path);
  if (!tok.is_ok()) return fail("tokenizer: " + tok.status().to_string());
  state.load_progress.store(0.05);
  delay_progress(0.5);
  auto engine = api::make_engine(state, std::shared_ptr<const Tokenizer>(std::move(tok).value()),
                                 [&](double p) { state.load_progress.store(std::max(state.load_progress.load(), p)); });
  if (!engine.is_ok()) return fail(engine.status().to_string());
  handle = std::move(engine).value();
  delay_progress(1.0);
  state.load_progress.store(1.0);
  state.metrics.model_load_duration->Set(std::chrono::duration<double>(steady_clock::now() - t0).count());
  state.tokenizer = handle->tokenizer;
  state.prepare = handle->prepare;
  if (handle->dtype != state.dtype()) {
    state.set_dtype(handle->dtype);
    state.metrics.set_build_info(
        {state.version, state.git_sha, handle->dtype, state.cuda.empty() ? "none" : state.cuda});
  }
  api::service_log::log("info", "compute dtype", {{"dtype", handle->dtype}, {"cuda", state.cuda}});
  state.engine = handle->engine;
  state.readiness.store(api::Readiness::kWarmingUp);
  if (s.b("model.warmup")) {
    Status w = api::warm_up(*handle);
    if (!w.is_ok()) return fail("warm-up: " + w.to_string());
  }
  state.readiness.store(api::Readiness::kReady);
  state.metrics.ready->Set(1);
  api::service_log::log("info", "ready",
                        {{"model", s.list("model.served_names").front()},
                         {"#load_seconds", std::to_string(std::chrono::duration<double>(steady_clock::now() - t0).count())}});
  loader.done = true;
}

int run_serve(const std::vector<std::string>& args) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  config::LoadOutcome cfg = config::load_settings(args, env);
  if (cfg.help) {
    std::cout << config::settings_help();
    return 0;
  }
  if (cfg.version) {
    std::cout << "vibevoice " << version_string() << "\n";
    return 0;
  }
  for (const auto& w : cfg.warnings) std::cerr << w << "\n";
  if (!cfg.errors.empty()) {
    for (const auto& e : cfg.errors) std::cerr << e << "\n";
    return 2;
  }
  if (cfg.print_config) {
    std::cout << cfg.settings.to_toml();
    return 0;
  }
  if (cfg.check_config) {
    std::cerr << "config ok\n";
    return 0;
  }
  const config::Settings& s = cfg.settings;
  api::service_log::init(s.s("log.level"), s.s("log.format"));

  // Signals are taken by the main thread only (sigtimedwait), so block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The device decides the reported CUDA version now; the dtype (model.dtype auto on a GPU is the
  // checkpoint's) is resolved again once the checkpoint is open (load_model).
  auto compute = api::choose_compute(s, {});
  if (!compute.is_ok()) {
    std::cerr << "config error: model.device: " << compute.status().message() << " (from "
              << s.source("model.device") << ")\n";
    return 2;
  }
  const std::string cuda_version = compute->gpu ? gpu_runtime_version() : std::string();
  metrics::ServiceMetrics metrics(
      {VV_VERSION, full_sha(), compute->dtype, cuda_version.empty() ? "none" : cuda_version});
  api::AppState state(s, metrics);
  state.hooks = api::TestHooks::from_environment();
  state.version = VV_VERSION;
  state.git_sha = full_sha();
  state.build_date = build_date();
  state.set_dtype(compute->dtype);
  state.cuda = cuda_version;
  state.start_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto keys = api::load_key_digests(s);
  if (!keys.is_ok()) {
    std::cerr << "config error: auth.api_keys_file: " << keys.status().message() << " (from "
              << s.source("auth.api_keys_file") << ")\n";
    return 2;
  }
  state.key_digests = std::move(keys).value();
  metrics.max_running->Set(static_cast<double>(s.i("engine.max_running_requests")));
  metrics.max_waiting->Set(static_cast<double>(s.i("engine.max_waiting_requests")));
  metrics.kv_page_tokens->Set(static_cast<double>(s.i("engine.kv_page_tokens")));

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int decode_threads = s.i("engine.audio_decode_threads") > 0 ? static_cast<int>(s.i("engine.audio_decode_threads"))
                                                                    : static_cast<int>(std::min(8u, cores));
  boost::asio::thread_pool decode_pool(static_cast<std::size_t>(decode_threads));
  state.run_blocking = [&decode_pool](std::function<void()> fn) { boost::asio::post(decode_pool, std::move(fn)); };

  // Engine gauges are read at scrape time (never synchronising with the device); the engine's
  // cumulative counters (EngineStats) move the Prometheus counters by what they grew since the
  // last scrape (serialize() runs this under the metrics lock, so `seen` needs no other).
  const double page_tokens = static_cast<double>(s.i("engine.kv_page_tokens"));
  metrics.refresh = [&state, &metrics, page_tokens, seen = EngineStats{}]() mutable {
    metrics.ready->Set(state.readiness.load() == api::Readiness::kReady && !state.draining.load() ? 1 : 0);
    if (!state.engine) return;
    const EngineStats st = state.engine->stats();
    const EngineLoad& l = st.load;
    metrics.running->Set(static_cast<double>(l.running));
    metrics.waiting->Set(static_cast<double>(l.waiting));
    metrics.kv_pages_used->Set(static_cast<double>(l.kv_blocks_used));
    metrics.kv_pages_total->Set(static_cast<double>(l.kv_blocks_total));
    auto grow = [](prometheus::Counter& c, std::int64_t now, std::int64_t& before, double scale = 1.0) {
      if (now < before) before = 0;  // a replaced engine counts from 0 again
      if (now > before) c.Increment(static_cast<double>(now - before) * scale);
      before = now;
    };
    grow(*metrics.preemptions, st.preemptions, seen.preemptions);
    grow(*metrics.prefix_cache_queries, st.prefix_query_blocks, seen.prefix_query_blocks, page_tokens);
    grow(*metrics.prefix_cache_hits, st.prefix_hit_blocks, seen.prefix_hit_blocks, page_tokens);
    grow(metrics.repetition_recoveries->Add({{"outcome", "recovered"}}), st.repetition_recovered,
         seen.repetition_recovered);
    grow(metrics.repetition_recoveries->Add({{"outcome", "gave_up"}}), st.repetition_gave_up,
         seen.repetition_gave_up);
  };

  api::Api api(state);
  http::ServerLimits limits;
  limits.max_connections = static_cast<std::size_t>(s.i("http.max_connections"));
  limits.max_header_bytes = static_cast<std::size_t>(s.i("http.max_header_bytes"));
  limits.max_uri_bytes = static_cast<std::size_t>(s.i("http.max_uri_bytes"));
  limits.header_timeout_s = s.f("http.header_timeout_s");
  limits.body_idle_timeout_s = s.f("http.body_idle_timeout_s");
  limits.body_timeout_s = s.f("http.body_timeout_s");
  limits.keepalive_timeout_s = s.f("http.keepalive_timeout_s");
  limits.max_multipart_parts = static_cast<std::size_t>(s.i("http.max_multipart_parts"));
  limits.max_form_field_bytes = static_cast<std::size_t>(s.i("http.max_form_field_bytes"));
  limits.discard_body_bytes = static_cast<std::uint64_t>(s.i("http.discard_body_bytes"));
  limits.lingering_close_s = s.f("http.lingering_close_s");
  limits.sse_keepalive_s = s.f("stream.keepalive_s");
  limits.access_log = s.b("log.access");
  limits.server_header = std::string("vibevoice-server/") + VV_VERSION;
  http::HttpServer server(api, limits);
  auto port = server.bind(s.s("http.host"), static_cast<std::uint16_t>(s.i("http.port")));
  if (!port.is_ok()) {
    std::cerr << "error: " << port.status().message() << "\n";
    return 1;
  }
  const int io_threads = s.i("http.threads") > 0 ? static_cast<int>(s.i("http.threads"))
                                                 : static_cast<int>(std::min(16u, cores));
  server.run(io_threads);
  std::fprintf(stderr, "listening on %s:%u\n", s.s("http.host").c_str(), static_cast<unsigned>(*port));
  std::fflush(stderr);
  api::service_log::log("info", "listening",
                        {{"host", s.s("http.host")}, {"#port", std::to_string(*port)},
                         {"#io_threads", std::to_string(io_threads)}, {"#decode_threads", std::to_string(decode_threads)}});

  Loader loader;
  std::shared_ptr<api::EngineHandle> handle;
  loader.thread = std::thread([&] { load_model(state, loader, handle); });

  auto wait_signal = [&](double seconds) -> int {
    timespec ts{static_cast<time_t>(seconds), static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e9)};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    return sig > 0 ? sig : 0;
  };
  // Serve until a signal (or a fatal load error).
  for (;;) {
    if (loader.failed.load()) {
      api::service_log::log("error", "model load failed", {{"error", loader.error}});
      std::cerr << "error: " << loader.error << "\n";
      loader.thread.join();
      server.stop();
      return 1;
    }
    if (wait_signal(0.1)) break;
  }
  // §13.4 drain.
  api::service_log::log("info", "draining", {});
  state.draining.store(true);
  metrics.ready->Set(0);
  bool forced = false;
  const auto pre_stop_end = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(
                                                      std::chrono::duration<double>(s.f("shutdown.pre_stop_delay_s")));
  while (!forced && steady_clock::now() < pre_stop_end) {
    if (wait_signal(0.05)) forced = true;
  }
  state.refusing.store(true);
  server.close_idle_connections();
  const auto grace_end = steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(
                                                   std::chrono::duration<double>(s.f("shutdown.grace_s")));
  // Committed WebSocket items are in-flight work too (their sessions close 1001 once they are done).
  while (!forced && steady_clock::now() < grace_end &&
         (server.active_requests() > 0 || state.realtime_items_pending.load() > 0)) {
    if (wait_signal(0.05)) forced = true;
  }
  state.cancel_all_inflight();
  const auto flush_end = steady_clock::now() + std::chrono::seconds(2);
  while (steady_clock::now() < flush_end &&
         (server.active_requests() > 0 || state.realtime_items_pending.load() > 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A request is accounted when its last bytes are queued; give the I/O threads a moment to write them.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  api::service_log::log("info", "stopped", {{"#forced", forced ? "true" : "false"}});
  spdlog::default_logger()->flush();
  std::fflush(stderr);
  // Every response is flushed; the process ends here without tearing down the io_context under
  // connections that are still open (their handlers own the sessions) or the engine threads.
  std::_Exit(0);
}

}  // namespace

void register_serve(CLI::App& app, CommandContext& ctx) {
  auto args = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand("serve",
                                     "Serve the OpenAI-compatible API (transcriptions, chat, models, health, metrics).\n"
                                     "Run `vibevoice serve --help` for every setting.");
  // Every argument is ours: the settings table derives the flags (config/settings.h).
  sub->prefix_command();
  sub->set_help_flag();
  sub->allow_extras();
  sub->callback([sub, &ctx, args] {
    *args = sub->remaining();
    ctx.exit_code = run_serve(*args);
  });
}

}  // namespace vv::cli
