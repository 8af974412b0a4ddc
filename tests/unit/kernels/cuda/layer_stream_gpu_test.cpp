// Layer streaming (--gpu-layers) on a GPU: pinned host memory, copies on the backend's second
// stream, f32 GEMMs so the golden ids hold, and a cap checked against the driver's used memory.
// The CPU form of the same code path is tests/unit/engine/runner/layer_stream_test.cpp. Labelled
// gpu: skipped with the reason without a GPU (VV_REQUIRE_GPU=1 makes that a failure).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/runner.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/runner/golden_input.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

TEST(LayerStreamGpu, StreamedLayersGiveTheGoldenIdsUnderACap) {
  VV_GPU_OR_SKIP();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = make_backend("cuda");
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  size_t free_before = 0, total = 0;
  ASSERT_TRUE((*be)->device_memory(&free_before, &total));
  Backend* raw = be->get();
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 512;
  o.max_seqs = 8;
  o.prefill_chunk = 100;
  o.gpu_layers = 1;
  o.memory_cap = total - free_before + (size_t{768} << 20);  // what is in use now + 768 MiB
  auto r = Runner::create(std::move(be).value(), **ckpt, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_NE((*r)->layer_stream(), nullptr);
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    EXPECT_EQ(golden_greedy_ids(**r, gc), gc.generated_ids()) << name;
    size_t free_now = 0;
    ASSERT_TRUE(raw->device_memory(&free_now, &total));
    EXPECT_LE(total - free_now, o.memory_cap) << name;
  }
}

}  // namespace
}  // namespace vv::test
