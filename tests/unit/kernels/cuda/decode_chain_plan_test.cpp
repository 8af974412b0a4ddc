// The decode chain's host side (kernels/cuda/decode_chain.cu): which runs of one-row GEMVs it takes and
// what it would launch for them, at the 7B's layer and at shapes at the edges. Host arithmetic only, so
// it runs without a GPU (the chain's device results are checked by CudaDecodeFusion.Chained*, label gpu).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/decode_ops.cuh"

namespace vv::test::chainplan {
namespace {

// Distinct 256-byte aligned fake device addresses (never dereferenced here).
template <typename T>
T* addr(uintptr_t i) {
  return reinterpret_cast<T*>(uintptr_t{1} << 20 | i << 12);
}

cuda::DecodeGemv gemv(int64_t K, int64_t N, uintptr_t id, DType wt = DType::kBF16) {
  cuda::DecodeGemv g;
  g.x = addr<const float>(id);
  g.K = K;
  g.wt = wt;
  g.bulk = true;
  g.count = 1;
  g.j[0].w = addr<const void>(id + 1);
  g.j[0].ldw = K;
  g.j[0].N = N;
  g.j[0].out = addr<float>(id + 2);
  return g;
}

// A 7B layer as the chain fuses it: o + residual, norm + gate_up with the SwiGLU epilogue, down +
// residual, norm + q|k|v.
cuda::DecodeChain seven_b_layer() {
  cuda::DecodeChain c;
  c.barrier = addr<unsigned>(1000);
  c.sms = 132;
  c.smem_max = 227 * 1024;
  c.ph[0] = gemv(3584, 3584, 10);
  c.ph[0].j[0].ep = static_cast<int>(Epilogue::kAddResidual);
  c.ph[1] = gemv(3584, 2 * 18944, 20);
  c.ph[1].norm_w = addr<const float>(24);
  c.ph[1].norm_out = addr<float>(25);
  c.ph[1].silu_out = addr<float>(26);
  c.ph[2] = gemv(18944, 3584, 30);
  c.ph[2].j[0].ep = static_cast<int>(Epilogue::kAddResidual);
  c.ph[3] = gemv(3584, 4608, 40);
  c.ph[3].norm_w = addr<const float>(44);
  c.ph[3].norm_out = addr<float>(45);
  c.phases = 4;
  return c;
}

TEST(CudaChainPlan, SevenBLayerFitsFiveStagesBesideTheAttention) {
  cuda::DecodeChain c = seven_b_layer();
  ASSERT_TRUE(cuda::decode_chain_takes(c));
  cuda::DecodeChainLaunch l = cuda::decode_chain_launch(c);
  EXPECT_EQ(l.stride, size_t{18944} * 2) << "the down projection's one row a tile sizes the stages";
  EXPECT_EQ(l.stages, 5);
  EXPECT_LE(l.smem, size_t{227} * 1024);
  // Tiles: o 3,584 rows of 5; gate_up 18,944 row pairs of 2; down one row a tile; q|k|v 4,608 rows of 5.
  EXPECT_EQ(c.tiles[0], (3584 + 4) / 5);
  EXPECT_EQ(c.tiles[1], 18944 / 2);
  EXPECT_TRUE(c.pair[1]);
  EXPECT_EQ(c.tiles[2], 3584);
  EXPECT_EQ(c.tiles[3], (4608 + 4) / 5);

  // With the attention phase (34.5 KB of shared memory at the 7B: 7 heads × 128 × 9 floats, 7 × 64
  // split weights, 64 slots): still five stages, and the block within the SM's 227 KB.
  c.attn = true;
  c.at.n = 1;
  c.at.splits = 16;
  c.at.kv_heads = 4;
  c.at.kv.ct = DType::kBF16;
  c.at.smem = (7 * 128 * 9 + 7 * 64) * sizeof(float) + 64 * sizeof(int64_t);
  ASSERT_TRUE(cuda::decode_chain_takes(c));
  l = cuda::decode_chain_launch(c);
  EXPECT_EQ(l.stages, 5);
  EXPECT_EQ(l.attn_offset % 16, 0u);
  EXPECT_LE(l.smem, size_t{227} * 1024);
  EXPECT_GE(l.smem, l.attn_offset + c.at.smem);
}

TEST(CudaChainPlan, DeclinesWhatItCannotRun) {
  {
    cuda::DecodeChain c = seven_b_layer();
    c.phases = 1;  // one launch alone: nothing to chain
    EXPECT_FALSE(cuda::decode_chain_takes(c));
    c.rope = true;  // but one GEMV and the rope after it are two
    c.r.R = 1;
    c.r.D = 128;
    EXPECT_TRUE(cuda::decode_chain_takes(c));
  }
  {
    cuda::DecodeChain c = seven_b_layer();
    c.ph[2].wt = DType::kF16;  // the weights of one dtype
    c.ph[2].j[0].w = addr<const void>(31);
    EXPECT_FALSE(cuda::decode_chain_takes(c));
  }
  {
    cuda::DecodeChain c = seven_b_layer();
    c.ph[3].wt = DType::kF32;  // the bulk kernel streams 16-bit weights only
    c.ph[0].wt = c.ph[1].wt = c.ph[2].wt = DType::kF32;
    EXPECT_FALSE(cuda::decode_chain_takes(c));
  }
  {
    cuda::DecodeChain c = seven_b_layer();
    c.barrier = nullptr;
    EXPECT_FALSE(cuda::decode_chain_takes(c));
  }
  {
    cuda::DecodeChain c = seven_b_layer();
    c.smem_max = 100 * 1024;  // two 37.9 KB stages do not fit beside a 64 KB attention
    c.attn = true;
    c.at.n = 1;
    c.at.splits = 1;
    c.at.kv_heads = 1;
    c.at.smem = 64 * 1024;
    EXPECT_FALSE(cuda::decode_chain_takes(c));
  }
  {
    cuda::DecodeChain c = seven_b_layer();
    c.attn = true;  // an f32 cache's attention is not the chain's
    c.at.n = 1;
    c.at.splits = 4;
    c.at.kv_heads = 4;
    c.at.kv.ct = DType::kF32;
    c.at.smem = 1024;
    EXPECT_FALSE(cuda::decode_chain_takes(c));
  }
}

// Small shapes: fewer tiles than blocks, and the stage count at its cap when the tiles are small.
TEST(CudaChainPlan, SmallShapesTakeTheMostStages) {
  cuda::DecodeChain c;
  c.barrier = addr<unsigned>(1000);
  c.sms = 132;
  c.ph[0] = gemv(24, 136, 10);  // K = 24: one chunk a thread, 8 rows a tile
  c.ph[1] = gemv(136, 80, 20);
  c.ph[1].norm_w = addr<const float>(24);
  c.ph[1].norm_out = addr<float>(25);
  c.ph[1].silu_out = addr<float>(26);
  c.phases = 2;
  ASSERT_TRUE(cuda::decode_chain_takes(c));
  const cuda::DecodeChainLaunch l = cuda::decode_chain_launch(c);
  EXPECT_EQ(c.tiles[0], 136 / 8);
  EXPECT_EQ(c.tiles[1], 40 / 4) << "40 row pairs, 4 a tile";
  EXPECT_EQ(l.stages, 16);
  EXPECT_LE(l.smem, size_t{227} * 1024);
}

}  // namespace
}  // namespace vv::test::chainplan
