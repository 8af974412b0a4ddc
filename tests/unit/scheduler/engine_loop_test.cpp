// EngineLoop on the tiny golden model: golden ids through the loop (transcription and chat
// requests), N concurrent requests byte-identical to each run alone (ids, transcript, stream
// events), cancellation, deadlines, the test hooks (pause, fault injection, ready delay, forced
// output), queue limits, and KV blocks all returned at the end.
#include "scheduler/engine_loop.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "engine/text/prompt_builder.h"
#include "tests/unit/scheduler/engine_loop_fixture.h"

namespace vv::test {
namespace {

using namespace std::chrono_literals;

// Cases short enough for many runs (the `long` one is left to the runner tests).
std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const auto& n : golden_cases()) {
    if (n != "long") out.push_back(n);
  }
  return out;
}

// Stats are published after each step, a moment after the step's events: wait for the loop to go idle.
EngineStats settled(const EngineLoop& lp) {
  for (int i = 0; i < 1000 && lp.stats().busy; ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(5ms);
  return lp.stats();
}

class EngineLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = TinyEngine::make(tiny_runner_options());
    ASSERT_NE(engine_, nullptr);
  }
  std::unique_ptr<EngineLoop> loop(EngineLoopOptions opt = {}) {
    auto l = EngineLoop::create(*engine_->runner, *engine_->tokenizer, std::move(opt));
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    auto loop = std::move(l).value();
    for (int i = 0; i < 500 && !loop->load().ready; ++i) std::this_thread::sleep_for(2ms);
    return loop;
  }
  const ModelSpec& spec() const { return engine_->runner->spec(); }
  std::unique_ptr<TinyEngine> engine_;
};

TEST_F(EngineLoopTest, TranscriptionRequestsGiveGoldenPromptAndIds) {
  auto lp = loop();
  Collector c;
  for (const std::string& name : golden_cases()) {  // `long` too: several encoder segments
    GoldenIds g = golden_ids(name);
    auto id = lp->submit(
        transcription(golden_audio(name, spec()), g.context, static_cast<int>(g.generated.size())), c.sink());
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    auto ev = c.wait(*id);
    const RequestEvent* done = terminal_of(ev);
    ASSERT_NE(done, nullptr);
    ASSERT_EQ(done->type, RequestEvent::Type::kDone) << done->error.to_string();
    EXPECT_EQ(done->prompt_ids, g.prompt) << name;
    EXPECT_EQ(done->generated_ids, g.generated) << name;
    EXPECT_EQ(done->finish_reason, FinishReason::kLength) << name;
    EXPECT_EQ(done->usage.output_tokens, static_cast<int64_t>(g.generated.size()));
    EXPECT_EQ(done->usage.audio_tokens + done->usage.text_tokens, static_cast<int64_t>(g.prompt.size()));
    EXPECT_EQ(ev.front().type, RequestEvent::Type::kStarted);
  }
  EXPECT_EQ(settled(*lp).load.kv_blocks_used, 0);
}

