// The KV block pool: tables grow to cover positions, blocks come back on release, exhaustion
// fails without changing the table.
#include "engine/runner/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/runner/cpu_runner.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {
namespace {

DecoderSpec small_decoder() {
  DecoderSpec d;
  d.num_layers = 2;
  d.num_kv_heads = 2;
  d.head_dim = 8;
  return d;
}

TEST(KvCache, ReserveCoversPositionsWithDistinctBlocks) {
  auto be = cpu_backend(1);
  auto kv = KvCache::create(*be, small_decoder(), 10, 16);
  ASSERT_TRUE(kv.is_ok()) << kv.status().to_string();
  std::vector<BlockId> a, b;
  ASSERT_TRUE((*kv)->reserve(a, 17).is_ok());
  EXPECT_EQ(a.size(), 2u);
  ASSERT_TRUE((*kv)->reserve(a, 32).is_ok());
  EXPECT_EQ(a.size(), 2u) << "32 positions still fit two blocks";
  ASSERT_TRUE((*kv)->reserve(b, 48).is_ok());
  EXPECT_EQ(b.size(), 3u);
  std::set<BlockId> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 5u);
  for (BlockId id : all) EXPECT_TRUE(id >= 0 && id < 10);
  EXPECT_EQ((*kv)->free_blocks(), 5);
  (*kv)->release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ((*kv)->free_blocks(), 7);
  EXPECT_EQ((*kv)->view().layers.size(), 2u);
  EXPECT_EQ((*kv)->view().layers[0].k.rows(), 160);
  EXPECT_EQ((*kv)->view().layers[0].k.cols(), 16);
}

TEST(KvCache, ExhaustionFailsAndLeavesTheTableUnchanged) {
  auto be = cpu_backend(1);
  auto kv = KvCache::create(*be, small_decoder(), 4, 16);
  ASSERT_TRUE(kv.is_ok());
  std::vector<BlockId> a;
  ASSERT_TRUE((*kv)->reserve(a, 48).is_ok());
  std::vector<BlockId> b;
  const Status s = (*kv)->reserve(b, 33);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ((*kv)->free_blocks(), 1);
}

TEST(KvCache, TheSetAsideBlockIsTheHighestIdAndNeverHandedOut) {
  auto be = cpu_backend(1);
  auto kv = KvCache::create(*be, small_decoder(), 5, 16);
  ASSERT_TRUE(kv.is_ok()) << kv.status().to_string();
  EXPECT_EQ((*kv)->set_aside(), -1);
  EXPECT_EQ((*kv)->set_aside_last_block(), 4);
  EXPECT_EQ((*kv)->set_aside_last_block(), 4) << "asking again changes nothing";
  EXPECT_EQ((*kv)->num_blocks(), 4);
  EXPECT_EQ((*kv)->free_blocks(), 4);
  EXPECT_EQ((*kv)->view().num_blocks, 5) << "a step may still name it";
  std::vector<BlockId> all;
  ASSERT_TRUE((*kv)->reserve(all, 64).is_ok());
  EXPECT_EQ(all, (std::vector<BlockId>{0, 1, 2, 3}));
  std::vector<BlockId> more;
  EXPECT_EQ((*kv)->reserve(more, 1).code(), StatusCode::kResourceExhausted);
  (*kv)->release(all);
  EXPECT_EQ((*kv)->free_blocks(), 4);

  auto used = KvCache::create(*be, small_decoder(), 5, 16);
  ASSERT_TRUE(used.is_ok());
  std::vector<BlockId> t;
  ASSERT_TRUE((*used)->reserve(t, 1).is_ok());
  EXPECT_EQ((*used)->set_aside_last_block(), -1) << "a block is out: too late";
  EXPECT_EQ((*used)->num_blocks(), 5);
  auto one = KvCache::create(*be, small_decoder(), 1, 16);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ((*one)->set_aside_last_block(), -1) << "a pool of one block keeps it";
}

TEST(KvCache, EmptyPoolIsRefused) {
  auto be = cpu_backend(1);
  EXPECT_FALSE(KvCache::create(*be, small_decoder(), 0, 16).is_ok());
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

TEST(KvCache, Bf16PoolIsHalfTheBytesAndStaysCloseToGoldenLogits) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions f32;
  f32.kv_positions = 1024;
  RunnerOptions bf16 = f32;
  bf16.kv_dtype = DType::kBF16;
  auto a = make_cpu_runner(**ckpt, f32, 1);
  auto b = make_cpu_runner(**ckpt, bf16, 1);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ((*b)->kv().bytes() * 2, (*a)->kv().bytes());
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  const GoldenTensor se = gc.tensor("speech_embeds");
  DeviceTensor speech = alloc_f32((*b)->backend(), se.rows(), se.cols());
  (*b)->backend().upload(speech.buf.data(), se.data.data(), se.data.size() * sizeof(float));
  TensorCapture cap((*b)->backend());
  (*b)->set_capture(cap.fn());
  GreedyRequest q;
  q.prompt = gc.prompt_ids();
  q.speech = &speech.t;
  q.max_new_tokens = 1;
  auto ids = (*b)->generate_greedy(q);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  const GoldenTensor ref = gc.tensor("logits.last");
  const std::vector<float> got = captured(cap, "logits.last");
  ASSERT_EQ(got.size(), ref.data.size());
  const Diff d = compare(got.data(), ref.data.data(), got.size());
  EXPECT_LE(d.rel_l2, 1e-2) << "bf16 keys/values round at 2^-9";
  EXPECT_GT(d.rel_l2, 0.0) << "the pool really stores bf16";
}

TEST(KvCache, IntegerDtypeIsRefused) {
  auto be = cpu_backend(1);
  EXPECT_EQ(KvCache::create(*be, small_decoder(), 4, 16, DType::kI8).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace vv::test
