// HttpRequestHead / HttpResponse: the plain values the HTTP session and the API handlers exchange,
// so that handlers are functions of values and can be tested without sockets. Header names are
// kept lower-cased. Plain values; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vv::http {

using Headers = std::vector<std::pair<std::string, std::string>>;  // name lower-cased

struct HttpRequestHead {
  std::string method;   // "GET", "POST", …
  std::string target;   // as sent (path + query)
  Headers headers;
  std::optional<std::uint64_t> content_length;
  bool chunked = false;
  bool expect_continue = false;
  bool keep_alive = true;

  // The first value of a header (name lower-case), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return std::string_view(v);
    }
    return std::nullopt;
  }
  std::string path() const {
    auto q = target.find('?');
    return q == std::string::npos ? target : target.substr(0, q);
  }
};

struct HttpResponse {
  int status = 200;
  Headers headers;  // Content-Length, Server, x-request-id are added by the session
  std::string body;
  bool close = false;  // Connection: close, then close the connection

  HttpResponse& set(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  std::optional<std::string_view> header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return std::string_view(v);
    }
    return std::nullopt;
  }
};

// "OK", "Not Found", … ("Unknown" for others).
std::string_view reason_phrase(int status);

// Status line and headers (each "Name: value\r\n"), then "\r\n"; with body_length the
// Content-Length header, without it Transfer-Encoding: chunked.
std::string serialize_head(const HttpResponse& r, std::optional<std::uint64_t> body_length, bool head_request);

// One chunk of chunked transfer coding; "" gives the last chunk.
std::string chunk(std::string_view data);

}  // namespace vv::http