TEST_F(EngineLoopTest, ChatRequestWithGoldenPromptIdsGivesGoldenIds) {
  auto lp = loop();
  Collector c;
  const std::string name = cases().front();
  GoldenIds g = golden_ids(name);
  Request r;
  r.kind = Request::Kind::kChat;
  r.prompt_ids = g.prompt;
  r.audio.push_back(golden_audio(name, spec()));
  r.sampling.max_new_tokens = static_cast<int>(g.generated.size());
  r.sampling.ignore_eos = true;
  r.stream = true;
  auto id = lp->submit(std::move(r), c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  auto ev = c.wait(*id);
  const RequestEvent* done = terminal_of(ev);
  ASSERT_NE(done, nullptr);
  ASSERT_EQ(done->type, RequestEvent::Type::kDone) << done->error.to_string();
  EXPECT_EQ(done->generated_ids, g.generated);
  std::string joined;
  for (const auto& e : ev) {
    if (e.type == RequestEvent::Type::kTextDelta) joined += e.text;
  }
  EXPECT_EQ(joined, done->text) << "the deltas add up to the completion";
}

// The same requests alone (one after another) and all at once (continuous batching, shared prompt
// prefix blocks, prefill chunks mixed with decode rows) give byte-identical results.
TEST_F(EngineLoopTest, ConcurrentRequestsMatchEachRunAlone) {
  std::vector<Request> reqs;
  const auto names = cases();
  for (int rep = 0; rep < 2; ++rep) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      GoldenIds g = golden_ids(names[i]);
      Request r =
          transcription(golden_audio(names[i], spec()), g.context, 24 + 7 * static_cast<int>(i) + 5 * rep);
      r.stream = true;
      r.sampling.logprobs = rep == 1;
      reqs.push_back(std::move(r));
    }
  }
  auto run = [&](bool together) {
    auto lp = loop();
    Collector c;
    std::vector<std::vector<RequestEvent>> out;
    std::vector<RequestId> ids;
    for (const Request& r : reqs) {
      auto id = lp->submit(r, c.sink());
      EXPECT_TRUE(id.is_ok()) << id.status().to_string();
      if (!together) out.push_back(c.wait(*id));
      ids.push_back(*id);
    }
    if (together) {
      for (RequestId id : ids) out.push_back(c.wait(id));
    }
    const EngineStats st = settled(*lp);
    EXPECT_EQ(st.load.kv_blocks_used, 0) << "every block is returned";
    EXPECT_GT(st.prefix_hit_blocks, 0) << "the shared system prompt was found";
    return std::make_pair(out, st);
  };
  auto [alone, st_alone] = run(false);
  auto [together, st_together] = run(true);
  EXPECT_GT(st_together.steps, 0);
  EXPECT_LT(st_together.steps, st_alone.steps) << "concurrent requests share steps";
  ASSERT_EQ(alone.size(), together.size());
  for (std::size_t i = 0; i < alone.size(); ++i) {
    const RequestEvent* a = terminal_of(alone[i]);
    const RequestEvent* b = terminal_of(together[i]);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->type, RequestEvent::Type::kDone) << a->error.to_string();
    ASSERT_EQ(b->type, RequestEvent::Type::kDone) << b->error.to_string();
    EXPECT_EQ(a->prompt_ids, b->prompt_ids) << i;
    EXPECT_EQ(a->generated_ids, b->generated_ids) << i;
    EXPECT_EQ(a->transcript.text, b->transcript.text) << i;
    ASSERT_EQ(a->transcript.segments.size(), b->transcript.segments.size()) << i;
    ASSERT_EQ(a->transcript.logprobs.size(), b->transcript.logprobs.size()) << i;
    for (std::size_t k = 0; k < a->transcript.logprobs.size(); ++k) {
      EXPECT_EQ(a->transcript.logprobs[k].logprob, b->transcript.logprobs[k].logprob) << i << " token " << k;
    }
    std::string da, db;
    for (const auto& e : alone[i]) da += e.type == RequestEvent::Type::kTextDelta ? e.text : "";
    for (const auto& e : together[i]) db += e.type == RequestEvent::Type::kTextDelta ? e.text : "";
    EXPECT_EQ(da, db) << i;
    EXPECT_EQ(da, a->transcript.text) << "deltas add up to the transcript text, request " << i;
  }
}

// Rows whose logits cross to the host (sampling, logprobs, top alternatives) are picked side by side
// on EngineLoopOptions::output_threads threads: each on its own request's sampler, so one thread and
// several give the same tokens, logprobs and alternatives, with the requests batched together.
TEST_F(EngineLoopTest, SampledRowsPickTheSameTokensOnOneThreadAndOnSeveral) {
  std::vector<Request> reqs;
  const auto names = cases();
  for (int rep = 0; rep < 2; ++rep) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      Request r = transcription(golden_audio(names[i], spec()), golden_ids(names[i]).context,
                                20 + 3 * static_cast<int>(i));
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 11 + 7 * reqs.size();
      r.sampling.logprobs = true;
      r.sampling.top_logprobs = rep == 0 ? 0 : 3;
      r.sampling.ignore_eos = true;
      r.repetition_detection = false;
      reqs.push_back(std::move(r));
    }
  }
  auto run = [&](int threads) {
    EngineLoopOptions opt;
    opt.output_threads = threads;
    auto lp = loop(std::move(opt));
    Collector c;
    std::vector<RequestId> ids;
    for (const Request& r : reqs) {
      auto id = lp->submit(r, c.sink());
      EXPECT_TRUE(id.is_ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    std::vector<std::vector<RequestEvent>> out;
    for (RequestId id : ids) out.push_back(c.wait(id));
    const EngineStats st = settled(*lp);
    EXPECT_EQ(st.load.kv_blocks_used, 0) << "every block is returned";
    return std::make_pair(out, st);
  };
  auto [one, st_one] = run(1);
  auto [several, st_several] = run(3);
  std::int64_t generated = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent* a = terminal_of(one[i]);
    const RequestEvent* b = terminal_of(several[i]);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->type, RequestEvent::Type::kDone) << a->error.to_string();
    ASSERT_EQ(b->type, RequestEvent::Type::kDone) << b->error.to_string();
    EXPECT_EQ(a->generated_ids.size(), static_cast<std::size_t>(reqs[i].sampling.max_new_tokens)) << i;
    EXPECT_EQ(a->generated_ids, b->generated_ids) << i;
    generated += static_cast<std::int64_t>(a->generated_ids.size());
    ASSERT_EQ(a->transcript.logprobs.size(), b->transcript.logprobs.size()) << i;
    ASSERT_FALSE(a->transcript.logprobs.empty()) << i;
    for (std::size_t k = 0; k < a->transcript.logprobs.size(); ++k) {
      EXPECT_EQ(a->transcript.logprobs[k].logprob, b->transcript.logprobs[k].logprob) << i << " token " << k;
      EXPECT_EQ(a->transcript.logprobs[k].token, b->transcript.logprobs[k].token) << i << " token " << k;
    }
  }
  EXPECT_LT(st_several.steps, generated) << "the requests shared steps (several rows picked at once)";
}

