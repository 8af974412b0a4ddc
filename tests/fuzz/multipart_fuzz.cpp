// libFuzzer target over the streaming multipart parser and the transcription form validation
// (API.md §2.1, §3.2): any body, fed in arbitrary pieces, must end in parts or a §0.3 error whose
// code is one the spec allows for a malformed upload — never a crash, a hang or an unbounded buffer.
// Input: first byte = chunk size seed, then the boundary up to the first '\n', then the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "config/settings.h"
#include "service/api/app_state.h"
#include "service/api/handlers.h"
#include "service/http/multipart_parser.h"
#include "service/metrics/metrics.h"

namespace {

vv::api::AppState& state() {
  static vv::metrics::ServiceMetrics metrics({"0", "0", "float32", "none"});
  static vv::api::AppState s(vv::config::Settings{}, metrics);
  return s;
}

bool allowed(const std::string& code) {
  static const char* kCodes[] = {"invalid_multipart", "invalid_value", "invalid_type", "duplicate_parameter",
                                 "missing_required_parameter", "unsupported_parameter", "unsupported_value",
                                 "model_not_found"};
  for (const char* c : kCodes) {
    if (code == c) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = 1 + data[0] % 97;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto nl = rest.find('\n');
  if (nl == std::string_view::npos || nl == 0 || nl > 70) return 0;
  const std::string boundary(rest.substr(0, nl));
  const std::string_view body = rest.substr(nl + 1);
  vv::http::MultipartLimits limits;
  limits.max_parts = 16;
  limits.max_field_bytes = 4096;
  vv::http::MultipartParser parser(boundary, limits);
  bool ok = true;
  for (std::size_t at = 0; ok && at < body.size(); at += chunk) ok = parser.feed(body.substr(at, chunk));
  if (ok) ok = parser.finish();
  if (!ok) {
    if (!parser.error() || !allowed(parser.error()->code) || parser.error()->message.empty()) std::abort();
    return 0;
  }
  if (parser.part_count() > limits.max_parts) std::abort();
  std::size_t kept = 0;
  for (const auto& p : parser.parts()) kept += p.data.size();
  if (kept > body.size()) std::abort();  // parts never hold more than the body
  auto e = vv::api::check_transcription_form(state(), parser.parts(), data[0] & 1);
  if (e && (!allowed(e->code) || e->status < 400 || e->status >= 500)) std::abort();
  return 0;
}
