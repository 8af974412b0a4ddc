// libFuzzer target over the chat request validation (API.md §6.1, C117): any body — deep nesting,
// huge numbers, wrong types, invalid UTF-8, duplicate keys — must give a 4xx with one of the codes
// the spec allows for a bad request body, or pass on to rendering; never a crash or stack exhaustion.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/settings.h"
#include "service/api/app_state.h"
#include "service/api/handlers.h"
#include "service/metrics/metrics.h"

namespace {

vv::api::AppState& state() {
  static vv::metrics::ServiceMetrics metrics({"0", "0", "float32", "none"});
  static vv::api::AppState s(vv::config::Settings{}, metrics);
  return s;
}

bool allowed(const std::string& code) {
  static const char* kCodes[] = {"invalid_json", "invalid_type", "invalid_value", "missing_required_parameter",
                                 "unsupported_value", "unsupported_parameter", "model_not_found"};
  for (const char* c : kCodes) {
    if (code == c) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  auto e = vv::api::check_chat_body(state(), body);
  if (e && (!allowed(e->code) || e->status < 400 || e->status >= 500 || e->message.empty())) std::abort();
  return 0;
}
