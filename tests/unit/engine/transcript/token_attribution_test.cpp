// TranscriptAssembler::feed_token: which generated tokens carry transcript text (API.md §3.4) —
// segment token ids, avg_logprob, temperature, and the include[]=logprobs list.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/transcript/transcript_assembler.h"

namespace vv {
namespace {

struct Tok {
  std::string bytes;
  float logprob;
};

Transcript run(const std::vector<Tok>& toks, double duration, float temperature = 0.0f) {
  TranscriptAssembler a(duration);
  std::vector<TranscriptEvent> ev;
  TokenId id = 1000;
  for (const auto& t : toks) a.feed_token({id++, t.bytes, t.logprob, temperature}, ev);
  a.finish(ev);
  return a.transcript();
}

TEST(TokenAttribution, ContentTokensGoToTheirSegmentAndSyntaxTokensToNone) {
  // ids 1000.. in order; content tokens: "Hello"(1023) " world"(1024) and "\":\"Hi"(1033, straddles).
  const std::vector<Tok> toks = {
      {"<|im_start|>", -0.1f}, {"assistant", -0.1f}, {"\n", -0.1f}, {"[{\"", -0.1f}, {"Start", -0.1f},
      {"\":", -0.1f},          {"0", -0.1f},         {".", -0.1f},  {"0", -0.1f},   {",\"", -0.1f},
      {"End", -0.1f},          {"\":", -0.1f},       {"1", -0.1f},  {".", -0.1f},   {"5", -0.1f},
      {",\"", -0.1f},          {"Speaker", -0.1f},   {"\":", -0.1f}, {"0", -0.1f},  {",\"", -0.1f},
      {"Content", -0.1f},      {"\":\"", -0.1f},     {"", -0.1f},   {"Hello", -0.5f}, {" world", -1.5f},
      {"\"},{\"", -0.1f},      {"Start", -0.1f},     {"\":", -0.1f}, {"2", -0.1f},  {",\"", -0.1f},
      {"Content", -0.1f},      {"\":", -0.1f},       {"", -0.1f},   {"\"Hi", -0.25f}, {"\"}]", -0.1f},
  };
  const Transcript t = run(toks, 3.0);
  ASSERT_EQ(t.segments.size(), 2u);
  EXPECT_EQ(t.segments[0].text, "Hello world");
  EXPECT_EQ(t.segments[0].tokens, (std::vector<TokenId>{1023, 1024}));
  EXPECT_DOUBLE_EQ(t.segments[0].avg_logprob, -1.0);
  EXPECT_EQ(t.segments[1].tokens, (std::vector<TokenId>{1033}));  // straddles the quote: counted once
  EXPECT_DOUBLE_EQ(t.segments[1].avg_logprob, -0.25);
  ASSERT_EQ(t.logprobs.size(), 3u);
  EXPECT_EQ(t.logprobs[0].token, "Hello");
  EXPECT_EQ(t.logprobs[1].bytes, " world");
  EXPECT_EQ(t.logprobs[2].bytes, "\"Hi");  // the whole bytes of a straddling token
  EXPECT_FLOAT_EQ(t.logprobs[2].logprob, -0.25);
}

TEST(TokenAttribution, SplitMultibyteCharacterShowsReplacementButKeepsBytes) {
  const std::vector<Tok> toks = {{"[{\"Content\":\"", -0.1f}, {"\xE4\xBD", -0.3f}, {"\xA0", -0.2f}, {"\"}]", -0.1f}};
  const Transcript t = run(toks, 1.0);
  ASSERT_EQ(t.segments.size(), 1u);
  EXPECT_EQ(t.segments[0].text, "\xE4\xBD\xA0");
  ASSERT_EQ(t.logprobs.size(), 2u);
  EXPECT_EQ(t.logprobs[0].token, "\xEF\xBF\xBD");
  EXPECT_EQ(t.logprobs[0].bytes, std::string("\xE4\xBD"));
  EXPECT_EQ(t.logprobs[1].bytes, std::string("\xA0"));
}

TEST(TokenAttribution, FallbackCountsEveryTokenAfterTheHeader) {
  const std::vector<Tok> toks = {{"<|im_start|>", -0.1f}, {"assistant", -0.1f}, {"\n", -0.1f},
                                 {" free", -1.0f},        {" text", -2.0f}};
  const Transcript t = run(toks, 2.0, 0.3f);
  ASSERT_EQ(t.segments.size(), 1u);
  EXPECT_TRUE(t.parse_failed);
  EXPECT_EQ(t.segments[0].tokens, (std::vector<TokenId>{1003, 1004}));
  EXPECT_DOUBLE_EQ(t.segments[0].avg_logprob, -1.5);
  EXPECT_FLOAT_EQ(t.segments[0].temperature, 0.3f);
  EXPECT_EQ(t.logprobs.size(), 2u);
}

TEST(TokenAttribution, SkippedSegmentsAndPartialTailAreHandled) {
  const std::vector<Tok> toks = {{"[{\"Content\":\"", -0.1f}, {"  ", -0.4f}, {"\"},", -0.1f},
                                 {"{\"Content\":\"", -0.1f},  {"cut", -0.7f}};
  const Transcript t = run(toks, 2.0);
  ASSERT_EQ(t.segments.size(), 1u);  // the whitespace-only segment is skipped
  EXPECT_EQ(t.segments[0].text, "cut");
  EXPECT_EQ(t.segments[0].tokens, (std::vector<TokenId>{1004}));
  EXPECT_TRUE(t.truncated);
  ASSERT_EQ(t.logprobs.size(), 1u);  // the skipped segment's token carries no transcript text
}

}  // namespace
}  // namespace vv
