// The real 7B shape on the GPU, against a golden set made by `make_golden.py --preset full` (random
// weights, the PyTorch reference run in bfloat16). Run on the GPU host with
//   VV_GOLDEN_DIR=<that --out folder> gpu_full_golden
// Without such a set (the bundled tiny set is float32) every test skips and says why; it is its own
// executable so that the regular gpu run (unit_kernels_cuda) has no data-dependent skips.
//
// 1. bf16 compute, teacher-forced on the reference's ids: every dumped stage and logits.stepK within
//    what bf16 explains (golden/README.md: cosine ≥ 0.999, a top-5 overlap, max|a−b| ≤ 0.1·max|ref|).
//    Equal greedy ids are not required: the reference's bf16 logits tie exactly (spacing 0.125).
// 2. float32 compute on the GPU gives the same greedy ids as the CPU backend on that checkpoint.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/device_runner.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

// Empty when golden_dir() holds a bf16 (full) set; else why these tests do not apply.
std::string not_a_bf16_set() {
  const std::string path = golden_dir() + "/summary.json";
  std::ifstream in(path);
  if (!in) return path + " is missing";
  simdjson::dom::parser parser;
  simdjson::padded_string json(read_text(path));
  simdjson::dom::element doc;
  std::string_view dtype;
  if (parser.parse(json).get(doc) || doc["compute_dtype"].get_string().get(dtype)) {
    return path + ": no compute_dtype";
  }
  if (dtype != "bfloat16") {
    return golden_dir() + " is a " + std::string(dtype) +
           " golden set; these tests check a bf16 set made by `make_golden.py --preset full` (set "
           "VV_GOLDEN_DIR)";
  }
  return {};
}

#define VV_FULL_SET_OR_SKIP()                                                       \
  if (usable_gpu_count() == 0) {                                                    \
    if (gpu_required()) FAIL() << "VV_REQUIRE_GPU=1: " << gpu_unavailable_reason(); \
    GTEST_SKIP() << "no usable GPU: " << gpu_unavailable_reason();                  \
  }                                                                                 \
  if (const std::string why = not_a_bf16_set(); !why.empty()) GTEST_SKIP() << why;

RunnerOptions options() {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 1024;  // the longest prompt (553) in one step
  o.max_seqs = 4;
  o.prefill_chunk = 1024;
  return o;
}

std::vector<float> input_values(const GoldenCase& gc, const ModelSpec& spec) {
  if (gc.has("input_values")) return gc.tensor("input_values").data;
  std::ifstream in(gc.dir() + "/audio.wav", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  audio::PrepareOptions po;
  po.hop = spec.acoustic.hop();
  po.sample_rate = spec.sample_rate;
  auto prepared = audio::prepare_audio(bytes, po);
  EXPECT_TRUE(prepared.is_ok()) << gc.name() << ": " << prepared.status().to_string();
  return prepared.is_ok() ? prepared->input_values : std::vector<float>{};
}

// Rows [first, first + count) of a captured tensor.
std::vector<float> rows_of(const TensorCapture& cap, const std::string& name, int64_t first, int64_t count) {
  const CapturedTensor* t = cap.find(name);
  if (!t || t->rows < first + count) {
    ADD_FAILURE() << "captured " << name << " has " << (t ? t->rows : 0) << " rows, need " << first + count;
    return {};
  }
  return std::vector<float>(t->data.begin() + first * t->cols, t->data.begin() + (first + count) * t->cols);
}

std::vector<int> top5(const std::vector<float>& v) {
  std::vector<int> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = static_cast<int>(i);
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(5);
  return idx;
}

// README's bf16 rule, for every stage; logits also need a top-5 overlap. Prints one line a stage.
void expect_bf16_close(const std::string& what, const std::vector<float>& got,
                       const std::vector<float>& ref) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_FALSE(ref.empty()) << what;
  const Diff d = compare(got.data(), ref.data(), got.size());
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ab += static_cast<double>(got[i]) * ref[i];
    aa += static_cast<double>(got[i]) * got[i];
    bb += static_cast<double>(ref[i]) * ref[i];
  }
  const double cosine = ab / std::sqrt(aa * bb);
  std::string extra;
  if (what.find("logits") != std::string::npos) {
    const std::vector<int> a = top5(got), b = top5(ref);
    int common = 0;
    for (int i : a) common += std::count(b.begin(), b.end(), i) ? 1 : 0;
    extra = " top5 overlap " + std::to_string(common) + "/5";
    EXPECT_GE(common, 1) << what << ": no overlap between the top-5 ids";
  }
  std::printf("  %-34s cosine %.6f rel_max %.2e rel_l2 %.2e%s\n", what.c_str(), cosine, d.rel_max(), d.rel_l2,
              extra.c_str());
  EXPECT_GE(cosine, 0.999) << what;
  EXPECT_LE(d.max_abs_err, 0.1 * d.max_abs_ref) << what;
}

