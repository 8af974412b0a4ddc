// The test suite's one shared Qwen2.5 tokenizer (tests/data/tokenizer/tokenizer.json or
// $VV_TOKENIZER), loaded once per test binary; nullptr (with a test failure) if it cannot load.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "engine/text/tokenizer.h"
#include "tests/support/test_paths.h"

namespace vv::test {

inline const Tokenizer* qwen_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto r = Tokenizer::load_file(tokenizer_path());
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? std::move(r).value() : nullptr;
  }();
  return tok.get();
}

}  // namespace vv::test
