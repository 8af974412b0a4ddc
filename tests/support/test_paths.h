// Where tests find their data: the bundled tiny model and golden cases (tests/data), overridable
// at run time with VV_GOLDEN_DIR so the same test binaries check another golden set.
// Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

namespace vv::test {

// Root of the golden set: $VV_GOLDEN_DIR, else tests/data/golden. Holds model-hf/, model-orig/
// (config.json only; its safetensors are made by renaming at test time), names.json, cases/NAME/.
std::string golden_dir();
// tests/data (small inputs that are not goldens).
std::string data_dir();
// The tokenizer: $VV_TOKENIZER, else tests/data/tokenizer/tokenizer.json.
std::string tokenizer_path();
// tokenizer_cases.json beside it.
std::string tokenizer_cases_path();
// The names of the golden cases (sub-folders of golden_dir()/cases), sorted.
std::vector<std::string> golden_cases();
// The repository root (for tests that read the source tree).
std::string source_dir();
// A fresh empty directory under the system temp dir, removed by the OS eventually.
std::string make_temp_dir(const std::string& prefix);

}  // namespace vv::test
