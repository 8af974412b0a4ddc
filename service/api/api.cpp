#include "service/api/api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <regex>

#include "engine/transcript/json_text.h"
#include "service/api/handlers.h"
#include "service/api/realtime_session.h"
#include "service/http/ascii_text.h"

namespace vv::api {
namespace {

using http::lower;
using http::trim;

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      out += static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

ApiError make(int status, std::string code, std::string message, std::optional<std::string> param = std::nullopt) {
  ApiError e;
  e.status = status;
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

}  // namespace

Route Api::route(std::string_view method, std::string_view raw_path) const {
  (void)method;
  const auto& s = state_.settings;
  std::string path(raw_path);
  if (path.size() > 1 && path.back() == '/') path.pop_back();  // one trailing slash tolerated
  Route r;
  if (s.b("metrics.enabled") && path == s.s("metrics.path")) {
    r.id = RouteId::kMetrics;
    r.allow = "GET, HEAD";
    return r;
  }
  if (path == "/health" || path == "/healthz" || path == "/livez") {
    r.id = RouteId::kHealth;
  } else if (path == "/ready" || path == "/readyz") {
    r.id = RouteId::kReady;
  } else if (path == "/version") {
    r.id = RouteId::kVersion;
  }
  if (r.id != RouteId::kUnknown) {
    r.allow = "GET, HEAD";
    return r;
  }
  std::string v1;
  if (path.rfind("/v1/", 0) == 0) {
    v1 = path.substr(3);
  } else if (s.b("http.unprefixed_routes")) {
    v1 = path;
  } else {
    return r;
  }
  if (v1 == "/audio/transcriptions") {
    r.id = RouteId::kTranscriptions;
    r.allow = "POST";
  } else if (v1 == "/audio/translations") {
    r.id = RouteId::kTranslations;
    r.allow = "POST";
  } else if (v1 == "/chat/completions" && s.b("chat.enabled")) {
    r.id = RouteId::kChat;
    r.allow = "POST";
  } else if (v1 == "/models") {
    r.id = RouteId::kModels;
    r.allow = "GET, HEAD";
  } else if (v1.rfind("/models/", 0) == 0 && v1.size() > 8) {
    r.id = RouteId::kModel;
    r.allow = "GET, HEAD";
    // {id} is everything after /models/ of the path as sent (ids may contain '/').
    std::string rawp(raw_path);
    const std::size_t at = rawp.find("/models/");
    std::string id = rawp.substr(at + 8);
    if (id.size() > 1 && id.back() == '/') id.pop_back();
    r.model_id = percent_decode(id);
  } else if (v1 == "/realtime" && s.b("realtime.enabled")) {
    r.id = RouteId::kRealtime;
    r.allow = "GET";
  }
  return r;
}

std::string Api::request_id_for(const http::HttpRequestHead& head) {
  static const std::regex ok(R"(^[A-Za-z0-9._:-]{1,128}$)");
  if (auto v = head.header("x-request-id"); v && v->size() <= 128 && std::regex_match(v->begin(), v->end(), ok)) {
    return std::string(*v);
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "req_";
  for (int i = 0; i < 2; ++i) {
    std::uint64_t x = rng();
    for (int k = 0; k < 16; ++k) id += hex[(x >> (4 * k)) & 15];
  }
  return id;
}

http::HttpResponse Api::fail(const RequestInfo* info, const ApiError& e) const {
  if (info && !info->endpoint.empty()) {
    state_.metrics.errors->Add({{"endpoint", info->endpoint}, {"code", e.code}}).Increment();
  }
  return error_response(e);
}

std::optional<ApiError> Api::authenticate(const http::HttpRequestHead& head, std::shared_ptr<void>* slot,
                                          const std::optional<std::string>& ws_key) const {
  if (!state_.auth_enabled()) return std::nullopt;
  std::optional<std::string> key;
  bool malformed = false;
  if (auto a = head.header("authorization")) {
    std::string_view v = trim(*a);
    const auto sp = v.find(' ');
    if (sp != std::string_view::npos && lower(v.substr(0, sp)) == "bearer") {
      key = std::string(trim(v.substr(sp + 1)));
      if (key->empty()) malformed = true;
    } else {
      malformed = true;
    }
  } else if (auto k = head.header("api-key")) {
    key = std::string(trim(*k));
  } else if (auto x = head.header("x-api-key")) {
    key = std::string(trim(*x));
  } else if (ws_key) {
    key = *ws_key;
  }
  if (malformed) {
    return make(401, "invalid_api_key", "Incorrect API key provided: the Authorization header must be 'Bearer <key>'.");
  }
  if (!key || key->empty()) {
    return make(401, "missing_api_key",
                "You didn't provide an API key. Provide it as 'Authorization: Bearer <key>'.");
  }
  // Constant time over every configured key: no early exit, no dependence on which matched.
  const Digest d = sha256(*key);
  bool match = false;
  for (const auto& k : state_.key_digests) match = digest_equal(d, k) | match;
  if (!match) return make(401, "invalid_api_key", "Incorrect API key provided: " + mask_key(*key) + ".");
  if (slot && state_.settings.i("auth.max_concurrent_requests_per_key") > 0) {
    *slot = state_.acquire_key_slot(d);
    if (!*slot) {
      ApiError e = make(429, "rate_limit_exceeded",
                        "Too many concurrent requests for this API key; retry when one has finished.");
      e.retry_after_s = 1;
      return e;
    }
  }
  return std::nullopt;
}

int Api::retry_after_estimate() const {
  if (!state_.engine) return 1;
  const EngineLoad l = state_.engine->load();
  const double slots = std::max<double>(1.0, static_cast<double>(l.max_running));
  const double est = static_cast<double>(l.waiting) * state_.recent_median_seconds() / slots;
  return static_cast<int>(std::clamp(std::ceil(est), 1.0, 60.0));
}

Precheck Api::precheck(const http::HttpRequestHead& head) const {
  const auto& s = state_.settings;
  Precheck p;
  p.info = std::make_shared<RequestInfo>();
  RequestInfo& info = *p.info;
  info.request_id = request_id_for(head);
  info.method = head.method;
  const std::string path = head.path();
  info.route = route(head.method, path);
  info.route_label = metrics::ServiceMetrics::route_label(path, s.b("http.unprefixed_routes"), s.s("metrics.path"));
  switch (info.route.id) {
    case RouteId::kTranscriptions: info.endpoint = "transcriptions"; break;
    case RouteId::kTranslations: info.endpoint = "translations"; break;
    case RouteId::kChat: info.endpoint = "chat"; break;
    default: break;
  }
  double timeout = s.f("limits.request_timeout_s");
  if (auto t = head.header("x-request-timeout")) {
    char* end = nullptr;
    std::string tv(*t);
    const double v = std::strtod(tv.c_str(), &end);
    if (end != tv.c_str() && std::isfinite(v) && v > 0) timeout = std::min(timeout, v);
  }
  info.deadline = info.arrival + std::chrono::microseconds(static_cast<std::int64_t>(timeout * 1e6));

  // CORS (§0.6).
  const auto& origins = s.list("cors.allowed_origins");
  const auto origin = head.header("origin");
  bool origin_ok = false;
  if (!origins.empty() && origin) {
    const bool any = std::find(origins.begin(), origins.end(), "*") != origins.end();
    origin_ok = any || std::find(origins.begin(), origins.end(), std::string(*origin)) != origins.end();
    if (origin_ok) {
      info.response_headers.emplace_back("Access-Control-Allow-Origin", any ? "*" : std::string(*origin));
      info.response_headers.emplace_back("Vary", "Origin");
      info.response_headers.emplace_back(
          "Access-Control-Expose-Headers",
          "x-request-id, retry-after, retry-after-ms, x-vibevoice-audio-duration, x-vibevoice-finish-reason");
    }
  }
  if (head.method == "OPTIONS") {
    http::HttpResponse r;
    r.status = 204;
    const auto req_method = head.header("access-control-request-method");
    if (origin && req_method) {
      if (origin_ok) {
        r.set("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        if (auto h = head.header("access-control-request-headers")) r.set("Access-Control-Allow-Headers", std::string(*h));
        r.set("Access-Control-Max-Age", std::to_string(s.i("cors.max_age_s")));
      }
    } else {
      r.set("Allow", "GET, POST, OPTIONS");
    }
    p.response = std::move(r);
    return p;
  }
  // Step 3: route and method.
  if (info.route.id == RouteId::kUnknown) {
    p.response = fail(&info, make(404, "unknown_url", "Unknown request URL: " + head.method + " " + echo(path) +
                                                          ". Please check the URL and method."));
    return p;
  }
  const bool get_like = head.method == "GET" || head.method == "HEAD";
  const bool method_ok = info.route.allow == "POST" ? head.method == "POST"
                         : info.route.allow == "GET" ? head.method == "GET"
                                                     : get_like;
  if (!method_ok) {
    ApiError e = make(405, "method_not_allowed",
                      "Method " + echo(head.method) + " is not allowed on " + echo(path) + "; use " +
                          info.route.allow + ".");
    e.allow = info.route.allow;
    p.response = fail(&info, e);
    return p;
  }
  // Unauthenticated routes.
  switch (info.route.id) {
    case RouteId::kHealth: p.response = health(); return p;
    case RouteId::kReady: p.response = ready(); return p;
    case RouteId::kVersion: p.response = version(); return p;
    case RouteId::kMetrics:
      if (!s.b("auth.protect_metrics")) {
        http::HttpResponse r;
        r.body = state_.metrics.serialize();
        r.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        p.response = std::move(r);
        return p;
      }
      break;
    default: break;
  }
  if (info.route.id == RouteId::kRealtime) {
    realtime_precheck(head, p);
    return p;
  }
  // Step 5–6: authentication, per-key concurrency.
  const bool inference = info.route.id == RouteId::kTranscriptions || info.route.id == RouteId::kTranslations ||
                         info.route.id == RouteId::kChat || info.route.id == RouteId::kRealtime;
  if (auto e = authenticate(head, inference ? &info.key_slot : nullptr)) {
    if (e->status == 429) state_.metrics.rejected->Add({{"reason", "rate_limited"}}).Increment();
    p.response = fail(&info, *e);
    return p;
  }
  if (info.route.id == RouteId::kMetrics) {
    http::HttpResponse r;
    r.body = state_.metrics.serialize();
    r.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    p.response = std::move(r);
    return p;
  }
  // Step 7: translations in reject mode answer regardless of readiness; draining; readiness.
  if (info.route.id == RouteId::kTranslations && s.s("asr.translations") == "reject") {
    p.response = fail(&info, make(400, "translation_unsupported",
                                  "This server's model transcribes only; translation to English is not supported. "
                                  "Use /v1/audio/transcriptions.",
                                  "model"));
    return p;
  }
  if (state_.refusing.load()) {
    ApiError e = make(503, "shutting_down", "The server is shutting down; retry on another replica.");
    e.retry_after_s = 5;
    e.close = true;
    state_.metrics.rejected->Add({{"reason", "shutting_down"}}).Increment();
    p.response = fail(&info, e);
    return p;
  }
  if (state_.readiness.load() != Readiness::kReady) {
    ApiError e = make(503, "model_not_ready", "The model is still loading; retry shortly.");
    e.retry_after_s = 10;
    state_.metrics.rejected->Add({{"reason", "not_ready"}}).Increment();
    p.response = fail(&info, e);
    return p;
  }
  if (info.route.id == RouteId::kModels || info.route.id == RouteId::kModel) {
    p.response = models(info);
    return p;
  }
  // Step 8: content type and encoding.
  if (auto enc = head.header("content-encoding"); enc && lower(trim(*enc)) != "identity") {
    p.response = fail(&info, make(415, "unsupported_media_type",
                                  "Content-Encoding '" + echo(*enc) + "' is not supported; send the body uncompressed."));
    return p;
  }
  const std::string ctype(head.header("content-type").value_or(""));
  if (info.route.id == RouteId::kChat) {
    std::string_view ct = ctype;
    const std::string mt = lower(trim(ct.substr(0, ct.find(';'))));
    bool ok = mt == "application/json";
    if (ok && ct.find(';') != std::string_view::npos) {
      const std::string params = lower(ct.substr(ct.find(';') + 1));
      const auto cs = params.find("charset=");
      if (cs != std::string::npos) {
        std::string v(trim(params.substr(cs + 8)));
        v = v.substr(0, v.find(';'));
        if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() >= 2 ? v.size() - 2 : 0);
        ok = v == "utf-8" || v == "utf8";
      }
    }
    if (!ok) {
      p.response = fail(&info, make(415, "unsupported_media_type",
                                    "Content-Type must be application/json, got '" + echo(ctype) + "'."));
      return p;
    }
    p.body = Precheck::Body::kJson;
    p.body_limit = static_cast<std::uint64_t>(s.i("http.max_json_body_bytes"));
  } else {
    auto boundary = http::multipart_boundary(ctype);
    if (!boundary) {
      p.response = fail(&info, make(415, "unsupported_media_type",
                                    "Content-Type must be multipart/form-data, got '" + echo(ctype) + "'."));
      return p;
    }
    if (boundary->empty()) {
      p.response = fail(&info, make(400, "invalid_multipart",
                                    "The multipart/form-data Content-Type needs a boundary of 1–70 characters."));
      return p;
    }
    p.body = Precheck::Body::kMultipart;
    p.boundary = *boundary;
    p.body_limit = static_cast<std::uint64_t>(s.i("http.max_body_bytes"));
  }
  // Step 9: declared length.
  if (head.content_length && *head.content_length > p.body_limit) {
    ApiError e = make(413, "request_too_large",
                      "The request body (" + std::to_string(*head.content_length) + " bytes) exceeds the limit of " +
                          std::to_string(p.body_limit) + " bytes.");
    e.close = true;
    p.response = fail(&info, e);
    return p;
  }
  // Step 10: queue already full.
  if (state_.engine) {
    const EngineLoad l = state_.engine->load();
    if (l.max_waiting >= 0 && l.running >= l.max_running && l.waiting >= l.max_waiting) {
      ApiError e = make(503, "server_overloaded", "The server is overloaded; retry later.");
      e.retry_after_s = retry_after_estimate();
      state_.metrics.rejected->Add({{"reason", "queue_full"}}).Increment();
      p.response = fail(&info, e);
      return p;
    }
  }
  return p;
}

namespace {

// Comma-separated header values (all occurrences), trimmed.
std::vector<std::string> header_tokens(const http::HttpRequestHead& head, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& [k, v] : head.headers) {
    if (k != name) continue;
    std::string_view rest = v;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view t = trim(rest.substr(0, comma));
      if (!t.empty()) out.emplace_back(t);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

// name → value of the query string (percent-decoded, '+' as space); the first occurrence wins.
std::vector<std::pair<std::string, std::string>> query_params(std::string_view target) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    if (!kv.empty()) {
      const auto eq = kv.find('=');
      auto dec = [](std::string_view x) {
        std::string t(x);
        std::replace(t.begin(), t.end(), '+', ' ');
        return percent_decode(t);
      };
      out.emplace_back(dec(kv.substr(0, eq)), eq == std::string_view::npos ? "" : dec(kv.substr(eq + 1)));
    }
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

}  // namespace

void Api::realtime_precheck(const http::HttpRequestHead& head, Precheck& p) const {
  const auto& s = state_.settings;
  RequestInfo& info = *p.info;
  info.endpoint = "realtime";
  // 1. An upgrade to websocket (realtime.enabled = false already routed to 404).
  bool upgrade = false;
  for (const auto& t : header_tokens(head, "upgrade")) upgrade = upgrade || lower(t) == "websocket";
  if (!upgrade) {
    ApiError e =
        make(426, "upgrade_required", "This endpoint needs a WebSocket upgrade (Upgrade: websocket).");
    http::HttpResponse r = fail(&info, e);
    r.set("Upgrade", "websocket");
    r.set("Connection", "Upgrade");
    p.response = std::move(r);
    return;
  }
  // 2. Authentication: headers, then the subprotocol openai-insecure-api-key.<key>, then ?api_key=.
  const auto protocols = header_tokens(head, "sec-websocket-protocol");
  const auto query = query_params(head.target);
  auto query_value = [&query](std::string_view name) -> std::optional<std::string> {
    for (const auto& [k, v] : query) {
      if (k == name) return v;
    }
    return std::nullopt;
  };
  std::optional<std::string> ws_key;
  for (const auto& pr : protocols) {
    static constexpr std::string_view kPrefix = "openai-insecure-api-key.";
    if (pr.rfind(kPrefix, 0) == 0) {
      ws_key = pr.substr(kPrefix.size());
      break;
    }
  }
  if (!ws_key && s.b("auth.allow_query_api_key")) ws_key = query_value("api_key");
  if (auto e = authenticate(head, &info.key_slot, ws_key)) {
    if (e->status == 429) state_.metrics.rejected->Add({{"reason", "rate_limited"}}).Increment();
    p.response = fail(&info, *e);
    return;
  }
  // 3. Origin.
  const auto& origins = s.list("cors.allowed_origins");
  if (auto origin = head.header("origin"); origin && !origins.empty()) {
    const bool ok = std::find(origins.begin(), origins.end(), "*") != origins.end() ||
                    std::find(origins.begin(), origins.end(), std::string(*origin)) != origins.end();
    if (!ok) {
      p.response =
          fail(&info, make(403, "origin_not_allowed",
                           "The origin '" + echo(*origin) + "' is not allowed to open a WebSocket session."));
      return;
    }
  }
  // 4. Draining, readiness, session cap.
  if (state_.refusing.load()) {
    ApiError e = make(503, "shutting_down", "The server is shutting down; retry on another replica.");
    e.retry_after_s = 5;
    state_.metrics.rejected->Add({{"reason", "shutting_down"}}).Increment();
    p.response = fail(&info, e);
    return;
  }
  if (state_.readiness.load() != Readiness::kReady || !state_.engine) {
    ApiError e = make(503, "model_not_ready", "The model is still loading; retry shortly.");
    e.retry_after_s = 10;
    state_.metrics.rejected->Add({{"reason", "not_ready"}}).Increment();
    p.response = fail(&info, e);
    return;
  }
  const std::int64_t cap = s.i("realtime.max_sessions");
  if (state_.realtime_sessions.fetch_add(1) >= cap) {
    state_.realtime_sessions.fetch_sub(1);
    ApiError e = make(503, "server_overloaded", "Too many open realtime sessions; retry later.");
    e.retry_after_s = retry_after_estimate();
    state_.metrics.rejected->Add({{"reason", "queue_full"}}).Increment();
    p.response = fail(&info, e);
    return;
  }
  AppState* st = &state_;
  std::shared_ptr<void> session_slot(
      static_cast<void*>(st), [](void* v) { static_cast<AppState*>(v)->realtime_sessions.fetch_sub(1); });
  // 5. Query.
  if (auto intent = query_value("intent"); intent && *intent != "transcription") {
    p.response =
        fail(&info, make(400, "invalid_value",
                         "Unsupported intent '" + echo(*intent) + "': only 'transcription' is supported.",
                         "intent"));
    return;
  }
  auto hs = std::make_shared<RealtimeHandshake>();
  hs->model = s.list("model.served_names").front();
  if (auto model = query_value("model"); model && !model->empty()) {
    const auto& names = s.list("model.served_names");
    const auto& aliases = s.list("model.aliases");
    if (std::find(names.begin(), names.end(), *model) == names.end() &&
        std::find(aliases.begin(), aliases.end(), *model) == aliases.end()) {
      p.response = fail(
          &info, make(404, "model_not_found", "The model '" + echo(*model) + "' does not exist.", "model"));
      return;
    }
    hs->model = *model;
  }
  for (const auto& pr : protocols) {
    if (pr == "realtime") hs->subprotocol = "realtime";
    if (pr == "openai-beta.realtime-v1") hs->beta = true;
  }
  if (auto beta = head.header("openai-beta"); beta && lower(*beta).find("realtime=v1") != std::string::npos) {
    hs->beta = true;
  }
  hs->request_id = info.request_id;
  hs->session_slot = std::move(session_slot);
  hs->key_slot = info.key_slot;
  p.realtime = std::move(hs);
}

http::HttpResponse Api::health() const {
  http::HttpResponse r;
  r.set("Content-Type", "application/json");
  std::string reason;
  if (state_.readiness.load() == Readiness::kError) reason = state_.error_reason();
  const double stall = state_.settings.f("engine.stall_timeout_s");
  if (reason.empty() && state_.engine_requests_in_flight.load() > 0) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    const double idle = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() -
                                            state_.last_engine_event_ns.load()) / 1e9;
    if (idle > stall) reason = "no engine step for " + std::to_string(static_cast<int>(idle)) + " s with work pending";
  }
  if (reason.empty()) {
    r.body = "{\"status\":\"ok\"}";
  } else {
    r.status = 503;
    r.body = "{\"status\":\"error\",\"reason\":";
    json::append_string(r.body, reason);
    r.body += "}";
  }
  return r;
}

http::HttpResponse Api::ready() const {
  http::HttpResponse r;
  r.set("Content-Type", "application/json");
  r.status = 503;
  const Readiness rd = state_.readiness.load();
  if (rd == Readiness::kError) {
    r.body = "{\"status\":\"error\",\"reason\":";
    json::append_string(r.body, state_.error_reason());
    r.body += "}";
  } else if (state_.draining.load()) {
    r.body = "{\"status\":\"draining\"}";
  } else if (rd == Readiness::kLoading) {
    r.body = "{\"status\":\"loading\",\"progress\":";
    json::append_double(r.body, std::clamp(state_.load_progress.load(), 0.0, 1.0));
    r.body += "}";
  } else if (rd == Readiness::kWarmingUp) {
    r.body = "{\"status\":\"warming_up\"}";
  } else {
    r.status = 200;
    r.body = "{\"status\":\"ready\",\"model\":";
    json::append_string(r.body, state_.settings.list("model.served_names").front());
    r.body += "}";
  }
  return r;
}

http::HttpResponse Api::version() const {
  http::HttpResponse r;
  r.set("Content-Type", "application/json");
  std::string b = "{\"version\":";
  json::append_string(b, state_.version);
  b += ",\"git_sha\":";
  json::append_string(b, state_.git_sha);
  b += ",\"build_date\":";
  json::append_string(b, state_.build_date);
  b += ",\"api_contract\":1,\"model\":{\"served_names\":[";
  const auto& names = state_.settings.list("model.served_names");
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) b += ",";
    json::append_string(b, names[i]);
  }
  b += "],\"dtype\":";
  json::append_string(b, state_.dtype());
  b += ",\"max_model_len\":" + std::to_string(state_.settings.i("model.max_model_len")) + "},\"cuda\":";
  if (state_.cuda.empty()) {
    b += "null}";
  } else {
    json::append_string(b, state_.cuda);
    b += "}";
  }
  r.body = std::move(b);
  return r;
}

