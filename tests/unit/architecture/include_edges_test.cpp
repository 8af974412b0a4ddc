// Reads every #include "..." in the layers and fails on an edge ARCHITECTURE.md does not allow.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "tests/support/test_paths.h"

namespace fs = std::filesystem;

namespace {

// layer -> layers it may include (itself always allowed). config and proto are leaves any layer
// may read.
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"config", {}},
    {"kernels", {"config"}},
    {"engine", {"kernels", "config"}},
    {"scheduler", {"engine", "kernels", "config"}},
    {"service", {"scheduler", "engine", "kernels", "config"}},
};

std::string layer_of(const std::string& include_path) {
  auto slash = include_path.find('/');
  return slash == std::string::npos ? "" : include_path.substr(0, slash);
}

TEST(Architecture, NoForbiddenIncludeEdges) {
  const fs::path root = vv::test::source_dir();
  const std::regex inc(R"re(^\s*#\s*include\s*"([^"]+)")re");
  int files = 0;
  std::vector<std::string> violations;
  for (const auto& [layer, allowed] : kAllowed) {
    if (!fs::exists(root / layer)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / layer)) {
      const auto ext = e.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        std::smatch m;
        if (!std::regex_search(line, m, inc)) continue;
        const std::string target = layer_of(m[1].str());
        if (target.empty() || !kAllowed.count(target)) continue;  // not a layer path
        if (target == layer || allowed.count(target)) continue;
        violations.push_back(fs::relative(e.path(), root).string() + ":" + std::to_string(lineno) + " includes " +
                             m[1].str() + " (" + layer + " may not include " + target + ")");
      }
    }
  }
  EXPECT_GT(files, 0) << "no source files found under " << root;
  for (const auto& v : violations) ADD_FAILURE() << v;
}

// engine/model is device-agnostic: it never names a device backend.
TEST(Architecture, ModelCodeNamesNoDevice) {
  const fs::path dir = fs::path(vv::test::source_dir()) / "engine" / "model";
  if (!fs::exists(dir)) GTEST_SKIP() << "engine/model does not exist yet";
  const std::regex bad(R"re(#\s*include\s*"kernels/(cpu|cuda)/|#\s*if(def)?\s+.*(CUDA|__AVX))re");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      EXPECT_FALSE(std::regex_search(line, bad)) << e.path() << ": " << line;
    }
  }
}

}  // namespace
