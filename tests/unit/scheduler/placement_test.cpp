// ReplicatedEngine with two CPU "devices" (two Runners of the tiny model, each with its own loop
// and KV pool): requests spread over both, each gives the ids it gives alone on one engine, and
// cancel reaches the replica that holds the request.
#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/unit/scheduler/engine_loop_fixture.h"

namespace vv::test {
namespace {

using namespace std::chrono_literals;

Request short_request(const audio::PreparedAudio& a, int tokens) {
  Request r;
  r.audio.push_back(a);
  r.sampling.max_new_tokens = tokens;
  r.sampling.ignore_eos = true;
  return r;
}

TEST(ReplicatedEngine, TwoCpuReplicasShareTheLoadAndMatchOneEngine) {
  auto a = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(a, nullptr);
  auto second = make_cpu_runner(*a->ckpt, tiny_runner_options(), 1);
  ASSERT_TRUE(second.is_ok()) << second.status().to_string();
  std::vector<std::unique_ptr<EngineLoop>> loops;
  for (Runner* r : {a->runner.get(), second->get()}) {
    auto l = EngineLoop::create(*r, *a->tokenizer);
    ASSERT_TRUE(l.is_ok());
    loops.push_back(std::move(l).value());
  }
  auto rep = ReplicatedEngine::create(std::move(loops));
  ASSERT_TRUE(rep.is_ok());
  ReplicatedEngine& engine = **rep;
  for (int i = 0; i < 1000 && !engine.load().ready; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_TRUE(engine.load().ready);

  std::vector<audio::PreparedAudio> audio;
  for (const auto& name : golden_cases()) {
    if (name != "long") audio.push_back(golden_audio(name, a->runner->spec()));
  }
  Collector c;
  std::vector<RequestId> ids;
  std::vector<int> placed;
  for (std::size_t i = 0; i < audio.size() * 2; ++i) {
    auto id = engine.submit(short_request(audio[i % audio.size()], 20 + static_cast<int>(i)), c.sink());
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    ids.push_back(*id);
    placed.push_back(engine.placed_on(*id));
  }
  EXPECT_NE(std::count(placed.begin(), placed.end(), 0), 0);
  EXPECT_NE(std::count(placed.begin(), placed.end(), 1), 0);
  std::vector<std::vector<TokenId>> together;
  for (RequestId id : ids) {
    auto ev = c.wait(id);
    ASSERT_FALSE(ev.empty());
    ASSERT_EQ(ev.back().type, RequestEvent::Type::kDone) << ev.back().error.to_string();
    EXPECT_EQ(ev.back().id, id) << "events carry the placement's id";
    together.push_back(ev.back().generated_ids);
  }
  // The same requests one at a time on the first replica alone (its own ids: another collector).
  Collector solo;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto id = engine.replica(0).submit(short_request(audio[i % audio.size()], 20 + static_cast<int>(i)),
                                       solo.sink());
    ASSERT_TRUE(id.is_ok());
    auto ev = solo.wait(*id);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().generated_ids, together[i]) << "request " << i;
  }

  // Cancel reaches the replica holding the request.
  auto id = engine.submit(short_request(audio[0], 5000), c.sink());
  ASSERT_TRUE(id.is_ok());
  std::this_thread::sleep_for(50ms);
  engine.cancel(*id);
  auto ev = c.wait(*id, std::chrono::seconds(10));
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().cause, ErrorCause::kCancelled);
  EXPECT_EQ(engine.placed_on(*id), -1);

  // The service's counters: the replicas' stats summed, once both are idle (their snapshots settle).
  for (int i = 0; i < 1000 && (engine.load().running + engine.load().waiting) > 0; ++i)
    std::this_thread::sleep_for(2ms);
  std::this_thread::sleep_for(20ms);
  const EngineStats s0 = engine.replica(0).stats(), s1 = engine.replica(1).stats(), sum = engine.stats();
  EXPECT_EQ(sum.steps, s0.steps + s1.steps);
  EXPECT_EQ(sum.requests_done, s0.requests_done + s1.requests_done);
  EXPECT_EQ(sum.requests_done, static_cast<std::int64_t>(ids.size() * 2));  // together and solo
  EXPECT_EQ(sum.requests_cancelled, s0.requests_cancelled + s1.requests_cancelled);
  EXPECT_EQ(sum.requests_cancelled, 1);
  EXPECT_EQ(sum.decode_rows_total, s0.decode_rows_total + s1.decode_rows_total);
  EXPECT_EQ(sum.prefix_query_blocks, s0.prefix_query_blocks + s1.prefix_query_blocks);
  EXPECT_EQ(sum.prefix_hit_blocks, s0.prefix_hit_blocks + s1.prefix_hit_blocks);
  EXPECT_GT(sum.prefix_hit_blocks, 0) << "the same prompt prefix was shared";
  EXPECT_LE(sum.prefix_hit_blocks, sum.prefix_query_blocks);
  EXPECT_EQ(sum.load.kv_blocks_total, s0.load.kv_blocks_total + s1.load.kv_blocks_total);
}

}  // namespace
}  // namespace vv::test
