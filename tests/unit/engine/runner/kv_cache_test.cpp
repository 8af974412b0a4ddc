// The KV block pool: tables grow to cover positions, blocks come back on release, exhaustion
// fails without changing the table.
#include "engine/runner/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

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

TEST(KvCache, EmptyPoolIsRefused) {
  auto be = cpu_backend(1);
  EXPECT_FALSE(KvCache::create(*be, small_decoder(), 0, 16).is_ok());
}

}  // namespace
}  // namespace vv::test
