// The encoder packer on the GPU (labelled gpu; skips without a device): SpeechEmbedder::step over
// several jobs of unequal lengths and segments on the CUDA backend against the CPU embedder, each
// job alone. No new op runs here: the packed launch calls the same conv_ffn / conv_mixer / GEMM ops
// with more rows, and a GPU GEMM may tile differently for a different row count, so the bounds are
// the golden README's rather than bitwise. f32 compute: its end-to-end float32 bound (max|a−b| ≤
// 1e-4·max|ref|, rel_l2 ≤ 3e-5). bf16 compute: the bound of CudaRunnerGolden's bf16 stages
// (0.15·max|ref|, rel_l2 ≤ 0.1), what bf16 operands explain through the encoders' blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

void run_packed_vs_cpu(bool bf16) {
  VV_CUDA_BACKEND_OR_SKIP(gpu, bf16);
  if (!gpu) return;
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto cpu = cpu_backend();
  const int hop = (*ckpt)->spec().acoustic.hop();
  // Lengths in hops (odd, prime, a sample short of a hop multiple) and segments in hops: every job
  // ends on a short final segment beside the others' full ones.
  const int64_t hops[] = {23, 7, 41, 3, 17};
  const int64_t segs[] = {5, 4, 8, 2, 16};
  std::vector<std::vector<float>> clips;
  int64_t budget = 0;
  for (int i = 0; i < 5; ++i) {
    clips.push_back(audio(hops[i] * hop - (i % 2 ? 0 : 777), 10 + static_cast<uint64_t>(i)));
    budget += segs[i] * hop;
  }
  auto ge = SpeechEmbedder::create(*gpu, (*ckpt)->spec(), (*ckpt)->weights(), hop * 16, budget);
  auto ce = SpeechEmbedder::create(*cpu, (*ckpt)->spec(), (*ckpt)->weights(), hop * 16);
  ASSERT_TRUE(ge.is_ok()) << ge.status().to_string();
  ASSERT_TRUE(ce.is_ok()) << ce.status().to_string();
  std::vector<std::unique_ptr<SpeechJob>> jobs;
  std::vector<SpeechJob*> ptrs;
  for (int i = 0; i < 5; ++i) {
    auto j = (*ge)->start(clips[i].data(), static_cast<int64_t>(clips[i].size()),
                          EncodeOptions{segs[i] * hop, {}});
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
  const char* mode = bf16 ? "bf16" : "f32";
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(jobs[i]->done());
    const std::vector<float> got = rows_of(*gpu, jobs[i]->take());
    auto ref = (*ce)->embed(clips[i].data(), static_cast<int64_t>(clips[i].size()),
                            EncodeOptions{segs[i] * hop, {}});
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    const std::vector<float> want = rows_of(*cpu, *ref);
    ASSERT_EQ(got.size(), want.size());
    const Diff d = compare(got.data(), want.data(), got.size());
    std::printf("  cuda %s packed job %d vs cpu alone: rel_max %.2e rel_l2 %.2e\n", mode, i, d.rel_max(),
                d.rel_l2);
    EXPECT_LE(d.max_abs_err, (bf16 ? 0.15 : 1e-4) * d.max_abs_ref) << mode << " job " << i;
    EXPECT_LE(d.rel_l2, bf16 ? 0.1 : 3e-5) << mode << " job " << i;
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
