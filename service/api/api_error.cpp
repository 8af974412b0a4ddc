#include "service/api/api_error.h"

#include <algorithm>

#include "engine/text/utf8.h"
#include "engine/transcript/json_text.h"

namespace vv::api {

std::string_view error_type(int status, std::string_view code) {
  if (status == 401) return "authentication_error";
  if (status == 403) return "permission_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  (void)code;
  return "invalid_request_error";
}

std::string error_object(const ApiError& e) {
  std::string out = "{\"message\": ";
  json::append_string(out, e.message);
  out += ", \"type\": ";
  json::append_string(out, error_type(e.status, e.code));
  out += ", \"param\": ";
  if (e.param) {
    json::append_string(out, *e.param);
  } else {
    out += "null";
  }
  out += ", \"code\": ";
  json::append_string(out, e.code);
  out += "}";
  return out;
}

std::string error_body(const ApiError& e) { return "{\"error\": " + error_object(e) + "}"; }

http::HttpResponse error_response(const ApiError& e) {
  http::HttpResponse r;
  r.status = e.status;
  r.body = error_body(e);
  r.close = e.close;
  r.set("Content-Type", "application/json");
  if (e.status == 429 || e.status == 503) {
    const int s = std::clamp(e.retry_after_s > 0 ? e.retry_after_s : 1, 1, 60);
    r.set("Retry-After", std::to_string(s));
    r.set("retry-after-ms", std::to_string(s * 1000));
  }
  if (e.status == 503) r.set("x-should-retry", "true");
  if (e.status == 504 || (e.status == 500 && e.code == "engine_error")) r.set("x-should-retry", "false");
  if (e.status == 401) r.set("WWW-Authenticate", "Bearer");
  if (e.status == 405 && !e.allow.empty()) r.set("Allow", e.allow);
  return r;
}

ApiError bad_request(std::string code, std::string message, std::optional<std::string> param) {
  ApiError e;
  e.status = 400;
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError invalid_value(std::string param, std::string message) {
  return bad_request("invalid_value", std::move(message), std::move(param));
}

std::string echo(std::string_view in) {
  std::size_t n = std::min<std::size_t>(in.size(), 64);
  // Do not cut inside a UTF-8 sequence.
  while (n > 0 && n < in.size() && (static_cast<unsigned char>(in[n]) & 0xC0) == 0x80) --n;
  std::string out;
  text_utf8::append_lossy(out, in.substr(0, n));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

std::string mask_key(std::string_view key) {
  if (key.size() <= 5) return std::string(key.size() <= 1 ? key.size() : 1, '*') + "***";
  return std::string(key.substr(0, 3)) + "***" + std::string(key.substr(key.size() - 2));
}

}  // namespace vv::api
