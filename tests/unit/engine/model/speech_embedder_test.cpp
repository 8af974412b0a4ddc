// SpeechEmbedder in steps: progress per segment, the same rows as one call, bad segments refused.
#include "engine/model/speech_embedder.h"

#include <gtest/gtest.h>

#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace vv::test {
namespace {

TEST(SpeechEmbedder, SteppedJobReportsProgressAndMatchesGoldenSpeechEmbeds) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  auto emb = SpeechEmbedder::create(*be, (*ckpt)->spec(), (*ckpt)->weights());
  ASSERT_TRUE(emb.is_ok()) << emb.status().to_string();
  std::string pick;
  for (const std::string& name : golden_cases()) {  // the longest case that ships input_values
    GoldenCase c(name);
    if (c.ok() && c.has("input_values") &&
        (pick.empty() || c.prompt_ids().size() > GoldenCase(pick).prompt_ids().size())) {
      pick = name;
    }
  }
  ASSERT_FALSE(pick.empty()) << "no golden case has input_values";
  GoldenCase gc(pick);
  const std::vector<float> x = gc.tensor("input_values").data;
  const int hop = (*emb)->hop();
  const int64_t seg = static_cast<int64_t>(hop) * 10;
  auto job = (*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{seg, {}});
  ASSERT_TRUE(job.is_ok()) << job.status().to_string();
  const int64_t frames = (*job)->frames();
  int steps = 0;
  while (!(*job)->done()) {
    ASSERT_TRUE((*emb)->step(**job).is_ok());
    ++steps;
    EXPECT_EQ((*job)->frames_done(), std::min<int64_t>(frames, 10 * steps));
  }
  EXPECT_EQ(steps, (frames + 9) / 10);
  SpeechRows rows = (*job)->take();
  expect_end_to_end(pick + " speech_embeds in segments of 10 frames", download(*be, rows.rows.t), gc.tensor("speech_embeds"));
}

TEST(SpeechEmbedder, SegmentLongerThanTheWorkspaceIsRefused) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend(1);
  const int hop = (*ckpt)->spec().acoustic.hop();
  auto emb = SpeechEmbedder::create(*be, (*ckpt)->spec(), (*ckpt)->weights(), hop * 4);
  ASSERT_TRUE(emb.is_ok());
  std::vector<float> x(static_cast<size_t>(hop) * 8, 0.f);
  EXPECT_FALSE((*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 8, {}}).is_ok());
  EXPECT_FALSE((*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 2 + 1, {}}).is_ok());
  auto ok = (*emb)->embed(x.data(), static_cast<int64_t>(x.size()));  // default: the workspace's segment
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->frames(), 8);
}

}  // namespace
}  // namespace vv::test