// A greedy request with logprobs (a verbose_json transcription) takes its tokens' logprobs from the
// device (SequenceRows::want_logprob; no logits cross): the same ids as without logprobs, and the
// logprobs the host computes from the downloaded logits when the same ids are forced.
TEST_F(EngineLoopTest, GreedyLogprobsFromTheDeviceMatchTheHostsFromTheLogits) {
  auto lp = loop();
  Collector c;
  const std::string name = cases().front();
  GoldenIds g = golden_ids(name);
  auto run = [&](Request r) {
    auto id = lp->submit(std::move(r), c.sink());
    EXPECT_TRUE(id.is_ok()) << id.status().to_string();
    auto ev = c.wait(*id);
    const RequestEvent* done = terminal_of(ev);
    EXPECT_NE(done, nullptr);
    return done ? *done : RequestEvent{};
  };
  Request dev = transcription(golden_audio(name, spec()), g.context, static_cast<int>(g.generated.size()));
  dev.sampling.logprobs = true;
  const RequestEvent a = run(dev);
  ASSERT_EQ(a.type, RequestEvent::Type::kDone) << a.error.to_string();
  EXPECT_EQ(a.generated_ids, g.generated) << "the golden greedy ids";
  Request host = transcription(golden_audio(name, spec()), g.context, static_cast<int>(g.generated.size()));
  host.sampling.logprobs = true;
  host.forced_ids = a.generated_ids;  // forced: the logits cross and the host takes each logprob
  const RequestEvent b = run(host);
  ASSERT_EQ(b.type, RequestEvent::Type::kDone) << b.error.to_string();
  EXPECT_EQ(b.generated_ids, a.generated_ids);
  ASSERT_FALSE(a.transcript.logprobs.empty());
  ASSERT_EQ(a.transcript.logprobs.size(), b.transcript.logprobs.size());
  for (std::size_t k = 0; k < a.transcript.logprobs.size(); ++k) {
    const double want = b.transcript.logprobs[k].logprob;
    EXPECT_NEAR(a.transcript.logprobs[k].logprob, want, 2e-6 * (1.0 + std::fabs(want))) << "token " << k;
    EXPECT_LT(a.transcript.logprobs[k].logprob, 0.0) << "token " << k;
    EXPECT_EQ(a.transcript.logprobs[k].token, b.transcript.logprobs[k].token) << "token " << k;
  }
}

TEST_F(EngineLoopTest, CancelEndsARunningRequestAndFreesItsBlocks) {
  auto lp = loop();
  Collector c;
  Request r = transcription(golden_audio(cases().front(), spec()), "", 5000);
  r.stream = true;
  auto id = lp->submit(std::move(r), c.sink());
  ASSERT_TRUE(id.is_ok());
  for (int i = 0; i < 5000 && lp->stats().decode_rows_total < 3; ++i) std::this_thread::sleep_for(1ms);
  lp->cancel(*id);
  auto ev = c.wait(*id, std::chrono::seconds(10));
  const RequestEvent* end = terminal_of(ev);
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(end->type, RequestEvent::Type::kError);
  EXPECT_EQ(end->error.code(), StatusCode::kCancelled);
  EXPECT_EQ(end->cause, ErrorCause::kCancelled);
  const EngineStats st = settled(*lp);
  EXPECT_EQ(st.load.kv_blocks_used, 0);
  EXPECT_EQ(st.load.running, 0);
  lp->cancel(*id);  // idempotent: no second terminal event
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(c.snapshot(*id).size(), ev.size());
}

TEST_F(EngineLoopTest, PassedDeadlineAndQueueDeadlineEndWithTheirCause) {
  auto lp = loop();
  Collector c;
  Request r = transcription(golden_audio(cases().front(), spec()), "", 5000);
  r.deadline = Clock::now() + 50ms;
  auto id = lp->submit(std::move(r), c.sink());
  ASSERT_TRUE(id.is_ok());
  auto ev = c.wait(*id, std::chrono::seconds(10));
  ASSERT_NE(terminal_of(ev), nullptr);
  EXPECT_EQ(ev.back().type, RequestEvent::Type::kError);
  EXPECT_EQ(ev.back().cause, ErrorCause::kDeadline);

  lp->pause();  // nothing is admitted while paused
  Request q = transcription(golden_audio(cases().front(), spec()), "", 8);
  q.queue_deadline = Clock::now() + 30ms;
  auto qid = lp->submit(std::move(q), c.sink());
  ASSERT_TRUE(qid.is_ok());
  auto qev = c.wait(*qid, std::chrono::seconds(10));
  ASSERT_EQ(qev.size(), 1u) << "never started";
  EXPECT_EQ(qev.back().cause, ErrorCause::kQueueTimeout);
  lp->resume();
}

