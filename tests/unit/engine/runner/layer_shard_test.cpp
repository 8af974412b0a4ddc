// Layer shards on the CPU: two CPU backends act as two devices, the first holding the encoders,
// the embedding and the first layers, the second the rest with the final norm and LM head. For
// every golden case and every split, the greedy ids equal one device's (and the golden ids), and
// each shard holds the KV memory of its own layers only.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/runner.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/runner/golden_input.h"

namespace vv::test {
namespace {

RunnerOptions shard_options() {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 512;
  o.max_seqs = 8;
  o.prefill_chunk = 100;  // several prefill steps: the cache of both shards is read across steps
  return o;
}

std::vector<std::unique_ptr<Backend>> two_cpus() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(cpu_backend(1));
  v.push_back(cpu_backend(1));
  return v;
}

// Greedy ids of every golden case on `r`, in golden_cases() order.
std::vector<std::vector<TokenId>> ids_of_every_case(Runner& r) {
  std::vector<std::vector<TokenId>> all;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    EXPECT_TRUE(gc.ok()) << gc.error();
    if (!gc.ok()) continue;
    std::vector<TokenId> ids = golden_greedy_ids(r, gc);
    EXPECT_EQ(ids, gc.generated_ids()) << name;
    all.push_back(std::move(ids));
  }
  return all;
}

TEST(LayerShards, TwoCpuDevicesGiveIdsIdenticalToOneForEveryCaseAndSplit) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int L = (*ckpt)->spec().decoder.num_layers;
  ASSERT_GE(L, 2) << "a split needs two layers";
  auto one = Runner::create(cpu_backend(1), **ckpt, shard_options());
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  const auto want = ids_of_every_case(**one);
  ASSERT_FALSE(want.empty());
  for (int k = 1; k < L; ++k) {
    auto sharded = Runner::create_sharded(two_cpus(), **ckpt, shard_options(), {k, L - k});
    ASSERT_TRUE(sharded.is_ok()) << sharded.status().to_string();
    Runner& r = **sharded;
    ASSERT_EQ(r.shard_count(), 2u);
    EXPECT_EQ(r.shard_decoder(0).layer_begin(), 0);
    EXPECT_EQ(r.shard_decoder(0).layer_end(), k);
    EXPECT_EQ(r.shard_decoder(1).layer_begin(), k);
    EXPECT_FALSE(r.shard_decoder(0).ends_model());
    EXPECT_TRUE(r.shard_decoder(1).ends_model());
    EXPECT_EQ(ids_of_every_case(r), want) << "split " << k << "+" << L - k;
    EXPECT_EQ(r.kv().free_blocks(), r.kv().num_blocks()) << "every block is given back";
  }
}

TEST(LayerShards, EachShardHoldsTheKvMemoryAndWeightsOfItsOwnLayers) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const DecoderSpec& ds = (*ckpt)->spec().decoder;
  const int L = ds.num_layers;
  auto r = Runner::create_sharded(two_cpus(), **ckpt, shard_options(), {1, L - 1});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Runner& s = **r;
  const size_t per_layer = KvCache::bytes_per_position(ds, DType::kF32, 1);
  const size_t positions = static_cast<size_t>(s.kv().num_blocks() * s.kv().block_size());
  // The first shard's pool: one layer; the second's: the rest (the view lists all, the others empty).
  EXPECT_EQ(s.kv().bytes(), per_layer * positions);
  EXPECT_EQ(s.kv().view().layers.size(), static_cast<size_t>(L));
  EXPECT_EQ(s.kv().view().layers[1].k.data, nullptr);
  // Shard 1 holds no embedding or encoders: it allocated less than shard 0 with its one layer.
  EXPECT_GT(s.shard_backend(0).allocated_bytes(), 0u);
  EXPECT_GT(s.shard_backend(1).allocated_bytes(), 0u);
  const DecoderBytes b0 = decoder_bytes(ds, (*ckpt)->weights().decoder, 512, 8, 256, 0, 1);
  const DecoderBytes b1 = decoder_bytes(ds, (*ckpt)->weights().decoder, 512, 8, 256, 1, L);
  EXPECT_GT(b0.embed, 0u);
  EXPECT_EQ(b0.head, 0u);
  EXPECT_EQ(b1.embed, 0u);
  EXPECT_GT(b1.head, 0u);
  EXPECT_EQ(b1.layers.size(), static_cast<size_t>(L - 1));
}

TEST(LayerShards, WithCapsTheLayersFollowEachDevicesBudget) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const DecoderSpec& ds = (*ckpt)->spec().decoder;
  const int L = ds.num_layers;
  ASSERT_EQ(L, 3) << "the caps below are worked out for the tiny model's three layers";
  RunnerOptions o = shard_options();
  // The last device: room for its head, workspace, the smallest pool and one layer and a half.
  const DecoderBytes last =
      decoder_bytes(ds, (*ckpt)->weights().decoder, o.max_rows, o.max_seqs, 256, L - 1, L);
  const size_t small = last.head + last.workspace + static_cast<size_t>(o.max_rows) * ds.hidden_size * 4 +
                       2048 * KvCache::bytes_per_position(ds, DType::kF32, 1) + last.layers[0] * 3 / 2;
  o.shard_memory_caps = {size_t{1} << 30, small};
  auto r = Runner::create_sharded(two_cpus(), **ckpt, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->shard_decoder(0).layer_end(), L - 1)
      << "the device with the larger budget takes more layers";
  EXPECT_LE((*r)->shard_backend(1).peak_allocated_bytes(), small);
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  const std::vector<float> x = golden_input_values(gc);
  auto speech = (*r)->encode(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
  GreedyRequest req;
  req.prompt = gc.prompt_ids();
  req.speech = &speech->rows.t;
  req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
  auto ids = (*r)->generate_greedy(req);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, gc.generated_ids());
}

TEST(LayerShards, RefusesSplitsThatDoNotCoverTheModel) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int L = (*ckpt)->spec().decoder.num_layers;
  auto short_split = Runner::create_sharded(two_cpus(), **ckpt, shard_options(), {1, L - 2});
  ASSERT_FALSE(short_split.is_ok());
  EXPECT_NE(short_split.status().message().find("the model has " + std::to_string(L)), std::string::npos)
      << short_split.status().message();
  auto empty_shard = Runner::create_sharded(two_cpus(), **ckpt, shard_options(), {0, L});
  EXPECT_FALSE(empty_shard.is_ok());
  auto wrong_count = Runner::create_sharded(two_cpus(), **ckpt, shard_options(), {L});
  EXPECT_FALSE(wrong_count.is_ok());
}

}  // namespace
}  // namespace vv::test
