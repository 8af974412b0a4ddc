// The encoder packer on the GPU (labelled gpu; skips without a device): SpeechEmbedder::step over
// several jobs of unequal lengths and segments on the CUDA backend against the CPU embedder, each
// job alone. No new op runs here: the packed launch calls the same conv_ffn / conv_mixer / GEMM ops
// with more rows, and a GPU GEMM may tile differently for a different row count, so the bounds are
// the golden README's rather than bitwise. f32 compute: its end-to-end float32 bound (max|a−b| ≤
// 1e-4·max|ref|, rel_l2 ≤ 3e-5). bf16 compute: the bound of CudaRunnerGolden's bf16 stages
// (0.15·max|ref|, rel_l2 ≤ 0.1), what bf16 operands explain through the encoders' blocks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model/speech_embedder.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test::gpupack {
namespace {

std::vector<float> audio(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.05f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 24000.0;
    x[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * (140.0 + 31.0 * seed) * t) *
                              std::sin(2 * M_PI * 3 * t)) +
           noise(rng);
  }
  return x;
}

std::vector<float> rows_of(Backend& be, const SpeechRows& r) {
  std::vector<float> out(static_cast<size_t>(r.rows.t.rows() * r.rows.t.cols()));
  be.synchronize();
  be.download(out.data(), r.rows.t.data, out.size() * sizeof(float));
  return out;
}

// Lengths in hops (odd, prime, a sample short of a hop multiple) and segments in hops: every job
// ends on a short final segment beside the others' full ones.
constexpr int kJobs = 5;
constexpr int64_t kHops[kJobs] = {23, 7, 41, 3, 17};
constexpr int64_t kSegs[kJobs] = {5, 4, 8, 2, 16};

std::vector<std::vector<float>> clips_for(int hop) {
  std::vector<std::vector<float>> clips;
  for (int i = 0; i < kJobs; ++i)
    clips.push_back(audio(kHops[i] * hop - (i % 2 ? 0 : 777), 10 + static_cast<uint64_t>(i)));
  return clips;
}

// The five jobs packed through SpeechEmbedder::step on `gpu`: each job's rows.
void packed_rows(Backend& gpu, const Checkpoint& ckpt, const std::vector<std::vector<float>>& clips,
                 std::vector<std::vector<float>>& out) {
  const int hop = ckpt.spec().acoustic.hop();
  int64_t budget = 0;
  for (int i = 0; i < kJobs; ++i) budget += kSegs[i] * hop;
  auto ge = SpeechEmbedder::create(gpu, ckpt.spec(), ckpt.weights(), hop * 16, budget);
  ASSERT_TRUE(ge.is_ok()) << ge.status().to_string();
  std::vector<std::unique_ptr<SpeechJob>> jobs;
  std::vector<SpeechJob*> ptrs;
  for (int i = 0; i < kJobs; ++i) {
    auto j = (*ge)->start(clips[i].data(), static_cast<int64_t>(clips[i].size()),
                          EncodeOptions{kSegs[i] * hop, {}});
    ASSERT_TRUE(j.is_ok()) << j.status().to_string();
    ptrs.push_back(j->get());
    jobs.push_back(std::move(j).value());
  }
  for (int round = 0; round < 64; ++round) {
    bool all = true;
    for (auto* j : ptrs) all = all && j->done();
    if (all) break;
    ASSERT_TRUE((*ge)->step(ptrs).is_ok());
  }
  out.clear();
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(jobs[i]->done());
    out.push_back(rows_of(gpu, jobs[i]->take()));
  }
}

void run_packed_vs_cpu(bool bf16) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, bf16);
  if (!gpu) return;
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto cpu = cpu_backend();
  const int hop = (*ckpt)->spec().acoustic.hop();
  const std::vector<std::vector<float>> clips = clips_for(hop);
  std::vector<std::vector<float>> got;
  ASSERT_NO_FATAL_FAILURE(packed_rows(*gpu, **ckpt, clips, got));
  auto ce = SpeechEmbedder::create(*cpu, (*ckpt)->spec(), (*ckpt)->weights(), hop * 16);
  ASSERT_TRUE(ce.is_ok()) << ce.status().to_string();
  const char* mode = bf16 ? "bf16" : "f32";
  for (int i = 0; i < kJobs; ++i) {
    auto ref = (*ce)->embed(clips[i].data(), static_cast<int64_t>(clips[i].size()),
                            EncodeOptions{kSegs[i] * hop, {}});
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    const std::vector<float> want = rows_of(*cpu, *ref);
    ASSERT_EQ(got[i].size(), want.size());
    const Diff d = compare(got[i].data(), want.data(), want.size());
    std::printf("  cuda %s packed job %d vs cpu alone: rel_max %.2e rel_l2 %.2e\n", mode, i, d.rel_max(),
                d.rel_l2);
    EXPECT_LE(d.max_abs_err, (bf16 ? 0.15 : 1e-4) * d.max_abs_ref) << mode << " job " << i;
    EXPECT_LE(d.rel_l2, bf16 ? 0.1 : 3e-5) << mode << " job " << i;
  }
}

