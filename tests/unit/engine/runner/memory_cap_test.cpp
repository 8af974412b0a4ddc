// Memory caps (--gpu-memory) on the CPU, whose backend counts its allocations like a device: the
// plan fits weights, workspace and KV pool under the cap, the pool shrinks to what remains, the
// peak of the backend's allocation counter stays under the cap through loading and running, a cap
// too small is refused naming the cap and what is needed, and with --gpu-layers -1 the layers that
// do not fit stream (ids unchanged).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/runner/memory_plan.h"
#include "engine/runner/runner.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/runner/golden_input.h"

namespace vv::test {
namespace {

// Under a cap the plan keeps this much for what requests allocate on the device (their speech rows
// and latents; far more than the golden clips need at the tiny shape).
constexpr size_t kScratch = 256 << 10;

RunnerOptions cap_options(size_t cap, int gpu_layers = -1) {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.min_kv_positions = 512;
  o.max_rows = 256;
  o.max_seqs = 4;
  o.prefill_chunk = 100;
  o.memory_cap = cap;
  o.gpu_layers = gpu_layers;
  o.scratch_reserve = kScratch;
  return o;
}

// A case with stored model input (every case but `long`).
GoldenCase some_case() {
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    if (gc.ok() && gc.has("input_values")) return gc;
  }
  return GoldenCase(golden_cases().front());
}

// What the runner allocates with no cap (every layer resident, the whole pool), on a fresh backend.
size_t uncapped_bytes(const Checkpoint& ckpt, int64_t* kv_positions) {
  auto r = Runner::create(cpu_backend(1), ckpt, cap_options(0));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return 0;
  *kv_positions = (*r)->kv().num_blocks() * (*r)->kv().block_size();
  return (*r)->backend().peak_allocated_bytes();
}

TEST(MemoryCap, KvPoolShrinksToWhatRemainsAndThePeakStaysUnderTheCap) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  int64_t full_kv = 0;
  const size_t full = uncapped_bytes(**ckpt, &full_kv);
  ASSERT_GT(full, 0u);
  ASSERT_EQ(full_kv, 4096);
  const size_t per_pos =
      KvCache::bytes_per_position((*ckpt)->spec().decoder, DType::kF32, (*ckpt)->spec().decoder.num_layers);
  const GoldenCase gc = some_case();
  ASSERT_TRUE(gc.ok()) << gc.error();
  // Caps that cut the pool to about three quarters, a half and a quarter.
  for (int64_t cut : {1024, 2048, 3072}) {
    const size_t cap = full + kScratch - static_cast<size_t>(cut) * per_pos;
    auto r = Runner::create(cpu_backend(1), **ckpt, cap_options(cap));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    Runner& run = **r;
    const int64_t kv = run.kv().num_blocks() * run.kv().block_size();
    EXPECT_LT(kv, 4096) << "cap " << cap;
    // What remains, less the plan's rounding of each tensor to 256 bytes (a few blocks at most).
    EXPECT_LE(kv, 4096 - cut) << "cap " << cap;
    EXPECT_GE(kv, 4096 - cut - 8 * run.kv().block_size())
        << "the pool takes what remains (cap " << cap << ")";
    EXPECT_EQ(run.memory_plan().resident_layers, (*ckpt)->spec().decoder.num_layers)
        << "every layer still fits";
    EXPECT_EQ(golden_greedy_ids(run, gc), gc.generated_ids());
    EXPECT_LE(run.backend().peak_allocated_bytes(), cap) << "peak through loading and a request";
    EXPECT_LE(run.memory_plan().total, cap);
  }
}

TEST(MemoryCap, TooSmallACapIsRefusedNamingTheCapAndTheNeed) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  int64_t full_kv = 0;
  const size_t full = uncapped_bytes(**ckpt, &full_kv);
  // Every layer resident is asked for, with room for less than the smallest pool.
  const size_t cap = full + kScratch -
                     4000 * KvCache::bytes_per_position((*ckpt)->spec().decoder, DType::kF32,
                                                        (*ckpt)->spec().decoder.num_layers);
  auto r = Runner::create(cpu_backend(1), **ckpt, cap_options(cap, (*ckpt)->spec().decoder.num_layers));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("cap of " + gib(cap)), std::string::npos) << m;
  EXPECT_NE(m.find("needs at least"), std::string::npos) << m;
  EXPECT_NE(m.find("KV pool of 512 positions"), std::string::npos) << m;
  // A cap below even the encoders and the embedding.
  auto tiny = Runner::create(cpu_backend(1), **ckpt, cap_options(1 << 20));
  ASSERT_FALSE(tiny.is_ok());
  EXPECT_NE(tiny.status().message().find("cap of 1.0 MiB"), std::string::npos) << tiny.status().message();
}

TEST(MemoryCap, LayersThatDoNotFitStreamWithIdenticalIdsAndThePeakUnderTheCap) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const DecoderSpec& ds = (*ckpt)->spec().decoder;
  const int L = ds.num_layers;
  int64_t full_kv = 0;
  const size_t full = uncapped_bytes(**ckpt, &full_kv);
  const DecoderBytes b = decoder_bytes(ds, (*ckpt)->weights().decoder, 256, 4, 256, 0, L);
  const size_t per_pos = KvCache::bytes_per_position(ds, DType::kF32, L);
  const GoldenCase gc = some_case();
  ASSERT_TRUE(gc.ok()) << gc.error();
  // Room for the smallest pool only, less half a layer: the layers must stream (two slots take the
  // room of two layers, so with three layers only streaming all of them saves anything).
  const size_t cap = full + kScratch - (4096 - 512) * per_pos - b.layers[0] / 2;
  auto r = Runner::create(cpu_backend(1), **ckpt, cap_options(cap));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Runner& run = **r;
  const int resident = run.memory_plan().resident_layers;
  EXPECT_LT(resident, L);
  ASSERT_NE(run.layer_stream(), nullptr);
  EXPECT_EQ(run.layer_stream()->count(), L - resident);
  EXPECT_EQ(golden_greedy_ids(run, gc), gc.generated_ids());
  EXPECT_LE(run.backend().peak_allocated_bytes(), cap);
}

TEST(MemoryCap, ParsesSizesInGiBGBMiBAndShares) {
  const size_t gi = size_t{1} << 30;
  EXPECT_EQ(*parse_memory_size("18GiB"), 18 * gi);
  EXPECT_EQ(*parse_memory_size("18G"), 18 * gi);
  EXPECT_EQ(*parse_memory_size("18"), 18 * gi);
  EXPECT_EQ(*parse_memory_size("8.5g"), 8 * gi + gi / 2);
  EXPECT_EQ(*parse_memory_size("20GB"), size_t{20000000000});
  EXPECT_EQ(*parse_memory_size("512MiB"), size_t{512} << 20);
  EXPECT_EQ(*parse_memory_size("80%", 100 * gi), 80 * gi);
  EXPECT_FALSE(parse_memory_size("80%").is_ok()) << "a share needs the device's total";
  EXPECT_FALSE(parse_memory_size("150%", gi).is_ok());
  EXPECT_FALSE(parse_memory_size("lots").is_ok());
  EXPECT_FALSE(parse_memory_size("-3G").is_ok());
  EXPECT_FALSE(parse_memory_size("12TB").is_ok());
  EXPECT_FALSE(parse_memory_size("").is_ok());
}

}  // namespace
}  // namespace vv::test
