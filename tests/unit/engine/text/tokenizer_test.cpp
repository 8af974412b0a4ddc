// Tokenizer behaviour beyond the golden cases: loading forms and errors, special-token parsing
// switch, unknown ids, invalid UTF-8, incremental decoding of split characters.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/text/incremental_decoder.h"
#include "engine/text/tokenizer.h"
#include "tests/support/test_paths.h"
#include "tests/unit/engine/text/qwen_tokenizer.h"

namespace vv {
namespace {

// A tiny byte-level tokenizer: bytes 'a', 'b', 'c', ' ' (spelled "Ġ"), merges a+b, ab+c, Ġ+a.
std::string tiny_json(bool array_merges) {
  std::string merges = array_merges ? R"([["a","b"],["ab","c"],["Ġ","a"]])" : R"(["a b","ab c","Ġ a"])";
  return R"({"added_tokens":[{"id":7,"content":"<|x|>","special":true},{"id":8,"content":"<t>","special":false}],
  "normalizer":{"type":"NFC"},
  "model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"abc":5,"Ġa":6},"merges":)" + merges + "}}";
}

TEST(Tokenizer, LoadsMergesInStringAndArrayForm) {
  for (bool array_form : {false, true}) {
    auto t = Tokenizer::load_json(tiny_json(array_form));
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    auto ids = (*t)->encode("abc ab<|x|>a<t>");
    ASSERT_TRUE(ids.is_ok());
    // " ab": a+b (rank 0) beats Ġ+a (rank 2), leaving Ġ | ab.
    EXPECT_EQ(*ids, (std::vector<TokenId>{5, 3, 4, 7, 0, 8}));
    EXPECT_EQ((*t)->id_count(), 9);
    EXPECT_EQ((*t)->decode(*ids), "abc ab<|x|>a<t>");
    EXPECT_EQ((*t)->decode(*ids, true), "abc aba<t>");
  }
}

TEST(Tokenizer, LoadErrorsNameTheFieldAtFault) {
  auto bad_json = Tokenizer::load_json("{not json", "t.json");
  ASSERT_FALSE(bad_json.is_ok());
  EXPECT_NE(bad_json.status().message().find("t.json"), std::string::npos);
  auto no_vocab = Tokenizer::load_json(R"({"model":{"type":"BPE","merges":[]}})");
  ASSERT_FALSE(no_vocab.is_ok());
  EXPECT_NE(no_vocab.status().message().find("model.vocab"), std::string::npos);
  auto bad_merge = Tokenizer::load_json(R"({"model":{"vocab":{"a":0},"merges":["a z"]}})");
  ASSERT_FALSE(bad_merge.is_ok());
  EXPECT_NE(bad_merge.status().message().find("model.merges[0]"), std::string::npos);
  auto bad_id = Tokenizer::load_json(R"({"model":{"vocab":{"a":-4},"merges":[]}})");
  EXPECT_FALSE(bad_id.is_ok());
  auto wordpiece = Tokenizer::load_json(R"({"model":{"type":"WordPiece","vocab":{},"merges":[]}})");
  ASSERT_FALSE(wordpiece.is_ok());
  EXPECT_EQ(wordpiece.status().code(), StatusCode::kUnsupported);
  auto missing = Tokenizer::load_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Tokenizer, SpecialParsingOffEncodesTokensAsText) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto on = test::qwen_tokenizer()->encode("<|im_end|>");
  auto off = test::qwen_tokenizer()->encode("<|im_end|>", false);
  ASSERT_TRUE(on.is_ok() && off.is_ok());
  EXPECT_EQ(*on, std::vector<TokenId>{151645});
  EXPECT_GT(off->size(), 1u);
  for (TokenId id : *off) EXPECT_LT(id, 151643);
  EXPECT_EQ(test::qwen_tokenizer()->decode(*off), "<|im_end|>");
}

TEST(Tokenizer, InvalidUtf8IsRejectedWithOffset) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto r = test::qwen_tokenizer()->encode(std::string("ab\xC3(", 4));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("offset 2"), std::string::npos);
}

TEST(Tokenizer, UnknownIdsAreSkippedInDecode) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  std::vector<TokenId> ids = {9707, 152000, -1, 151643};
  EXPECT_EQ(test::qwen_tokenizer()->decode(ids), "Hello<|endoftext|>");
  EXPECT_FALSE(test::qwen_tokenizer()->is_known(152000));
  EXPECT_TRUE(test::qwen_tokenizer()->is_special(151643));
  EXPECT_FALSE(test::qwen_tokenizer()->is_special(151657));  // <tool_call> is added but not special
  EXPECT_EQ(test::qwen_tokenizer()->token_to_id("<|box_start|>"), std::optional<TokenId>(151648));
}

TEST(IncrementalDecoder, HoldsBackSplitCharacterUntilComplete) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  // "中" is E4 B8 AD; feed it byte by byte through the single-byte tokens.
  auto byte_id = [&](unsigned char b) {
    std::string s = std::string(1, static_cast<char>(b));
    for (TokenId id = 0; id < 256; ++id) {
      if (test::qwen_tokenizer()->token_bytes(id) == s) return id;
    }
    return TokenId{-1};
  };
  IncrementalDecoder dec(*test::qwen_tokenizer());
  EXPECT_EQ(dec.push(byte_id(0xE4)), "");
  EXPECT_EQ(dec.push(byte_id(0xB8)), "");
  EXPECT_EQ(dec.pending_bytes(), 2u);
  EXPECT_EQ(dec.push(byte_id(0xAD)), "中");
  EXPECT_EQ(dec.push(byte_id(0xE4)), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  // A byte that can never start a character comes out at once as U+FFFD.
  EXPECT_EQ(dec.push(byte_id(0xFF)), "\xEF\xBF\xBD");
}

TEST(IncrementalDecoder, SkipSpecialDropsSpecialTokensOnly) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  IncrementalDecoder dec(*test::qwen_tokenizer(), true);
  EXPECT_EQ(dec.push(151645), "");
  EXPECT_EQ(dec.push(151657), "<tool_call>");
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  const std::string text = "Concurrent encoding: 中文, русский, ελληνικά, 12345 don't stop.\n";
  auto want = test::qwen_tokenizer()->encode(text);
  ASSERT_TRUE(want.is_ok());
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 200; ++i) {
        auto got = test::qwen_tokenizer()->encode(text);
        all = all && got.is_ok() && *got == *want;
      }
      ok[static_cast<std::size_t>(t)] = all;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_TRUE(v);
}

}  // namespace
}  // namespace vv