std::string model_object(const AppState& state, std::string_view id) {
  std::string b = "{\"id\": ";
  json::append_string(b, id);
  b += ", \"object\": \"model\", \"created\": " + std::to_string(state.start_unix) + ", \"owned_by\": ";
  json::append_string(b, state.settings.s("model.owned_by"));
  b += ", \"max_model_len\": " + std::to_string(state.settings.i("model.max_model_len")) + "}";
  return b;
}

http::HttpResponse Api::models(const RequestInfo& info) const {
  http::HttpResponse r;
  r.set("Content-Type", "application/json");
  const auto& names = state_.settings.list("model.served_names");
  if (info.route.id == RouteId::kModels) {
    std::string b = "{\"object\": \"list\", \"data\": [";
    for (std::size_t i = 0; i < names.size(); ++i) b += (i ? ", " : "") + model_object(state_, names[i]);
    r.body = b + "]}";
    return r;
  }
  const auto& aliases = state_.settings.list("model.aliases");
  const std::string& id = info.route.model_id;
  if (std::find(names.begin(), names.end(), id) == names.end() &&
      std::find(aliases.begin(), aliases.end(), id) == aliases.end()) {
    return fail(&info, make(404, "model_not_found", "The model '" + echo(id) + "' does not exist.", "model"));
  }
  r.body = model_object(state_, id);
  return r;
}

void Api::handle(std::shared_ptr<RequestInfo> info, std::vector<http::FormPart> parts, std::string json,
                 std::shared_ptr<Exchange> exchange) const {
  switch (info->route.id) {
    case RouteId::kTranscriptions:
      handle_transcription(*this, std::move(info), std::move(parts), std::move(exchange), false);
      return;
    case RouteId::kTranslations:
      handle_transcription(*this, std::move(info), std::move(parts), std::move(exchange), true);
      return;
    case RouteId::kChat: handle_chat(*this, std::move(info), std::move(json), std::move(exchange)); return;
    default:
      exchange->respond(fail(info.get(), make(500, "internal_error", "No handler for this route.")));
      return;
  }
}

}  // namespace vv::api
