#include "tests/support/test_paths.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace fs = std::filesystem;

namespace vv::test {

static std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

std::string data_dir() { return env_or("VV_TEST_DATA_DIR", VV_TEST_DATA_DIR); }
std::string golden_dir() { return env_or("VV_GOLDEN_DIR", data_dir() + "/golden"); }
std::string tokenizer_path() { return env_or("VV_TOKENIZER", data_dir() + "/tokenizer/tokenizer.json"); }
std::string tokenizer_cases_path() {
  return (fs::path(tokenizer_path()).parent_path() / "tokenizer_cases.json").string();
}
std::string source_dir() { return VV_SOURCE_DIR; }

std::vector<std::string> golden_cases() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(golden_dir()) / "cases", ec)) {
    if (e.is_directory()) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string make_temp_dir(const std::string& prefix) {
  std::random_device rd;
  for (int i = 0; i < 100; ++i) {
    fs::path p = fs::temp_directory_path() / (prefix + "-" + std::to_string(rd()));
    if (fs::create_directory(p)) return p.string();
  }
  return fs::temp_directory_path().string();
}

}  // namespace vv::test