// By default (VV_CUDA_ENC_BLOCK on) the tiny model's 32- and 64-channel blocks (and, on sm_90 with
// the wgmma FFN, its 128-channel ones) run as one kernel each, per clip (conv_block); with
// VV_CUDA_ENC_BLOCK=0 the encoder runs the mixer per clip and the FFN once over the packed clips. Both
// compute every row the same way, so the packed jobs' rows are bitwise those of the op sequence (both
// with VV_CUDA_FFN_WG=1).
TEST(CudaEncoderPack, WholeBlockKernelGivesTheDefaultsBitsForPackedJobs) {
  VV_CUDA_BACKEND_OR_SKIP(plain, true);
  if (!plain) return;
  auto ops = cuda_backend_with({{"VV_CUDA_FFN_WG", "1"}, {"VV_CUDA_ENC_BLOCK", "0"}}, true);
  auto blk = cuda_backend_with(
      {{"VV_CUDA_ENC_BLOCK", "1"}, {"VV_CUDA_FFN_WG", "1"}, {"VV_CUDA_PROFILE", "1"}}, true);
  ASSERT_TRUE(blk.is_ok() && ops.is_ok());
  Backend* gpu = ops->get();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const std::vector<std::vector<float>> clips = clips_for((*ckpt)->spec().acoustic.hop());
  std::vector<std::vector<float>> want, got;
  ASSERT_NO_FATAL_FAILURE(packed_rows(*gpu, **ckpt, clips, want));
  ASSERT_NO_FATAL_FAILURE(packed_rows(**blk, **ckpt, clips, got));
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0) << "job " << i;
  }
  const std::string table = backend_profile_report(**blk);
  cudaDeviceProp prop{};
  const bool sm90 = cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
  for (const char* label : {"conv_block.fused.c32", "conv_block.fused.c64"})
    EXPECT_NE(table.find(label), std::string::npos) << label << " not run\n" << table;
  EXPECT_EQ(table.find("conv_block.fused.c128") != std::string::npos, sm90) << table;
}

// The semantic encoder on a second stream (Backend::make_lane, the default): both encoders' ops are
// issued each on its stream and the connector waits for both (Backend::wait_for). Every op computes
// what it computes on one stream, so the packed jobs' rows are bitwise those with VV_CUDA_LANES=0
// (one stream, the encoders in order), over several packed steps (each step's semantic ops wait for
// the previous step's connector, which still reads the latents they overwrite).
TEST(CudaEncoderPack, SemanticEncoderOnASecondStreamGivesTheOneStreamBits) {
  for (const bool bf16 : {true, false}) {
    VV_CUDA_BACKEND_OR_SKIP(gpu, bf16);
    if (!gpu) return;
    auto one = cuda_backend_with({{"VV_CUDA_LANES", "0"}}, bf16);
    ASSERT_TRUE(one.is_ok()) << one.status().to_string();
    EXPECT_NE(gpu->make_lane(), nullptr) << "no lane by default";
    EXPECT_EQ((*one)->make_lane(), nullptr) << "a lane with VV_CUDA_LANES=0";
    auto ckpt = Checkpoint::open(hf_model_dir());
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    const std::vector<std::vector<float>> clips = clips_for((*ckpt)->spec().acoustic.hop());
    std::vector<std::vector<float>> want, got;
    ASSERT_NO_FATAL_FAILURE(packed_rows(**one, **ckpt, clips, want));
    ASSERT_NO_FATAL_FAILURE(packed_rows(*gpu, **ckpt, clips, got));
    ASSERT_EQ(got.size(), want.size());
    for (int i = 0; i < kJobs; ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0)
          << (bf16 ? "bf16" : "f32") << " job " << i;
    }
  }
}

TEST(CudaEncoderPack, F32PackedJobsMatchTheCpuEmbedderAlone) {
  run_packed_vs_cpu(false);
}

TEST(CudaEncoderPack, Bf16PackedJobsMatchTheCpuEmbedderAloneWithinBf16Error) {
  run_packed_vs_cpu(true);
}

}  // namespace
}  // namespace vv::test::gpupack