TEST(CudaFullGolden, Bf16EveryStageAndStepLogitsWithinBf16Tolerance) {
  VV_FULL_SET_OR_SKIP();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  BackendOptions bo;
  bo.gpu_bf16_gemm = true;
  auto runner = make_runner(**ckpt, options(), "cuda:0", bo);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  Runner& r = **runner;
  const int L = (*ckpt)->spec().decoder.num_layers;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    std::printf("case %s (cuda bf16, teacher-forced)\n", name.c_str());
    const std::vector<float> x = input_values(gc, (*ckpt)->spec());
    ASSERT_FALSE(x.empty()) << name;
    TensorCapture cap(r.backend());
    r.set_capture(cap.fn());
    auto speech = r.encode(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
    const std::vector<int32_t>& gold = gc.generated_ids();
    const int64_t T = static_cast<int64_t>(gc.prompt_ids().size());
    std::vector<BlockId> blocks;
    ASSERT_TRUE(r.kv().reserve(blocks, T + static_cast<int64_t>(gold.size())).is_ok());
    StepPlan plan;
    SequenceRows rows;
    rows.ids = gc.prompt_ids();
    rows.blocks = blocks;
    rows.speech = &speech->rows.t;
    plan.seqs.push_back(rows);
    auto out = r.execute(plan);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    // One decode row per reference id; logits.last gains one row per step (row K picks gold[K]).
    for (size_t i = 0; i + 1 < gold.size(); ++i) {
      StepPlan step;
      SequenceRows d;
      d.ids = {gold[i]};
      d.start_pos = T + static_cast<int64_t>(i);
      d.blocks = blocks;
      step.seqs.push_back(d);
      auto o = r.execute(step);
      ASSERT_TRUE(o.is_ok()) << o.status().to_string();
    }
    r.set_capture(nullptr);
    r.kv().release(blocks);

    int checked = 0;
    for (const char* n : {"acoustic.latents", "semantic.latents", "speech_embeds"}) {
      if (!gc.has(n)) continue;
      expect_bf16_close(name + " " + n, captured(cap, n), gc.tensor(n).data);
      ++checked;
    }
    if (gc.has("inputs_embeds")) {
      expect_bf16_close(name + " inputs_embeds", rows_of(cap, "inputs_embeds", 0, T),
                        gc.tensor("inputs_embeds").data);
      ++checked;
    }
    for (int i = 1; i <= L; ++i) {
      const std::string n = "hidden." + std::to_string(i);
      if (!gc.has(n)) continue;
      expect_bf16_close(name + " " + n, rows_of(cap, n, 0, T), gc.tensor(n).data);
      ++checked;
    }
    if (gc.has("hidden.norm")) {
      expect_bf16_close(name + " hidden.norm", rows_of(cap, "hidden.norm", 0, T),
                        gc.tensor("hidden.norm").data);
      ++checked;
    }
    for (int k = 0; k < static_cast<int>(gold.size()); ++k) {
      const std::string n = "logits.step" + std::to_string(k);
      if (!gc.has(n)) continue;
      expect_bf16_close(name + " " + n, rows_of(cap, "logits.last", k, 1), gc.tensor(n).data);
      ++checked;
    }
    EXPECT_GE(checked, 3) << name << ": too few stages in the golden set to check";
  }
}

// float32 compute: the GPU and the CPU backend pick the same greedy ids on the 7B checkpoint. The
// CPU side is slow at this shape, so the three shortest prompts (every case with VV_FULL_ALL_CASES=1).
TEST(CudaFullGolden, F32GreedyIdsEqualTheCpuBackend) {
  VV_FULL_SET_OR_SKIP();
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto gpu = make_runner(**ckpt, options(), "cuda:0");
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().to_string();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  BackendOptions cpu_opt;
  cpu_opt.cpu_threads = threads;
  auto cpu = make_runner(**ckpt, options(), "cpu", cpu_opt);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();

  std::vector<GoldenCase> cases;
  for (const std::string& name : golden_cases()) {
    cases.emplace_back(name);
    ASSERT_TRUE(cases.back().ok()) << cases.back().error();
  }
  std::stable_sort(cases.begin(), cases.end(), [](const GoldenCase& a, const GoldenCase& b) {
    return a.prompt_ids().size() < b.prompt_ids().size();
  });
  const char* all = std::getenv("VV_FULL_ALL_CASES");
  if (!(all && std::string(all) == "1") && cases.size() > 3) cases.erase(cases.begin() + 3, cases.end());
  for (const GoldenCase& gc : cases) {
    const std::vector<float> x = input_values(gc, (*ckpt)->spec());
    ASSERT_FALSE(x.empty()) << gc.name();
    std::vector<std::vector<TokenId>> ids;
    for (Runner* r : {gpu->get(), cpu->get()}) {
      const auto t0 = std::chrono::steady_clock::now();
      auto speech = r->encode(x.data(), static_cast<int64_t>(x.size()));
      ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
      GreedyRequest req;
      req.prompt = gc.prompt_ids();
      req.speech = &speech->rows.t;
      req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
      auto got = r->generate_greedy(req);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      ids.push_back(*got);
      std::printf("case %s: %s f32 %.1f s\n", gc.name().c_str(), r == gpu->get() ? "cuda" : "cpu",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    EXPECT_EQ(ids[0], ids[1]) << gc.name() << ": cuda f32 vs cpu f32 greedy ids";
    int same_as_ref = 0;
    for (size_t i = 0; i < ids[0].size() && i < gc.generated_ids().size(); ++i) {
      if (ids[0][i] != gc.generated_ids()[i]) break;
      ++same_as_ref;
    }
    std::printf("case %s: f32 ids equal on cuda and cpu: %s; first %d of %zu equal the bf16 reference's\n",
                gc.name().c_str(), ids[0] == ids[1] ? "yes" : "NO", same_as_ref, gc.generated_ids().size());
  }
}

}  // namespace
}  // namespace vv::test
