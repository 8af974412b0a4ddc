#include "service/api/service_log.h"

#include <chrono>
#include <ctime>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/text/utf8.h"
#include "engine/transcript/json_text.h"

namespace vv::api::service_log {
namespace {

bool g_json = true;

std::string now_rfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void append_json_string(std::string& out, std::string_view s) {
  std::string clean;
  text_utf8::append_lossy(clean, s);
  json::append_string(out, clean);
}

}  // namespace

void init(std::string_view level, std::string_view format) {
  g_json = format != "text";
  auto logger = spdlog::stderr_logger_mt("vibevoice");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(g_json ? "%v" : "[%Y-%m-%dT%H:%M:%S.%e] [%l] %v");
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  spdlog::flush_on(spdlog::level::trace);
}

void log(std::string_view level, std::string_view msg, const Fields& fields) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  if (!spdlog::should_log(lvl)) return;
  std::string line;
  if (g_json) {
    line = "{\"ts\":\"" + now_rfc3339() + "\",\"level\":\"" + std::string(level) + "\",\"msg\":";
    append_json_string(line, msg);
    for (const auto& [k, v] : fields) {
      const bool raw = !k.empty() && k[0] == '#';
      line += ",";
      append_json_string(line, raw ? std::string_view(k).substr(1) : std::string_view(k));
      line += ":";
      if (raw) {
        line += v;
      } else {
        append_json_string(line, v);
      }
    }
    line += "}";
  } else {
    line = std::string(msg);
    for (const auto& [k, v] : fields) line += " " + (k[0] == '#' ? k.substr(1) : k) + "=" + v;
  }
  spdlog::log(lvl, "{}", line);
}

}  // namespace vv::api::service_log
