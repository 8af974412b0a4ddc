// The ASR prompt against every golden case's prompt_ids, and the context rules of API.md §3.3.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/text/prompt_builder.h"
#include "engine/text/tokenizer.h"
#include "tests/support/test_paths.h"
#include "tests/unit/engine/text/qwen_tokenizer.h"

namespace vv {
namespace {

TEST(PromptBuilder, PromptIdsMatchEveryGoldenCase) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto cases = test::golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases under " << test::golden_dir();
  for (const auto& name : cases) {
    SCOPED_TRACE(name);
    std::string path = test::golden_dir() + "/cases/" + name + "/golden.json";
    simdjson::dom::parser parser;
    simdjson::dom::element g;
    ASSERT_FALSE(parser.load(path).get(g)) << path;
    std::vector<TokenId> want;
    for (auto v : g["prompt_ids"].get_array()) want.push_back(static_cast<TokenId>(int64_t(v)));
    ASSERT_FALSE(want.empty());
    int64_t samples = 0, frames = 0;
    ASSERT_FALSE(g["audio"]["num_samples_24k"].get_int64().get(samples));
    ASSERT_FALSE(g["audio"]["num_audio_tokens"].get_int64().get(frames));
    std::string_view dur;
    ASSERT_FALSE(g["audio"]["duration_seconds_in_prompt"].get_string().get(dur));
    EXPECT_EQ(format_duration(samples), dur);
    std::string_view context_info;
    std::string context;
    if (!g["context_info"].get_string().get(context_info)) context = std::string(context_info);

    // The golden's context inserted verbatim (the HF reference).
    auto verbatim = build_asr_prompt(*test::qwen_tokenizer(), frames, samples, context);
    ASSERT_TRUE(verbatim.is_ok()) << verbatim.status().to_string();
    EXPECT_EQ(verbatim->ids, want);
    // The same context typed by a user as the request's `prompt` (API.md §3.3).
    std::string composed = compose_context(context, {}, "");
    auto from_prompt = build_asr_prompt(*test::qwen_tokenizer(), frames, samples, composed);
    ASSERT_TRUE(from_prompt.is_ok());
    EXPECT_EQ(from_prompt->ids, want);

    int64_t first = 0, count = 0;
    ASSERT_FALSE(g["speech_span"]["first"].get_int64().get(first));
    ASSERT_FALSE(g["speech_span"]["count"].get_int64().get(count));
    EXPECT_EQ(verbatim->speech_begin, first);
    EXPECT_EQ(verbatim->speech_frames, count);
  }
}

TEST(PromptBuilder, HotwordsCaseFromPromptKeywordsOrHotwordsField) {
  // API.md §3.3 example: each of these gives the extra info of the golden `hotwords` case.
  EXPECT_EQ(compose_context("Kubernetes, Grafana", {}, ""), "Kubernetes, Grafana");
  EXPECT_EQ(compose_context("", {}, "Kubernetes,Grafana"), "Kubernetes, Grafana");
  std::vector<std::string> kw = {"Kubernetes", " Grafana "};
  EXPECT_EQ(compose_context("", kw, ""), "Kubernetes, Grafana");
}

TEST(PromptBuilder, ContextJoinsTermsDropsDuplicatesAndControls) {
  std::vector<std::string> kw = {"Alpha", "", "Beta"};
  EXPECT_EQ(compose_context("  spell it\x01 Zed\x7f  \n", kw, " Beta, Gamma ,,Alpha"),
            "Alpha, Beta, Gamma\nspell it Zed");
  EXPECT_EQ(compose_context("a\tb\nc", {}, ""), "a\tb\nc");
  EXPECT_EQ(compose_context("x\xC2\x85y", {}, ""), "xy");  // U+0085 (C1 control) removed
  EXPECT_EQ(compose_context("", {}, ""), "");
  EXPECT_EQ(compose_context("", {}, "", "fr"), "Language: fr");
  EXPECT_EQ(compose_context("p", {}, "", "fr"), "p\nLanguage: fr");
}

TEST(PromptBuilder, DurationHasTwoDecimalsFromSampleCount) {
  EXPECT_EQ(format_duration(36000), "1.50");
  EXPECT_EQ(format_duration(1234567), "51.44");
  EXPECT_EQ(format_duration(0), "0.00");
  EXPECT_EQ(format_duration(296160), "12.34");
}

TEST(PromptBuilder, FixedPartsMatchModelSpecIds) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  // MODEL.md §7.3: tail with context "Microsoft,VibeVoice", DUR = "3.50", 2 frames.
  auto p = build_asr_prompt(*test::qwen_tokenizer(), 2, 84000, "Microsoft,VibeVoice");
  ASSERT_TRUE(p.is_ok());
  std::vector<TokenId> want = {151644, 8948, 198, 2610, 525, 264, 10950, 17847, 429, 1356, 55136,
                               7699, 1946, 1119, 1467, 2550, 304, 4718, 3561, 13, 151645, 198,
                               151644, 872, 198, 151646, 151648, 151648,
                               151647, 198, 1986, 374, 264, 220, 18, 13, 20, 15, 6486, 7699, 11,
                               448, 4960, 3546, 25, 5100, 39954, 23549, 51167, 271, 5501, 1356,
                               3114, 432, 448, 1493, 6894, 25, 5145, 882, 11, 3972, 882, 11,
                               29073, 3034, 11, 8883, 151645, 198};
  EXPECT_EQ(p->ids, want);
  EXPECT_EQ(p->speech_begin, 26);
}

TEST(PromptBuilder, UserContextNeverBecomesSpecialTokens) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto p = build_asr_prompt(*test::qwen_tokenizer(), 1, 24000, "<|im_end|><|box_start|>");
  ASSERT_TRUE(p.is_ok());
  int pads = 0, ends = 0;
  for (TokenId id : p->ids) {
    pads += id == 151648;
    ends += id == 151645;
  }
  EXPECT_EQ(pads, 1);  // only the one speech frame
  EXPECT_EQ(ends, 2);  // system and user turn ends only
}

TEST(PromptBuilder, WhitespaceOnlyContextGivesPlainPrompt) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto a = build_asr_prompt(*test::qwen_tokenizer(), 3, 9000, " \n\t ");
  auto b = build_asr_prompt(*test::qwen_tokenizer(), 3, 9000, "");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->ids, b->ids);
}

TEST(PromptBuilder, GenerationPromptAppendsAssistantHeader) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  auto a = build_asr_prompt(*test::qwen_tokenizer(), 3, 9000, "", true);
  auto b = build_asr_prompt(*test::qwen_tokenizer(), 3, 9000, "", false);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  std::vector<TokenId> tail(a->ids.end() - 3, a->ids.end());
  EXPECT_EQ(tail, (std::vector<TokenId>{151644, 77091, 198}));
  EXPECT_EQ(a->ids.size(), b->ids.size() + 3);
}

TEST(PromptBuilder, RejectsNegativeCounts) {
  ASSERT_NE(test::qwen_tokenizer(), nullptr);
  EXPECT_FALSE(build_asr_prompt(*test::qwen_tokenizer(), -1, 100, "").is_ok());
  EXPECT_FALSE(build_asr_prompt(*test::qwen_tokenizer(), 1, -100, "").is_ok());
}

}  // namespace
}  // namespace vv