TEST_F(EngineLoopTest, PauseHoldsEveryStepUntilResume) {
  EngineLoopOptions opt;
  opt.start_paused = true;
  auto lp = loop(opt);
  Collector c;
  auto id = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_TRUE(id.is_ok());
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(c.snapshot(*id).empty()) << "no event while paused";
  EXPECT_TRUE(lp->stats().paused);
  EXPECT_TRUE(lp->stats().busy);
  lp->resume();
  auto ev = c.wait(*id, std::chrono::seconds(30));
  ASSERT_NE(terminal_of(ev), nullptr);
  EXPECT_EQ(ev.back().type, RequestEvent::Type::kDone);
}

TEST_F(EngineLoopTest, PauseFileHoldsTheLoopWhileItExists) {
  const std::string dir = make_temp_dir("vv_pause");
  const std::string file = dir + "/pause";
  { std::ofstream(file) << "x"; }
  EngineLoopOptions opt;
  opt.pause_file = file;
  auto lp = loop(opt);
  Collector c;
  auto id = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_TRUE(id.is_ok());
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(c.snapshot(*id).empty());
  std::filesystem::remove(file);
  auto ev = c.wait(*id, std::chrono::seconds(30));
  ASSERT_NE(terminal_of(ev), nullptr);
  EXPECT_EQ(ev.back().type, RequestEvent::Type::kDone);
}

