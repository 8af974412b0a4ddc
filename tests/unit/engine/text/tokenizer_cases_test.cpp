// Reproduces every case of tokenizer_cases.json (HF tokenizers 0.23.3 output): ids, decoded,
// decoded_skip_special, incremental pieces and incremental_flush.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/text/incremental_decoder.h"
#include "engine/text/tokenizer.h"
#include "tests/support/test_paths.h"
#include "tests/unit/engine/text/qwen_tokenizer.h"

namespace vv {
namespace {

std::string ids_str(const std::vector<TokenId>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(v[i]));
  }
  s.push_back(']');
  return s;
}

TEST(TokenizerGoldenCases, EveryCaseMatchesHfTokenizers) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  const Tokenizer& tok = *test::qwen_tokenizer();
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_FALSE(parser.load(test::tokenizer_cases_path()).get(doc)) << test::tokenizer_cases_path();
  simdjson::dom::array cases;
  ASSERT_FALSE(doc["cases"].get_array().get(cases));
  ASSERT_GT(cases.size(), 0u) << "tokenizer_cases.json has no cases";

  std::size_t checked = 0, failed = 0, incremental_checked = 0;
  for (simdjson::dom::element c : cases) {
    std::string_view id_sv;
    ASSERT_FALSE(c["id"].get_string().get(id_sv));
    std::string id(id_sv);
    std::vector<TokenId> want_ids;
    for (auto v : c["ids"].get_array()) want_ids.push_back(static_cast<TokenId>(int64_t(v)));
    std::vector<std::string> errors;

    std::string_view text;
    if (!c["text"].get_string().get(text)) {
      auto got = tok.encode(text);
      if (!got.is_ok()) {
        errors.push_back("encode failed: " + got.status().to_string());
      } else if (*got != want_ids) {
        errors.push_back("ids " + ids_str(*got) + " != golden " + ids_str(want_ids));
      }
    }
    std::string_view decoded;
    if (!c["decoded"].get_string().get(decoded) && tok.decode(want_ids, false) != decoded) {
      errors.push_back("decoded \"" + tok.decode(want_ids, false) + "\" != golden \"" + std::string(decoded) + "\"");
    }
    std::string_view skip;
    if (!c["decoded_skip_special"].get_string().get(skip) && tok.decode(want_ids, true) != skip) {
      errors.push_back("decoded_skip_special \"" + tok.decode(want_ids, true) + "\" != golden \"" +
                       std::string(skip) + "\"");
    }
    simdjson::dom::array inc;
    if (!c["incremental"].get_array().get(inc)) {
      ++incremental_checked;
      IncrementalDecoder dec(tok);
      std::size_t k = 0;
      if (inc.size() != want_ids.size()) errors.push_back("golden incremental size != ids size");
      for (auto piece : inc) {
        if (k >= want_ids.size()) break;
        std::string got = dec.push(want_ids[k]);
        if (got != std::string_view(piece)) {
          errors.push_back("incremental[" + std::to_string(k) + "] \"" + got + "\" != golden \"" +
                           std::string(std::string_view(piece)) + "\"");
          break;
        }
        ++k;
      }
      std::string_view flush;
      if (!c["incremental_flush"].get_string().get(flush) && dec.flush() != flush) {
        errors.push_back("incremental_flush differs");
      }
    }
    ++checked;
    if (!errors.empty()) {
      ++failed;
      for (const auto& e : errors) ADD_FAILURE() << id << ": " << e;
    }
  }
  EXPECT_EQ(failed, 0u) << failed << " of " << checked << " cases failed";
  EXPECT_EQ(checked, cases.size());
  EXPECT_GT(incremental_checked, 0u);
}

}  // namespace
}  // namespace vv
