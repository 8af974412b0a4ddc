// ApiError: one §0.3 error (status, type, code, param, message) and its HTTP response with the
// envelope body and the headers the spec ties to each status (Retry-After, WWW-Authenticate,
// x-should-retry, Connection: close). Plain values; any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "service/http/http_message.h"

namespace vv::api {

struct ApiError {
  int status = 400;
  std::string code;  // §0.3 code; the type follows from status/code
  std::string message;
  std::optional<std::string> param;
  int retry_after_s = 0;  // 429/503: Retry-After (1–60)
  bool close = false;     // Connection: close
  std::string allow;      // 405: Allow
};

// invalid_request_error, authentication_error, … for a status and code.
std::string_view error_type(int status, std::string_view code);
// {"error": {"message": …, "type": …, "param": …, "code": …}}
std::string error_body(const ApiError& e);
// The in-stream error object (same shape).
std::string error_object(const ApiError& e);
http::HttpResponse error_response(const ApiError& e);

// Shorthands.
ApiError bad_request(std::string code, std::string message, std::optional<std::string> param = std::nullopt);
ApiError invalid_value(std::string param, std::string message);

// At most 64 bytes of client input, cut at a UTF-8 boundary, control characters as spaces.
std::string echo(std::string_view client_input);
// "sk-…ab": first 3 and last 2 characters of a key.
std::string mask_key(std::string_view key);

}  // namespace vv::api
