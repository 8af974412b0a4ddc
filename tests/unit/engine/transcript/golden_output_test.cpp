// The golden cases' generated text (the tiny random-weight model never writes the JSON array)
// takes the fallback path of API.md §3.4: one segment [0, duration], speaker A, the whole trimmed
// text; and the stream carries exactly that text as one delta followed by one segment event.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "engine/transcript/response_format.h"
#include "engine/transcript/transcript_assembler.h"
#include "engine/transcript/utf8_text.h"
#include "tests/support/test_paths.h"

namespace vv {
namespace {

struct GoldenOutput {
  std::string generated_text;
  double duration = 0;
};

GoldenOutput load(const std::string& name) {
  const std::string path = test::golden_dir() + "/cases/" + name + "/golden.json";
  simdjson::padded_string json = simdjson::padded_string::load(path).value();
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc = parser.iterate(json).value();
  GoldenOutput g;
  g.generated_text = std::string(std::string_view(doc["generated_text"].get_string().value()));
  const std::int64_t samples = doc["audio"]["num_samples_24k"].get_int64().value();
  g.duration = static_cast<double>(samples) / 24000.0;
  return g;
}

TEST(GoldenOutput, TinyModelTextBecomesTheSingleFallbackSegment) {
  const auto cases = test::golden_cases();
  ASSERT_FALSE(cases.empty());
  for (const auto& name : cases) {
    const GoldenOutput g = load(name);
    const std::string want = std::string(utf8::trim(g.generated_text));
    ASSERT_FALSE(want.empty()) << name;
    // Fed as the generated tokens would arrive after the assistant header, in small pieces.
    TranscriptAssembler a(g.duration);
    std::vector<TranscriptEvent> events;
    a.feed("<|im_start|>assistant\n", events);
    for (std::size_t i = 0; i < g.generated_text.size(); i += 3) a.feed(g.generated_text.substr(i, 3), events);
    a.finish(events);
    const Transcript& t = a.transcript();
    EXPECT_TRUE(t.parse_failed) << name;
    ASSERT_EQ(t.segments.size(), 1u) << name;
    EXPECT_EQ(t.segments[0].text, want) << name;
    EXPECT_EQ(t.segments[0].speaker, "A") << name;
    EXPECT_EQ(t.segments[0].start, 0.0) << name;
    EXPECT_EQ(t.segments[0].end, g.duration) << name;
    EXPECT_EQ(t.text, want) << name;
    ASSERT_EQ(events.size(), 2u) << name;
    EXPECT_EQ(events[0].kind, TranscriptEvent::Kind::kDelta);
    EXPECT_EQ(events[0].delta, want);
    EXPECT_EQ(events[1].kind, TranscriptEvent::Kind::kSegment);
    EXPECT_EQ(write_text(t), want + "\n") << name;
  }
}

}  // namespace
}  // namespace vv
