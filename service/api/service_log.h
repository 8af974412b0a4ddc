// Service logging on spdlog (stderr): with log.format = json every line is one JSON object
// {"ts", "level", "msg", fields...}; with text, "[ts] [level] msg key=value ...". init() once at
// start (main thread); log() from any thread (spdlog is thread-safe).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vv::api::service_log {

using Fields = std::vector<std::pair<std::string, std::string>>;

void init(std::string_view level, std::string_view format);
// level: "trace".."error". Numeric field values are written unquoted when `raw` is set per field
// name prefix '#' (e.g. {"#status", "200"}).
void log(std::string_view level, std::string_view msg, const Fields& fields = {});

}  // namespace vv::api::service_log
