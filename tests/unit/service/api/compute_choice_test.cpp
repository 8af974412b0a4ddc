// model.dtype and model.device → what the engine computes in and what /version reports (API.md
// §14.3): on a GPU `auto` takes the checkpoint's matrix dtype and 16-bit runs the GEMMs on tensor
// cores; the CPU computes in float32 whatever the setting. No GPU is needed: only names are parsed.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config/settings.h"
#include "service/api/engine_factory.h"

namespace vv::api {
namespace {

Result<ComputeChoice> choose(const std::string& device, const std::string& dtype,
                             const std::map<std::string, int>& counts) {
  config::Settings s;
  EXPECT_EQ(s.set_raw("model.device", device, "test"), "");
  EXPECT_EQ(s.set_raw("model.dtype", dtype, "test"), "");
  return choose_compute(s, counts);
}

TEST(ComputeChoice, CpuIsFloat32WhateverTheSetting) {
  for (const char* dtype : {"auto", "float32", "bfloat16", "float16"}) {
    auto c = choose("cpu", dtype, {{"BF16", 300}, {"F32", 20}});
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_FALSE(c->gpu) << dtype;
    EXPECT_FALSE(c->gpu_bf16) << dtype;
    EXPECT_EQ(c->dtype, "float32") << dtype;
  }
}

TEST(ComputeChoice, GpuAutoTakesTheCheckpointsMatrixDtype) {
  auto bf = choose("cuda:1", "auto", {{"BF16", 300}, {"F32", 20}});
  ASSERT_TRUE(bf.is_ok()) << bf.status().to_string();
  EXPECT_TRUE(bf->gpu);
  EXPECT_TRUE(bf->gpu_bf16);
  EXPECT_EQ(bf->dtype, "bfloat16");
  auto f16 = choose("cuda", "auto", {{"F16", 300}, {"F32", 20}});
  ASSERT_TRUE(f16.is_ok());
  EXPECT_TRUE(f16->gpu_bf16);
  EXPECT_EQ(f16->dtype, "float16");
  auto f32 = choose("cuda:0,cuda:1", "auto", {{"F32", 320}});
  ASSERT_TRUE(f32.is_ok());
  EXPECT_TRUE(f32->gpu);
  EXPECT_FALSE(f32->gpu_bf16);
  EXPECT_EQ(f32->dtype, "float32");
  // Not known yet (before the checkpoint is open): float32 until the loader resolves it.
  auto unknown = choose("cuda", "auto", {});
  ASSERT_TRUE(unknown.is_ok());
  EXPECT_EQ(unknown->dtype, "float32");
}

TEST(ComputeChoice, GpuExplicitDtypeWins) {
  auto exact = choose("cuda", "float32", {{"BF16", 300}});
  ASSERT_TRUE(exact.is_ok());
  EXPECT_FALSE(exact->gpu_bf16);
  EXPECT_EQ(exact->dtype, "float32");
  auto half = choose("cuda:0", "bfloat16", {{"F32", 300}});
  ASSERT_TRUE(half.is_ok());
  EXPECT_TRUE(half->gpu_bf16);
  EXPECT_EQ(half->dtype, "bfloat16");
}

TEST(ComputeChoice, ABadDeviceListNamesTheEntry) {
  auto bad = choose("cuda:0,,cpu", "auto", {});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("empty entry"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace vv::api
