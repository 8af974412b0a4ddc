// SpeechEmbedder in steps: progress per segment, the same rows as one call, bad segments refused.
#include "engine/model/speech_embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/forwarding_backend.h"
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

// A backend with a lane (as the CUDA backend's second stream) over CPU backends: each GEMM and each
// wait_for is logged with the backend that got it ("m" the main one, "l" its lane).
class LaneLog final : public ForwardingBackend {
 public:
  LaneLog(std::unique_ptr<Backend> inner, std::shared_ptr<std::string> log, char who)
      : ForwardingBackend(std::move(inner)), log_(std::move(log)), who_(who) {}
  std::unique_ptr<Backend> make_lane() override {
    return std::make_unique<LaneLog>(cpu_backend(), log_, 'l');
  }
  void wait_for(Backend& other) override {
    *log_ += std::string(1, who_) + "<" + static_cast<LaneLog&>(other).who_ + " ";
  }
  void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) override {
    *log_ += who_;
    inner().gemm(a, w, bias, out, ep);
  }

 private:
  std::shared_ptr<std::string> log_;
  char who_;
};

// Where the backend has a lane, the semantic encoder runs on it with its own workspace: the same
// rows, bitwise, as on one backend; per step the lane waits for the main backend before its first
// op, and the main backend waits for the lane before the connector's GEMMs.
TEST(SpeechEmbedder, SemanticEncoderOnALaneGivesTheSameRowsInOrder) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int hop = (*ckpt)->spec().acoustic.hop();
  std::vector<float> x(static_cast<size_t>(hop) * 23 - 501);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f * std::sin(0.0137f * static_cast<float>(i));
  auto plain = cpu_backend();
  auto one = SpeechEmbedder::create(*plain, (*ckpt)->spec(), (*ckpt)->weights());
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  auto want = (*one)->embed(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 8, {}});
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();

  auto log = std::make_shared<std::string>();
  LaneLog main_be(cpu_backend(), log, 'm');
  auto two = SpeechEmbedder::create(main_be, (*ckpt)->spec(), (*ckpt)->weights());
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  log->clear();
  auto got = (*two)->embed(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 8, {}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const std::vector<float> a = download(*plain, want->rows.t), b = download(main_be, got->rows.t);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // Per step (3 segments): "l<m", the acoustic GEMMs (m), the semantic ones (l), "m<l", then the
  // connector's (m).
  const std::string& g = *log;
  int steps = 0;
  size_t at = 0;
  while ((at = g.find("l<m ", at)) != std::string::npos) {
    const size_t back = g.find("m<l ", at);
    ASSERT_NE(back, std::string::npos) << g;
    const std::string between = g.substr(at + 4, back - at - 4);
    EXPECT_NE(between.find('m'), std::string::npos) << "no acoustic GEMM in step " << steps << ": " << g;
    EXPECT_NE(between.find('l'), std::string::npos) << "no semantic GEMM in step " << steps << ": " << g;
    EXPECT_EQ(between.find('l'), between.find_first_not_of('m'))
        << "acoustic and semantic GEMMs interleaved: " << g;
    const size_t next = g.find("l<m ", back);
    const std::string after =
        g.substr(back + 4, next == std::string::npos ? std::string::npos : next - back - 4);
    EXPECT_EQ(after.find('l'), std::string::npos) << "a lane GEMM after the main backend waited: " << g;
    EXPECT_NE(after.find('m'), std::string::npos) << "no connector GEMM after the wait: " << g;
    at = back;
    ++steps;
  }
  EXPECT_EQ(steps, 3) << g;
  EXPECT_EQ(g.find('l'), g.find("l<m ")) << "a lane GEMM before the lane waited: " << g;
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