TEST_F(EngineLoopTest, InjectedFaultAfterNTokensIsAnEngineError) {
  EngineLoopOptions opt;
  opt.fault_after_tokens = 5;
  auto lp = loop(opt);
  Collector c;
  Request r = transcription(golden_audio(cases().front(), spec()), "", 100);
  r.kind = Request::Kind::kChat;  // chat deltas: one per token here
  r.prompt_ids = golden_ids(cases().front()).prompt;
  r.stream = true;
  auto id = lp->submit(std::move(r), c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  auto ev = c.wait(*id);
  ASSERT_NE(terminal_of(ev), nullptr);
  EXPECT_EQ(ev.back().type, RequestEvent::Type::kError);
  EXPECT_EQ(ev.back().cause, ErrorCause::kEngine);
  EXPECT_EQ(ev.back().error.code(), StatusCode::kInternal);
  EXPECT_EQ(settled(*lp).decode_rows_total, 5);
}

TEST_F(EngineLoopTest, ReadyDelayRefusesUntilReady) {
  EngineLoopOptions opt;
  opt.ready_delay = 200ms;
  auto l = EngineLoop::create(*engine_->runner, *engine_->tokenizer, opt);
  ASSERT_TRUE(l.is_ok());
  auto& lp = *l;
  EXPECT_FALSE(lp->load().ready);
  Collector c;
  auto refused = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  for (int i = 0; i < 1000 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_TRUE(lp->load().ready);
  auto id = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_TRUE(id.is_ok());
  EXPECT_EQ(c.wait(*id).back().type, RequestEvent::Type::kDone);
}

// The scripted decoder: forced ids become the transcript, with the model's logprobs for them.
TEST_F(EngineLoopTest, ForcedIdsAreEmittedAsTheModelOutput) {
  auto lp = loop();
  Collector c;
  const std::string answer = R"([{"Start":0.0,"End":1.5,"Speaker":0,"Content":"Hello there."},)"
                             R"({"Start":1.5,"End":2.0,"Speaker":1,"Content":"你好"}])";
  auto ids = engine_->tokenizer->encode(answer, false);
  ASSERT_TRUE(ids.is_ok());
  Request r = transcription(golden_audio(cases().front(), spec()), "", 1000);
  r.sampling.ignore_eos = false;
  r.sampling.logprobs = true;
  r.forced_ids = *ids;
  r.stream = true;
  auto id = lp->submit(std::move(r), c.sink());
  ASSERT_TRUE(id.is_ok());
  auto ev = c.wait(*id);
  const RequestEvent* done = terminal_of(ev);
  ASSERT_NE(done, nullptr);
  ASSERT_EQ(done->type, RequestEvent::Type::kDone) << done->error.to_string();
  EXPECT_EQ(done->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done->generated_ids, *ids);
  ASSERT_EQ(done->transcript.segments.size(), 2u);
  EXPECT_EQ(done->transcript.segments[0].text, "Hello there.");
  EXPECT_EQ(done->transcript.segments[1].speaker, "B");
  EXPECT_EQ(done->transcript.segments[1].text, "你好");
  ASSERT_FALSE(done->transcript.logprobs.empty());
  for (const auto& lpb : done->transcript.logprobs) {
    EXPECT_LT(lpb.logprob, 0.0) << "a random model is never certain";
  }
  // Stream events: deltas of segment 0, its segment event, then deltas of segment 1.
  std::vector<std::pair<char, std::size_t>> order;
  std::string deltas;
  for (const auto& e : ev) {
    if (e.type == RequestEvent::Type::kTextDelta) {
      order.emplace_back('d', e.segment_index);
      deltas += e.text;
    } else if (e.type == RequestEvent::Type::kSegment) {
      order.emplace_back('s', e.segment_index);
    }
  }
  EXPECT_EQ(deltas, done->transcript.text);
  ASSERT_FALSE(order.empty());
  auto s0 = std::find(order.begin(), order.end(), std::make_pair('s', std::size_t{0}));
  auto d1 = std::find(order.begin(), order.end(), std::make_pair('d', std::size_t{1}));
  ASSERT_NE(s0, order.end());
  ASSERT_NE(d1, order.end());
  EXPECT_LT(s0, d1);
  EXPECT_EQ(order.back(), std::make_pair('s', std::size_t{1}));
}

// Each step's report accounts for the host time between the previous step's execute() and its own:
// none before the loop's first step; after it, the parts (the previous step's outputs and observer,
// this step's scheduling and plan) fit inside the gap, and an observer that takes 3 ms shows there.
TEST_F(EngineLoopTest, StepReportsAccountForTheHostTimeBetweenSteps) {
  std::mutex mu;
  std::vector<StepReport> reports;
  EngineLoopOptions opt;
  opt.on_step = [&](const StepReport& r) {
    {
      std::lock_guard<std::mutex> lk(mu);
      reports.push_back(r);
    }
    std::this_thread::sleep_for(3ms);
  };
  auto lp = loop(std::move(opt));
  Collector c;
  const std::string name = cases().front();
  auto id = lp->submit(transcription(golden_audio(name, spec()), golden_ids(name).context, 6), c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  const auto ev = c.wait(*id);
  const RequestEvent* done = terminal_of(ev);
  ASSERT_NE(done, nullptr);
  ASSERT_EQ(done->type, RequestEvent::Type::kDone) << done->error.to_string();
  settled(*lp);
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_GE(reports.size(), 6u) << "a prefill step and a step a generated token after the first";
  EXPECT_EQ(reports[0].gap_seconds, 0.0) << "no step before the first";
  EXPECT_EQ(reports[0].gap_observer_seconds, 0.0);
  for (std::size_t i = 1; i < reports.size(); ++i) {
    const StepReport& r = reports[i];
    EXPECT_GE(r.gap_observer_seconds, 0.003) << "step " << i << ": the previous step's observer slept 3 ms";
    EXPECT_GE(r.gap_output_seconds, 0.0) << "step " << i;
    EXPECT_GE(r.schedule_seconds, 0.0) << "step " << i;
    EXPECT_GE(r.plan_seconds, 0.0) << "step " << i;
    EXPECT_LE(r.gap_output_seconds + r.gap_observer_seconds + r.schedule_seconds + r.plan_seconds,
              r.gap_seconds + 1e-9)
        << "step " << i << ": the parts fit inside the gap";
    EXPECT_GT(r.seconds, 0.0) << "step " << i;
  }
}

TEST_F(EngineLoopTest, FullQueueAndMalformedRequestsAreRefused) {
  EngineLoopOptions opt;
  opt.max_waiting = 2;
  opt.start_paused = true;
  auto lp = loop(opt);
  Collector c;
  const auto a = golden_audio(cases().front(), spec());
  ASSERT_TRUE(lp->submit(transcription(a, "", 4), c.sink()).is_ok());
  ASSERT_TRUE(lp->submit(transcription(a, "", 4), c.sink()).is_ok());
  auto third = lp->submit(transcription(a, "", 4), c.sink());
  ASSERT_FALSE(third.is_ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);

  Request bad = transcription(a, "", 4);
  bad.kind = Request::Kind::kChat;
  bad.prompt_ids = {1, 2, 3};  // no audio tokens for the clip's frames
  auto r = lp->submit(std::move(bad), c.sink());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("audio tokens"), std::string::npos);

  Request hot = transcription(a, "", 4);
  hot.sampling.top_p = 0;
  EXPECT_FALSE(lp->submit(std::move(hot), c.sink()).is_ok());
  lp->shutdown();
}

TEST_F(EngineLoopTest, ShutdownEndsUnfinishedRequestsWithTheirCause) {
  EngineLoopOptions opt;
  opt.start_paused = true;
  auto lp = loop(opt);
  Collector c;
  auto id = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_TRUE(id.is_ok());
  lp->shutdown();
  auto ev = c.wait(*id, std::chrono::seconds(5));
  ASSERT_NE(terminal_of(ev), nullptr);
  EXPECT_EQ(ev.back().cause, ErrorCause::kShutdown);
  auto after = lp->submit(transcription(golden_audio(cases().front(), spec()), "", 4), c.sink());
  ASSERT_FALSE(after.is_ok());
  EXPECT_EQ(after.status().code(), StatusCode::kCancelled);
}

// The teacher-forcing logits hook (engine_loop_bench --invariance): a request with forced ids gets
// every generated position's logits (vocabulary-wide, the forced id's logprob among them), the same
// bits alone and beside other requests on the CPU; a request without forced ids gets none.
TEST_F(EngineLoopTest, LogitsHookGivesForcedPositionsTheSameBitsAloneAndBatched) {
  std::mutex mu;
  std::map<RequestId, std::map<std::size_t, std::vector<float>>> got;
  EngineLoopOptions opt;
  opt.on_logits = [&](RequestId id, std::size_t pos, std::span<const float> row) {
    std::lock_guard<std::mutex> lk(mu);
    got[id][pos].assign(row.begin(), row.end());
  };
  auto lp = loop(opt);
  const std::vector<std::string> names = cases();
  ASSERT_GE(names.size(), 2u);
  const GoldenIds g = golden_ids(names[0]);
  auto forced = [&] {
    Request r =
        transcription(golden_audio(names[0], spec()), g.context, static_cast<int>(g.generated.size()));
    r.forced_ids = g.generated;
    return r;
  };
  Collector c;
  auto alone = lp->submit(forced(), c.sink());
  ASSERT_TRUE(alone.is_ok());
  ASSERT_NE(terminal_of(c.wait(*alone)), nullptr);
  auto batched = lp->submit(forced(), c.sink());
  auto other = lp->submit(transcription(golden_audio(names[1], spec()), "", 6), c.sink());
  ASSERT_TRUE(batched.is_ok() && other.is_ok());
  ASSERT_NE(terminal_of(c.wait(*batched)), nullptr);
  ASSERT_NE(terminal_of(c.wait(*other)), nullptr);
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(got.count(*other), 0u) << "no forced ids, no logits";
  const auto& a = got[*alone];
  const auto& b = got[*batched];
  ASSERT_EQ(a.size(), g.generated.size());
  ASSERT_EQ(b.size(), g.generated.size());
  for (const auto& [pos, row] : a) {
    ASSERT_EQ(row.size(), static_cast<std::size_t>(spec().decoder.vocab_size)) << pos;
    EXPECT_EQ(row, b.at(pos)) << "position " << pos;
    // Greedy on the golden logits: the forced (golden) id is this row's argmax.
    EXPECT_EQ(static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin()), g.generated[pos])
        << "position " << pos;
  }
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

// A KV pool too small for every request at once: decode rows run it dry, the newest request is
// preempted and recomputed later, and every output still equals the request's solo output.
// RunnerOptions::decode_pad (the CUDA default, forced here on the CPU): the loop's decode steps run
// padded to 1, 2, 4, 8, ... sequences; every request gives the ids and text of the unpadded engine,
// every block comes back, and the pool the scheduler sees has the same size.
TEST(EngineLoopPadding, PaddedDecodeStepsGiveTheUnpaddedIdsAndText) {
  std::vector<std::vector<RequestEvent>> out[2];
  std::int64_t blocks[2] = {0, 0};
  for (int pad : {8, 0}) {
    RunnerOptions ro = tiny_runner_options();
    ro.decode_pad = pad;
    auto engine = TinyEngine::make(ro);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->runner->decode_pad(), pad);
    auto l = EngineLoop::create(*engine->runner, *engine->tokenizer);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    auto lp = std::move(l).value();
    for (int i = 0; i < 500 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
    std::vector<Request> reqs;
    for (int rep = 0; rep < 2; ++rep) {  // 5 or more requests: steps of 5..3 rows run as 8, 4
      for (const std::string& name : cases()) {
        GoldenIds g = golden_ids(name);
        reqs.push_back(transcription(golden_audio(name, engine->runner->spec()), g.context,
                                     20 + 6 * static_cast<int>(reqs.size())));
      }
    }
    ASSERT_GE(reqs.size(), 5u);
    Collector c;
    std::vector<RequestId> ids;
    for (const Request& r : reqs) {
      auto id = lp->submit(r, c.sink());
      ASSERT_TRUE(id.is_ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    const int k = pad > 0 ? 0 : 1;
    for (RequestId id : ids) out[k].push_back(c.wait(id));
    const EngineStats st = settled(*lp);
    EXPECT_EQ(st.load.kv_blocks_used, 0) << "every block is returned";
    blocks[k] = st.load.kv_blocks_total;
  }
  EXPECT_EQ(blocks[0], blocks[1]) << "the padding rows' block is not the scheduler's";
  ASSERT_EQ(out[0].size(), out[1].size());
  for (std::size_t i = 0; i < out[0].size(); ++i) {
    const RequestEvent* a = terminal_of(out[0][i]);
    const RequestEvent* b = terminal_of(out[1][i]);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->type, RequestEvent::Type::kDone) << a->error.to_string();
    ASSERT_EQ(b->type, RequestEvent::Type::kDone) << b->error.to_string();
    EXPECT_EQ(a->generated_ids, b->generated_ids) << "request " << i;
    EXPECT_EQ(a->transcript.text, b->transcript.text) << "request " << i;
  }
}

TEST(EngineLoopPreemption, PreemptedRequestsResumeWithIdenticalOutput) {
  RunnerOptions ro = tiny_runner_options();
  ro.kv_positions = 16 * 30;
  auto engine = TinyEngine::make(ro);
  ASSERT_NE(engine, nullptr);
  std::vector<Request> reqs;
  for (const std::string& name : cases()) {
    GoldenIds g = golden_ids(name);
    reqs.push_back(transcription(golden_audio(name, engine->runner->spec()), g.context, 60));
  }
  auto make_loop = [&] {
    auto l = EngineLoop::create(*engine->runner, *engine->tokenizer);
    EXPECT_TRUE(l.is_ok());
    auto loop = std::move(l).value();
    for (int i = 0; i < 500 && !loop->load().ready; ++i) std::this_thread::sleep_for(2ms);
    return loop;
  };
  std::vector<std::vector<TokenId>> alone;
  {
    auto lp = make_loop();
    Collector c;
    for (const Request& r : reqs) {
      auto id = lp->submit(r, c.sink());
      ASSERT_TRUE(id.is_ok());
      auto ev = c.wait(*id);
      ASSERT_FALSE(ev.empty());
      ASSERT_EQ(ev.back().type, RequestEvent::Type::kDone) << ev.back().error.to_string();
      alone.push_back(ev.back().generated_ids);
    }
    EXPECT_EQ(settled(*lp).preemptions, 0);
  }
  auto lp = make_loop();
  Collector c;
  std::vector<RequestId> ids;
  for (const Request& r : reqs) {
    auto id = lp->submit(r, c.sink());
    ASSERT_TRUE(id.is_ok());
    ids.push_back(*id);
  }
  int preempted = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto ev = c.wait(ids[i]);
    ASSERT_FALSE(ev.empty());
    ASSERT_EQ(ev.back().type, RequestEvent::Type::kDone) << ev.back().error.to_string();
    EXPECT_EQ(ev.back().generated_ids, alone[i]) << "request " << i;
    preempted += ev.back().timings.preemptions;
  }
  const EngineStats st = settled(*lp);
  EXPECT_GT(st.preemptions, 0) << "the pool is meant to run dry";
  EXPECT_EQ(preempted, st.preemptions);
  EXPECT_EQ(st.load.kv_blocks_used, 0);
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

// Chat logprobs: one entry per generated non-stop token, with top_logprobs alternatives (most
// likely first); greedy picks the most likely one; stop strings cut the text.
TEST(EngineLoopChat, LogprobsTopAlternativesAndStopStrings) {
  auto engine = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(engine, nullptr);
  auto l = EngineLoop::create(*engine->runner, *engine->tokenizer);
  ASSERT_TRUE(l.is_ok());
  auto& lp = *l;
  for (int i = 0; i < 500 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
  auto prompt = engine->tokenizer->encode("<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_TRUE(prompt.is_ok());
  Request r;
  r.kind = Request::Kind::kChat;
  r.prompt_ids = *prompt;
  r.sampling.max_new_tokens = 12;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  r.stream = true;
  Collector c;
  auto id = lp->submit(r, c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  auto ev = c.wait(*id);
  ASSERT_FALSE(ev.empty());
  const RequestEvent& done = ev.back();
  ASSERT_EQ(done.type, RequestEvent::Type::kDone) << done.error.to_string();
  ASSERT_EQ(done.top_logprobs.size(), done.logprobs.size());
  ASSERT_FALSE(done.logprobs.empty());
  for (std::size_t i = 0; i < done.logprobs.size(); ++i) {
    ASSERT_EQ(done.top_logprobs[i].size(), 3u);
    EXPECT_GE(done.top_logprobs[i][0].logprob, done.top_logprobs[i][1].logprob);
    EXPECT_EQ(done.top_logprobs[i][0].bytes, done.logprobs[i].bytes) << "greedy takes the most likely token";
    EXPECT_DOUBLE_EQ(done.top_logprobs[i][0].logprob, done.logprobs[i].logprob);
  }
  std::size_t streamed = 0;
  for (const auto& e : ev) streamed += e.type == RequestEvent::Type::kTextDelta ? e.logprobs.size() : 0;
  EXPECT_EQ(streamed, done.logprobs.size()) << "every entry is streamed once";

  // A stop string taken from the middle of that completion cuts it there.
  ASSERT_GE(done.text.size(), 4u);
  const std::string stop = done.text.substr(done.text.size() / 2, 2);
  Request s = r;
  s.stop_strings = {stop};
  auto sid = lp->submit(std::move(s), c.sink());
  ASSERT_TRUE(sid.is_ok());
  auto sev = c.wait(*sid);
  ASSERT_FALSE(sev.empty());
  ASSERT_EQ(sev.back().type, RequestEvent::Type::kDone);
  EXPECT_EQ(sev.back().finish_reason, FinishReason::kStop);
  EXPECT_EQ(sev.back().text, done.text.substr(0, done.text.find(stop)));
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

std::string identical_segments(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    s += i ? "," : "";
    s += R"({"Start":)" + std::to_string(i) + R"(.0,"End":)" + std::to_string(i + 1) +
         R"(.0,"Speaker":0,"Content":"Twenty characters ok"})";
  }
  return s + "]";
}

// API.md §3.7 rule (a) on a scripted output (C51's unit test): 5 identical 20-character segments
// are cut to one and finish `repetition` with no retries; with one retry the loop is cut back,
// decoding resumes (the script repeats itself, so the loop comes back) and then gives up.
TEST(EngineLoopRepetition, IdenticalSegmentsAreCutToOneAndFinishRepetition) {
  auto engine = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(engine, nullptr);
  auto l = EngineLoop::create(*engine->runner, *engine->tokenizer);
  ASSERT_TRUE(l.is_ok());
  auto& lp = *l;
  for (int i = 0; i < 500 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
  auto ids = engine->tokenizer->encode(identical_segments(5), false);
  ASSERT_TRUE(ids.is_ok());
  const auto audio = golden_audio(cases().front(), engine->runner->spec());
  for (int retries : {0, 1}) {
    Request r = transcription(audio, "", 2000);
    r.sampling.ignore_eos = false;
    r.forced_ids = *ids;
    r.repetition_retries = retries;
    r.stream = true;
    Collector c;
    auto id = lp->submit(std::move(r), c.sink());
    ASSERT_TRUE(id.is_ok());
    auto ev = c.wait(*id);
    ASSERT_FALSE(ev.empty());
    const RequestEvent& done = ev.back();
    ASSERT_EQ(done.type, RequestEvent::Type::kDone) << done.error.to_string();
    EXPECT_EQ(done.finish_reason, FinishReason::kRepetition) << "retries " << retries;
    ASSERT_EQ(done.transcript.segments.size(), 1u) << "retries " << retries;
    EXPECT_EQ(done.transcript.segments[0].text, "Twenty characters ok");
    EXPECT_EQ(done.transcript.text, "Twenty characters ok");
    EXPECT_GT(done.usage.output_tokens, static_cast<int64_t>(done.generated_ids.size()))
        << "the cut tokens still count as generated";
  }
  const EngineStats st = settled(*lp);
  EXPECT_EQ(st.repetition_recovered, 1);
  EXPECT_EQ(st.repetition_gave_up, 2);
}

// Rule (b): a periodic token stream (256 tokens of one id) with no complete segment is cut back to
// nothing; with repetition detection off the same request runs to its length limit.
TEST(EngineLoopRepetition, PeriodicTokensWithoutSegmentsAreCutAndDetectionCanBeOff) {
  auto engine = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(engine, nullptr);
  auto l = EngineLoop::create(*engine->runner, *engine->tokenizer);
  ASSERT_TRUE(l.is_ok());
  auto& lp = *l;
  for (int i = 0; i < 500 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
  const auto audio = golden_audio(cases().front(), engine->runner->spec());
  for (bool detect : {true, false}) {
    Request r = transcription(audio, "", 300);
    r.sampling.ignore_eos = false;
    r.forced_ids.assign(300, 1000);
    r.repetition_retries = 0;
    r.repetition_detection = detect;
    Collector c;
    auto id = lp->submit(std::move(r), c.sink());
    ASSERT_TRUE(id.is_ok());
    auto ev = c.wait(*id);
    ASSERT_FALSE(ev.empty());
    const RequestEvent& done = ev.back();
    ASSERT_EQ(done.type, RequestEvent::Type::kDone) << done.error.to_string();
    if (detect) {
      EXPECT_EQ(done.finish_reason, FinishReason::kRepetition);
      EXPECT_TRUE(done.generated_ids.empty()) << "no complete segment before the window";
      EXPECT_EQ(done.usage.output_tokens, 256) << "detected at the first check with a full window";
    } else {
      EXPECT_EQ(done.finish_reason, FinishReason::kLength);
      EXPECT_EQ(done.generated_ids.size(), 300u);
    }
  }
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

// max_model_len: a request whose prompt and output reach it ends with `length` (the pool may be just
// that large); a longer prompt is refused at submit.
TEST(EngineLoopContext, MaxModelLenEndsWithLengthAndRefusesLongerPrompts) {
  auto engine = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(engine, nullptr);
  const std::string name = cases().front();
  GoldenIds g = golden_ids(name);
  EngineLoopOptions opt;
  opt.max_model_len = static_cast<std::int64_t>(g.prompt.size()) + 10;
  auto l = EngineLoop::create(*engine->runner, *engine->tokenizer, opt);
  ASSERT_TRUE(l.is_ok());
  auto& lp = *l;
  for (int i = 0; i < 500 && !lp->load().ready; ++i) std::this_thread::sleep_for(2ms);
  const auto audio = golden_audio(name, engine->runner->spec());
  Collector c;
  auto id = lp->submit(transcription(audio, g.context, 1000), c.sink());
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  auto ev = c.wait(*id);
  ASSERT_FALSE(ev.empty());
  ASSERT_EQ(ev.back().type, RequestEvent::Type::kDone) << ev.back().error.to_string();
  EXPECT_EQ(ev.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(ev.back().generated_ids.size(), 10u);
  EXPECT_EQ(ev.back().generated_ids, std::vector<TokenId>(g.generated.begin(), g.generated.begin() + 10));

  lp->shutdown();  // one loop at a time drives a Runner
  EngineLoopOptions tight;
  tight.max_model_len = static_cast<std::int64_t>(g.prompt.size());
  auto t = EngineLoop::create(*engine->runner, *engine->tokenizer, tight);
  ASSERT_TRUE(t.is_ok());
  for (int i = 0; i < 500 && !(*t)->load().ready; ++i) std::this_thread::sleep_for(2ms);
  auto refused = (*t)->submit(transcription(audio, g.context, 10), c.sink());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace vv::test
