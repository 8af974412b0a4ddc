// Api: the OpenAI-compatible service as functions of (request, app state). precheck() runs the
// header-only steps of API.md §2.4 (routing, CORS preflight, auth, per-key limit, readiness,
// content type, declared length, queue pre-check) and answers the GET endpoints; handle() takes the
// body (multipart parts or JSON text) and drives the request to its response through an Exchange.
// Thread-safe: one Api serves every session; per-request state lives in the Exchange's executor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "service/api/api_error.h"
#include "service/api/app_state.h"
#include "service/api/exchange.h"
#include "service/http/http_message.h"
#include "service/http/multipart_parser.h"

namespace vv::api {

enum class RouteId {
  kTranscriptions,
  kTranslations,
  kChat,
  kModels,
  kModel,
  kRealtime,
  kHealth,
  kReady,
  kVersion,
  kMetrics,
  kUnknown,
};

struct Route {
  RouteId id = RouteId::kUnknown;
  std::string model_id;  // kModel: the percent-decoded {id}
  std::string allow;     // methods the route accepts ("POST", "GET, HEAD")
};

// Per request: identity, the headers every response gets, what the engine-side needs.
struct RequestInfo {
  std::string request_id;
  Route route;
  std::string route_label;  // metrics label
  std::string method;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point deadline;
  http::Headers response_headers;  // CORS
  std::shared_ptr<void> key_slot;  // per-key concurrency slot, released with the request
  std::string endpoint;            // metrics: transcriptions, translations, chat
};

struct RealtimeHandshake;  // service/api/realtime_session.h

struct Precheck {
  std::optional<http::HttpResponse> response;  // answered now (refusal, GET endpoints, preflight)
  enum class Body { kNone, kMultipart, kJson } body = Body::kNone;
  std::uint64_t body_limit = 0;
  std::string boundary;
  std::shared_ptr<RequestInfo> info;
  // GET /v1/realtime that passed the §10.2 checks: upgrade the connection to a WebSocket.
  std::shared_ptr<RealtimeHandshake> realtime;
};

class Api {
 public:
  explicit Api(AppState& state) : state_(state) {}

  Route route(std::string_view method, std::string_view path) const;
  // §0.4: the adopted X-Request-Id or a fresh req_<32 hex>.
  static std::string request_id_for(const http::HttpRequestHead& head);

  Precheck precheck(const http::HttpRequestHead& head) const;
  // After the body was read: multipart parts (audio routes) or the JSON text (chat).
  void handle(std::shared_ptr<RequestInfo> info, std::vector<http::FormPart> parts, std::string json,
              std::shared_ptr<Exchange> exchange) const;

  // The response of an error, counted in vibevoice_errors_total for the route's endpoint.
  http::HttpResponse fail(const RequestInfo* info, const ApiError& e) const;
  AppState& state() const { return state_; }

 private:
  // ws_key: a key presented by WebSocket means (subprotocol, ?api_key=), used when no header has one.
  std::optional<ApiError> authenticate(const http::HttpRequestHead& head, std::shared_ptr<void>* slot,
                                       const std::optional<std::string>& ws_key = std::nullopt) const;
  // §10.2 for GET /v1/realtime (route and method already checked).
  void realtime_precheck(const http::HttpRequestHead& head, Precheck& p) const;
  http::HttpResponse health() const;
  http::HttpResponse ready() const;
  http::HttpResponse version() const;
  http::HttpResponse models(const RequestInfo& info) const;
  int retry_after_estimate() const;

  AppState& state_;
};

// The JSON object of one model (§7).
std::string model_object(const AppState& state, std::string_view id);

}  // namespace vv::api
