#include "service/api/test_hooks.h"

#include <cstdlib>
#include <filesystem>

namespace vv::api {
namespace {

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' ? n : fallback;
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

TestHooks TestHooks::from_environment() {
  TestHooks h;
  h.fake_engine = env_int("VIBEVOICE_TEST_FAKE_ENGINE", 0) != 0;
  h.load_delay_ms = env_int("VIBEVOICE_TEST_LOAD_DELAY_MS", 0);
  h.pause_file = env_str("VIBEVOICE_TEST_PAUSE_FILE");
  h.fault_after_tokens = env_int("VIBEVOICE_TEST_FAULT_AFTER_TOKENS", -1);
  h.script_file = env_str("VIBEVOICE_TEST_SCRIPT");
  h.script_chat = env_int("VIBEVOICE_TEST_SCRIPT_CHAT", 0) != 0;
  h.token_delay_ms = env_int("VIBEVOICE_TEST_TOKEN_DELAY_MS", 0);
  return h;
}

bool TestHooks::paused() const {
  if (pause_file.empty()) return false;
  std::error_code ec;
  return std::filesystem::exists(pause_file, ec);
}

}  // namespace vv::api
