#include "service/http/http_message.h"

#include <cstdio>

namespace vv::http {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

std::string serialize_head(const HttpResponse& r, std::optional<std::uint64_t> body_length, bool head_request) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(reason_phrase(r.status)) + "\r\n";
  for (const auto& [k, v] : r.headers) {
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  if (r.status != 204 && r.status >= 200) {
    if (body_length) {
      out += "Content-Length: " + std::to_string(*body_length) + "\r\n";
    } else if (!head_request) {
      out += "Transfer-Encoding: chunked\r\n";
    }
  }
  out += r.close ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
  out += "\r\n";
  return out;
}

std::string chunk(std::string_view data) {
  if (data.empty()) return "0\r\n\r\n";
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out = size;
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace vv::http
