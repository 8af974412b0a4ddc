// Layer placement under the engine loop: one Runner spanning two CPU "devices" (layer shards) and
// one streaming its layers from host memory each run every golden clip together through the
// continuous-batching loop and give the ids that one device with every layer resident gives.
// make_runners builds replicas or shards from a device list ("cpu,cpu").
#include <gtest/gtest.h>

#include <thread>

#include "engine/runner/device_runner.h"
#include "scheduler/placement.h"
#include "tests/unit/scheduler/engine_loop_fixture.h"

namespace vv::test {
namespace {

using namespace std::chrono_literals;

// Every golden clip (long included) as one request each, all submitted at once; ids in order.
std::vector<std::vector<TokenId>> run_all(Runner& runner, const Tokenizer& tok) {
  auto loop = EngineLoop::create(runner, tok);
  EXPECT_TRUE(loop.is_ok()) << loop.status().to_string();
  if (!loop.is_ok()) return {};
  EngineLoop& l = **loop;
  for (int i = 0; i < 1000 && !l.load().ready; ++i) std::this_thread::sleep_for(2ms);
  Collector c;
  std::vector<RequestId> ids;
  int n = 0;
  for (const auto& name : golden_cases()) {
    Request r;
    r.audio.push_back(golden_audio(name, runner.spec()));
    r.sampling.max_new_tokens = 24 + n++;
    r.sampling.ignore_eos = true;
    auto id = l.submit(std::move(r), c.sink());
    EXPECT_TRUE(id.is_ok()) << id.status().to_string();
    if (id.is_ok()) ids.push_back(*id);
  }
  std::vector<std::vector<TokenId>> out;
  for (RequestId id : ids) {
    auto ev = c.wait(id);
    EXPECT_FALSE(ev.empty());
    if (ev.empty()) continue;
    EXPECT_EQ(ev.back().type, RequestEvent::Type::kDone) << ev.back().error.to_string();
    out.push_back(ev.back().generated_ids);
  }
  l.shutdown();
  return out;
}

// RunnerOptions::kv_dtype_follows_compute changes nothing on CPU devices (BackendOptions::gpu_bf16_gemm
// is a GPU setting): replicas and layer shards keep f32 k/v.
TEST(LayerPlacement, KvCacheStaysF32OnTheCpuWhenFollowingTheCompute) {
  auto base = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(base, nullptr);
  RunnerOptions o = tiny_runner_options();
  o.kv_dtype_follows_compute = true;
  BackendOptions bf16;
  bf16.gpu_bf16_gemm = true;
  auto one = make_runner(*base->ckpt, o, "cpu", bf16);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  EXPECT_EQ((*one)->options().kv_dtype, DType::kF32);
  for (SplitMode mode : {SplitMode::kReplica, SplitMode::kLayer}) {
    PlacementOptions place;
    place.split = mode;
    auto rs = make_runners(*base->ckpt, o, "cpu,cpu", bf16, place);
    ASSERT_TRUE(rs.is_ok()) << rs.status().to_string();
    for (const auto& r : *rs) EXPECT_EQ(r->options().kv_dtype, DType::kF32);
  }
}

TEST(LayerPlacement, ShardedAndStreamingRunnersUnderTheLoopMatchOneDevice) {
  auto base = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(base, nullptr);
  const auto want = run_all(*base->runner, *base->tokenizer);
  ASSERT_EQ(want.size(), golden_cases().size());

  PlacementOptions layer;
  layer.split = SplitMode::kLayer;
  auto sharded = make_runners(*base->ckpt, tiny_runner_options(), "cpu,cpu", {}, layer);
  ASSERT_TRUE(sharded.is_ok()) << sharded.status().to_string();
  ASSERT_EQ(sharded->size(), 1u) << "layer shards are one runner";
  ASSERT_EQ((*sharded)[0]->shard_count(), 2u);
  EXPECT_EQ(run_all(*(*sharded)[0], *base->tokenizer), want);

  PlacementOptions stream;
  stream.gpu_layers = 1;
  auto streaming = make_runners(*base->ckpt, tiny_runner_options(), "cpu", {}, stream);
  ASSERT_TRUE(streaming.is_ok()) << streaming.status().to_string();
  ASSERT_NE((*streaming)[0]->layer_stream(), nullptr);
  EXPECT_EQ(run_all(*(*streaming)[0], *base->tokenizer), want);
}

TEST(LayerPlacement, DeviceListsBuildReplicasOrShardsAndCheckTheirCaps) {
  auto base = TinyEngine::make(tiny_runner_options());
  ASSERT_NE(base, nullptr);
  PlacementOptions auto_mode;  // no cap: each device holds the model, so replicas
  auto rep = make_runners(*base->ckpt, tiny_runner_options(), "cpu,cpu", {}, auto_mode);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->size(), 2u);
  EXPECT_EQ((*rep)[0]->shard_count(), 1u);

  PlacementOptions three_caps;
  three_caps.memory = "1G,1G,1G";
  auto bad = make_runners(*base->ckpt, tiny_runner_options(), "cpu,cpu", {}, three_caps);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("3 sizes for 2 devices"), std::string::npos)
      << bad.status().message();

  // auto with caps too small for every layer and the smallest KV pool (2048 positions) on one
  // device, large enough for each shard: layer shards.
  const DecoderSpec& ds = base->runner->spec().decoder;
  const int L = ds.num_layers;
  const size_t full = base->runner->backend().peak_allocated_bytes();  // every layer, 8192 positions
  size_t layer_bytes = 0;
  for (size_t b : decoder_bytes(ds, base->ckpt->weights().decoder, 192, 16, 512, 0, L).layers)
    layer_bytes += b;
  const size_t cap = full - (8192 - 2048) * KvCache::bytes_per_position(ds, DType::kF32, L) - layer_bytes / 2;
  PlacementOptions capped;
  capped.memory = std::to_string(static_cast<double>(cap) / (1 << 20)) + "MiB";
  auto shards = make_runners(*base->ckpt, tiny_runner_options(), "cpu,cpu", {}, capped);
  ASSERT_TRUE(shards.is_ok()) << shards.status().to_string();
  ASSERT_EQ(shards->size(), 1u);
  EXPECT_EQ((*shards)[0]->shard_count(), 2u);

  EXPECT_FALSE(make_runners(*base->ckpt, tiny_runner_options(), "cpu,,cpu", {}, auto_mode).is_ok());
  EXPECT_FALSE(parse_split_mode("tensor").is_ok());
}

}  // namespace
}  // namespace vv::test
