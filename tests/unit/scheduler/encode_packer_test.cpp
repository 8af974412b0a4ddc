// The EngineLoop's encoder packer (issue 13): requests admitted together have their next audio
// segments encoded in one launch (fewer launches than segments, several segments in one launch),
// with the same prompt ids, generated ids and transcripts as the unpacked loop (one segment per
// launch) and the goldens; a cancel during encoding ends only that request.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "engine/text/prompt_builder.h"
#include "scheduler/engine_loop.h"
#include "tests/unit/scheduler/engine_loop_fixture.h"

namespace vv::test::packer {
namespace {

using namespace std::chrono_literals;

class EncodePacker : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = TinyEngine::make(tiny_runner_options());
    ASSERT_NE(engine_, nullptr);
    hop_ = engine_->runner->spec().acoustic.hop();
  }
  // A loop that starts paused, so that every request submitted before resume() is admitted in the
  // same step and encoded side by side.
  std::unique_ptr<EngineLoop> loop(std::int64_t pack_samples, RequestProgressFn progress = {},
                                   EncodeObserverFn on_encode = {}, bool warmup = false) {
    EngineLoopOptions opt;
    opt.warmup = warmup;
    opt.progress = std::move(progress);
    opt.on_encode = std::move(on_encode);
    opt.encode_segment = static_cast<std::int64_t>(hop_) * 8;  // several segments per request
    opt.encode_pack_samples = pack_samples;
    opt.start_paused = true;
    auto l = EngineLoop::create(*engine_->runner, *engine_->tokenizer, std::move(opt));
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    auto lp = std::move(l).value();
    // Ready once the thread runs (after the warm-up, when asked: seconds under the sanitizers).
    for (int i = 0; i < 30000 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
    EXPECT_TRUE(lp->load().ready);
    return lp;
  }
  const ModelSpec& spec() const { return engine_->runner->spec(); }
  std::unique_ptr<TinyEngine> engine_;
  int hop_ = 0;
};

struct RunResult {
  std::vector<RequestEvent> done;
  EncodeStats enc;
};

TEST_F(EncodePacker, SeveralRequestsShareLaunchesWithTheUnpackedIdsAndTranscripts) {
  std::vector<std::string> names;
  for (const auto& n : golden_cases()) {
    if (n != "long") names.push_back(n);
  }
  ASSERT_GE(names.size(), 3u);
  auto run = [&](std::int64_t pack_samples) {
    auto lp = loop(pack_samples);
    Collector c;
    std::vector<RequestId> ids;
    for (const auto& name : names) {
      GoldenIds g = golden_ids(name);
      Request r = transcription(golden_audio(name, spec()), g.context, static_cast<int>(g.generated.size()));
      r.stream = true;
      auto id = lp->submit(std::move(r), c.sink());
      EXPECT_TRUE(id.is_ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    lp->resume();
    RunResult out;
    for (RequestId id : ids) {
      auto ev = c.wait(id);
      const RequestEvent* t = terminal_of(ev);
      EXPECT_NE(t, nullptr);
      out.done.push_back(t ? *t : RequestEvent{});
    }
    for (int i = 0; i < 1000 && lp->stats().busy; ++i) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(5ms);
    out.enc = lp->encode_stats();
    EXPECT_EQ(lp->stats().load.kv_blocks_used, 0);
    return out;
  };
  const RunResult unpacked = run(0);
  const RunResult packed = run(static_cast<std::int64_t>(hop_) * 8 * 4);

  std::printf(
      "encoder launches for %lld segments: unpacked %lld, packed %lld (at most %lld segments, %lld "
      "samples)\n",
      static_cast<long long>(unpacked.enc.segments), static_cast<long long>(unpacked.enc.launches),
      static_cast<long long>(packed.enc.launches), static_cast<long long>(packed.enc.most_segments),
      static_cast<long long>(packed.enc.most_samples));
  // The same segments either way; packed, as many per launch as the samples budget holds.
  EXPECT_EQ(unpacked.enc.launches, unpacked.enc.segments) << "unpacked: one segment per launch";
  EXPECT_EQ(unpacked.enc.most_segments, 1);
  EXPECT_EQ(packed.enc.segments, unpacked.enc.segments);
  EXPECT_EQ(packed.enc.samples, unpacked.enc.samples);
  EXPECT_GE(packed.enc.most_segments, 2) << "several requests' segments in one launch";
  EXPECT_LE(packed.enc.most_samples, static_cast<std::int64_t>(hop_) * 8 * 4) << "the samples budget";
  EXPECT_GT(packed.enc.most_samples, static_cast<std::int64_t>(hop_) * 8);
  EXPECT_LT(packed.enc.launches, unpacked.enc.launches);
  EXPECT_EQ(unpacked.enc.most_samples, static_cast<std::int64_t>(hop_) * 8);

  for (std::size_t i = 0; i < names.size(); ++i) {
    const RequestEvent& a = unpacked.done[i];
    const RequestEvent& b = packed.done[i];
    ASSERT_EQ(a.type, RequestEvent::Type::kDone) << names[i] << ": " << a.error.to_string();
    ASSERT_EQ(b.type, RequestEvent::Type::kDone) << names[i] << ": " << b.error.to_string();
    const GoldenIds g = golden_ids(names[i]);
    EXPECT_EQ(b.prompt_ids, g.prompt) << names[i];
    EXPECT_EQ(b.generated_ids, g.generated) << names[i];
    EXPECT_EQ(a.generated_ids, b.generated_ids) << names[i];
    EXPECT_EQ(a.transcript.text, b.transcript.text) << names[i];
  }
}

// The victim is cancelled from the progress report of its first launch (on the engine thread):
// the cancel takes effect before the next launch, which carries the other request alone.
TEST_F(EncodePacker, CancelBetweenPackedLaunchesEndsOnlyThatRequest) {
  std::atomic<EngineLoop*> self{nullptr};
  std::atomic<RequestId> victim{0};
  std::atomic<std::int64_t> victim_done{0}, victim_total{0};
  auto lp = loop(static_cast<std::int64_t>(hop_) * 8 * 4, [&](const TranscriptionProgress& p) {
    if (p.phase != TranscriptionProgress::Phase::kEncoding || p.request != victim.load()) return;
    victim_done = p.done;
    victim_total = p.total;
    if (EngineLoop* l = self.load()) l->cancel(static_cast<RequestId>(p.request));
  });
  self = lp.get();
  Collector c;
  // The victim: the case with the most audio (several launches); the other: the one with the least.
  std::string longest, shortest;
  for (const auto& n : golden_cases()) {
    if (n == "long") continue;
    const std::size_t len = golden_ids(n).prompt.size();
    if (longest.empty() || len > golden_ids(longest).prompt.size()) longest = n;
    if (shortest.empty() || len < golden_ids(shortest).prompt.size()) shortest = n;
  }
  ASSERT_NE(longest, shortest);
  const GoldenIds g = golden_ids(shortest);
  auto a = lp->submit(transcription(golden_audio(longest, spec()), "", 5000), c.sink());
  ASSERT_TRUE(a.is_ok());
  victim = *a;
  auto b = lp->submit(
      transcription(golden_audio(shortest, spec()), g.context, static_cast<int>(g.generated.size())),
      c.sink());
  ASSERT_TRUE(b.is_ok());
  lp->resume();
  auto ea = c.wait(*a), eb = c.wait(*b);
  const RequestEvent* ta = terminal_of(ea);
  const RequestEvent* tb = terminal_of(eb);
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->type, RequestEvent::Type::kError);
  EXPECT_EQ(ta->error.code(), StatusCode::kCancelled);
  EXPECT_EQ(victim_done.load(), 8) << "one launch of the victim's audio, then the cancel";
  EXPECT_GT(victim_total.load(), 8);
  ASSERT_EQ(tb->type, RequestEvent::Type::kDone) << tb->error.to_string();
  EXPECT_EQ(tb->generated_ids, g.generated);
  for (int i = 0; i < 1000 && lp->stats().busy; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_GE(lp->encode_stats().most_segments, 2) << "both requests shared the first launch";
}

// A short request (its audio fits one segment) admitted with a long one (several segments): the
// launch that completes the short one's audio carries nothing else, so the long one's segment does
// not delay its first token; the long one's segments still share launches (budget permitting) and
// both finish.
TEST_F(EncodePacker, ALaunchCompletingAShortRequestCarriesNoLongSegment) {
  std::mutex mu;
  std::vector<EncodeReport> launches;
  auto lp = loop(static_cast<std::int64_t>(hop_) * 8 * 4, {}, [&](const EncodeReport& r) {
    std::lock_guard<std::mutex> lk(mu);
    launches.push_back(r);
  });
  std::string longest;
  for (const auto& n : golden_cases()) {
    if (n == "long") continue;
    if (longest.empty() || golden_ids(n).prompt.size() > golden_ids(longest).prompt.size()) longest = n;
  }
  audio::PreparedAudio long_audio = golden_audio(longest, spec());
  ASSERT_GT(long_audio.input_values.size(), static_cast<std::size_t>(hop_) * 16) << "several segments";
  audio::PreparedAudio short_audio = long_audio;
  short_audio.input_values.resize(static_cast<std::size_t>(hop_) * 5);  // one 8-frame segment
  short_audio.samples = static_cast<std::int64_t>(hop_) * 5;
  short_audio.frames = 5;
  short_audio.duration = audio::format_duration(short_audio.samples, spec().sample_rate);
  Collector c;
  auto a = lp->submit(transcription(long_audio, "", 4), c.sink());
  auto b = lp->submit(transcription(short_audio, "", 4), c.sink());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  lp->resume();
  auto ea = c.wait(*a), eb = c.wait(*b);
  const RequestEvent* ta = terminal_of(ea);
  const RequestEvent* tb = terminal_of(eb);
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->type, RequestEvent::Type::kDone) << ta->error.to_string();
  EXPECT_EQ(tb->type, RequestEvent::Type::kDone) << tb->error.to_string();
  for (int i = 0; i < 1000 && lp->stats().busy; ++i) std::this_thread::sleep_for(1ms);
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_FALSE(launches.empty());
  // The first launch completing a request is the short one's, alone: its 5 frames and no segment of
  // the long one, which still has segments to go then. (Which request the very first launch takes
  // depends on whether the loop took both submissions before resume(): either way the short one's
  // completing launch comes before the long one's.)
  const auto first_done =
      std::find_if(launches.begin(), launches.end(), [](const EncodeReport& r) { return r.finishing > 0; });
  ASSERT_NE(first_done, launches.end());
  EXPECT_EQ(first_done->segments, 1);
  EXPECT_EQ(first_done->finishing, 1);
  EXPECT_EQ(first_done->samples, static_cast<std::int64_t>(hop_) * 5);
  EXPECT_LE(first_done - launches.begin(), 1) << "the short request waited for at most one launch";
  std::int64_t samples = 0, finishing = 0;
  for (const EncodeReport& r : launches) {
    samples += r.samples;
    finishing += r.finishing;
    if (r.finishing > 0) {
      EXPECT_EQ(r.segments, r.finishing) << "a completing launch carries only completions";
    }
  }
  EXPECT_EQ(finishing, 2);
  const std::int64_t long_padded =
      (static_cast<std::int64_t>(long_audio.input_values.size()) + hop_ - 1) / hop_ * hop_;
  EXPECT_EQ(samples, long_padded + static_cast<std::int64_t>(hop_) * 5) << "every sample encoded once";
}

// The warm-up (one launch of silence per packed segment count, before ready) leaves requests their
// golden ids, and the packer's counters start from zero.
TEST_F(EncodePacker, WarmUpLaunchesEachPackedCountOnceAndChangesNoIds) {
  auto lp = loop(static_cast<std::int64_t>(hop_) * 8 * 3, {}, {}, /*warmup=*/true);
  lp->resume();
  const EncodeStats before = lp->encode_stats();
  EXPECT_EQ(before.warmup_launches, 3) << "1, 2 and 3 segments of silence";
  EXPECT_EQ(before.launches, 0);
  EXPECT_EQ(before.samples, 0);
  Collector c;
  const std::string name = golden_cases().front();
  const GoldenIds g = golden_ids(name);
  auto id = lp->submit(
      transcription(golden_audio(name, spec()), g.context, static_cast<int>(g.generated.size())), c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  auto ev = c.wait(*id);
  const RequestEvent* t = terminal_of(ev);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, RequestEvent::Type::kDone) << t->error.to_string();
  EXPECT_EQ(t->prompt_ids, g.prompt);
  EXPECT_EQ(t->generated_ids, g.generated);
}

}  // namespace
}  // namespace vv::test::packer
