// The Runner end to end against the golden set: audio → encoders → connectors → decoder → 32
// greedy ids for every case and both checkpoint layouts, every stage within the end-to-end
// tolerances, a request alone vs inside a batch of four, thread counts 1 vs 2, stop tokens.
#include "engine/runner/runner.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/cpu_runner.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/runner/golden_input.h"

namespace vv::test {
namespace {

std::vector<float> first_rows(const TensorCapture& cap, const std::string& name, int64_t rows) {
  const CapturedTensor* t = cap.find(name);
  if (!t) {
    ADD_FAILURE() << "nothing captured as " << name;
    return {};
  }
  EXPECT_GE(t->rows, rows) << name;
  const int64_t n = std::min(rows, t->rows) * t->cols;
  return std::vector<float>(t->data.begin(), t->data.begin() + n);
}

RunnerOptions test_options() {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 512;
  o.max_seqs = 8;
  o.prefill_chunk = 100;  // several prefill steps for the longer prompts
  return o;
}

class RunnerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(RunnerGolden, AudioToGreedyIdsMatchesGoldenWithEveryStageInTolerance) {
  auto ckpt = open_layout(GetParam());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_cpu_runner(**ckpt, test_options(), 2);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  Runner& r = **runner;
  const int L = (*ckpt)->spec().decoder.num_layers;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    const std::vector<float> x = golden_input_values(gc);
    ASSERT_FALSE(x.empty());
    TensorCapture cap(r.backend());
    r.set_capture(cap.fn());
    auto speech = r.encode(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
    GreedyRequest req;
    req.prompt = gc.prompt_ids();
    req.speech = &speech->rows.t;
    req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
    auto ids = r.generate_greedy(req);
    r.set_capture(nullptr);
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, gc.generated_ids()) << name << " (" << GetParam() << ")";

    const std::string tag = " (" + GetParam() + ")";
    for (const char* n : {"acoustic.latents", "semantic.latents", "speech_embeds"}) {
      expect_end_to_end(name + " " + n + tag, captured(cap, n), gc.tensor(n));
    }
    const int64_t T = static_cast<int64_t>(gc.prompt_ids().size());
    expect_end_to_end(name + " inputs_embeds" + tag, first_rows(cap, "inputs_embeds", T),
                      gc.tensor("inputs_embeds"));
    for (int i = 1; i <= L; ++i) {
      const std::string n = "hidden." + std::to_string(i);
      if (gc.has(n)) expect_end_to_end(name + " " + n + tag, first_rows(cap, n, T), gc.tensor(n));
    }
    expect_end_to_end(name + " hidden.norm" + tag, first_rows(cap, "hidden.norm", T),
                      gc.tensor("hidden.norm"));
    expect_end_to_end(name + " logits.last" + tag, first_rows(cap, "logits.last", 1),
                      gc.tensor("logits.last"));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RunnerGolden, ::testing::Values("hf", "orig"));

// From the audio files themselves (decode, resample with soxr HQ, normalise, pad: engine/audio),
// 16 kHz and 44.1 kHz stereo inputs included.
TEST(Runner, GreedyIdsFromEveryGoldenAudioFileMatchGolden) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_cpu_runner(**ckpt, test_options(), 2);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    std::ifstream in(gc.dir() + "/audio.wav", std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    audio::PrepareOptions po;
    po.hop = (*ckpt)->spec().acoustic.hop();
    po.sample_rate = (*ckpt)->spec().sample_rate;
    auto prepared = audio::prepare_audio(bytes, po);
    ASSERT_TRUE(prepared.is_ok()) << name << ": " << prepared.status().to_string();
    auto speech =
        (*runner)->encode(prepared->input_values.data(), static_cast<int64_t>(prepared->input_values.size()));
    ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
    GreedyRequest req;
    req.prompt = gc.prompt_ids();
    req.speech = &speech->rows.t;
    req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
    auto ids = (*runner)->generate_greedy(req);
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, gc.generated_ids()) << name << " from " << gc.dir() << "/audio.wav";
  }
}

struct Prepared {
  GoldenCase gc;
  SpeechRows speech;
};

TEST(Runner, RequestAloneAndInsideABatchOfFourGiveIdenticalIds) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions opt = test_options();
  opt.max_rows = 160;  // prompts are prefilled in pieces while others decode
  auto runner = make_cpu_runner(**ckpt, opt, 2);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  Runner& r = **runner;
  std::vector<std::unique_ptr<Prepared>> cases;
  for (const std::string& name : golden_cases()) {
    if (name == "long" || cases.size() == 4) continue;
    auto p = std::make_unique<Prepared>(Prepared{GoldenCase(name), {}});
    ASSERT_TRUE(p->gc.ok()) << p->gc.error();
    const std::vector<float> x = golden_input_values(p->gc);
    auto s = r.encode(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    p->speech = std::move(s).value();
    cases.push_back(std::move(p));
  }
  ASSERT_GE(cases.size(), 2u) << "need at least two golden cases besides `long`";
  std::vector<GreedyRequest> reqs;
  for (size_t i = 0; i < cases.size(); ++i) {
    GreedyRequest q;
    q.prompt = cases[i]->gc.prompt_ids();
    q.speech = &cases[i]->speech.rows.t;
    const int gold = static_cast<int>(cases[i]->gc.generated_ids().size());
    q.max_new_tokens = std::max(1, gold - 5 * static_cast<int>(i));  // sequences finish at different steps
    reqs.push_back(q);
  }
  auto batch = r.generate_greedy(reqs);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  const int64_t free_after_batch = r.kv().free_blocks();
  EXPECT_EQ(free_after_batch, r.kv().num_blocks()) << "every block is given back";
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone = r.generate_greedy(reqs[i]);
    ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
    EXPECT_EQ((*batch)[i], *alone) << cases[i]->gc.name();
    const auto& gold = cases[i]->gc.generated_ids();
    EXPECT_EQ(*alone, std::vector<int32_t>(gold.begin(), gold.begin() + reqs[i].max_new_tokens))
        << cases[i]->gc.name();
  }
}

// RunnerOptions::decode_pad: steps of one row per sequence run at 1, 2, 4, 8, then multiples of the
// pad; padding rows use a block of their own and their outputs are dropped.
TEST(Runner, DecodeStepsPadToBucketsWithinMaxSeqs) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions opt = test_options();
  opt.max_seqs = 36;
  opt.decode_pad = 8;
  auto padded = make_cpu_runner(**ckpt, opt, 1);
  ASSERT_TRUE(padded.is_ok()) << padded.status().to_string();
  EXPECT_EQ((*padded)->decode_pad(), 8);
  // The last bucket stops at max_seqs: 33..36 sequences run as 36.
  const std::vector<std::pair<int64_t, int64_t>> want = {{1, 1},   {2, 2},   {3, 4},   {5, 8},
                                                         {8, 8},   {9, 16},  {16, 16}, {17, 24},
                                                         {33, 36}, {36, 36}, {37, 37}, {0, 0}};
  for (const auto& [n, to] : want) EXPECT_EQ((*padded)->padded_seqs(n), to) << n << " sequences";
  opt.decode_pad = 0;
  auto plain = make_cpu_runner(**ckpt, opt, 1);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ((*plain)->padded_seqs(3), 3);
  EXPECT_EQ((*plain)->kv().num_blocks(), (*padded)->kv().num_blocks()) << "the pad's block is one more";
  EXPECT_EQ((*padded)->kv().view().num_blocks, (*padded)->kv().num_blocks() + 1);
  opt.decode_pad = -1;
  auto cpu_default = make_cpu_runner(**ckpt, opt, 1);
  ASSERT_TRUE(cpu_default.is_ok());
  EXPECT_EQ((*cpu_default)->decode_pad(), 0) << "-1 pads on CUDA backends only";
}

TEST(Runner, PaddedDecodeStepsGiveTheUnpaddedIdsAndLogits) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions opt = test_options();
  opt.decode_pad = 8;
  auto padded = make_cpu_runner(**ckpt, opt, 1);
  opt.decode_pad = 0;
  auto plain = make_cpu_runner(**ckpt, opt, 1);
  ASSERT_TRUE(padded.is_ok() && plain.is_ok());
  std::vector<GoldenCase> cases;
  for (const std::string& name : golden_cases()) {
    if (name == "long" || cases.size() == 3) continue;
    cases.emplace_back(name);
    ASSERT_TRUE(cases.back().ok()) << cases.back().error();
  }
  ASSERT_EQ(cases.size(), 3u) << "three golden cases besides `long`: 3 rows pad to 4, then 2, then 1";
  // Prefill each alone on both runners, then decode the three together, step by step, comparing ids and
  // logits.
  std::vector<std::vector<TokenId>> next(2, std::vector<TokenId>(cases.size()));
  std::vector<std::vector<std::vector<BlockId>>> blocks(2, std::vector<std::vector<BlockId>>(cases.size()));
  std::vector<SpeechRows> rows[2];
  int k = 0;
  for (Runner* r : {padded->get(), plain->get()}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::vector<float> x = golden_input_values(cases[i]);
      auto s = r->encode(x.data(), static_cast<int64_t>(x.size()));
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      rows[k].push_back(std::move(s).value());
      const std::vector<TokenId> prompt = cases[i].prompt_ids();
      const auto n = static_cast<int64_t>(prompt.size());
      ASSERT_TRUE(r->kv().reserve(blocks[k][i], n + 4).is_ok());
      for (BlockId b : blocks[k][i])
        EXPECT_LT(b, r->kv().num_blocks()) << "the pad's block is never handed out";
      StepPlan p;
      SequenceRows q;
      q.ids = prompt;
      q.blocks = blocks[k][i];
      q.speech = &rows[k][i].rows.t;
      p.seqs.push_back(q);
      auto out = r->execute(p);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      next[k][i] = out->next[0];
    }
    ++k;
  }
  ASSERT_EQ(next[0], next[1]);
  for (int step = 0; step < 3; ++step) {
    const size_t live = cases.size() - static_cast<size_t>(step);  // 3, 2, 1 sequences
    std::vector<StepOutput> outs;
    for (int w = 0; w < 2; ++w) {
      Runner* r = w == 0 ? padded->get() : plain->get();
      StepPlan p;
      p.return_logits = true;
      for (size_t i = 0; i < live; ++i) {
        SequenceRows q;
        q.ids = {next[w][i]};
        q.start_pos = static_cast<int64_t>(cases[i].prompt_ids().size()) + step;
        q.blocks = blocks[w][i];
        q.speech = &rows[w][i].rows.t;
        q.speech_begin = rows[w][i].frames();
        q.want_logits = true;
        p.seqs.push_back(q);
      }
      TensorCapture cap(r->backend());
      if (w == 0 && step == 0) r->set_capture(cap.fn());
      auto out = r->execute(p);
      r->set_capture(nullptr);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      if (w == 0 && step == 0) {
        const CapturedTensor* h = cap.find("hidden.1");
        ASSERT_NE(h, nullptr);
        EXPECT_EQ(h->rows, 4) << "3 sequences ran as 4 rows";
      }
      ASSERT_EQ(out->next.size(), live) << "the padding rows' outputs are dropped";
      ASSERT_EQ(out->logits.size(), live);
      for (size_t i = 0; i < live; ++i) next[w][i] = out->next[i];
      outs.push_back(std::move(out).value());
    }
    EXPECT_EQ(outs[0].next, outs[1].next) << "step " << step;
    for (size_t i = 0; i < live; ++i) {
      ASSERT_FALSE(outs[0].logits[i].empty());
      EXPECT_EQ(outs[0].logits[i], outs[1].logits[i]) << "step " << step << ", sequence " << i;
    }
  }
}

TEST(Runner, OneAndTwoThreadsGiveIdenticalIdsAndLogits) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  GoldenCase gc("jfk");
  if (!gc.ok()) gc = GoldenCase(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  const std::vector<float> x = golden_input_values(gc);
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logits, speech;
  for (int threads : {1, 2}) {
    auto runner = make_cpu_runner(**ckpt, test_options(), threads);
    ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
    Runner& r = **runner;
    TensorCapture cap(r.backend());
    r.set_capture(cap.fn());
    auto s = r.encode(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    GreedyRequest q;
    q.prompt = gc.prompt_ids();
    q.speech = &s->rows.t;
    q.max_new_tokens = 32;
    auto out = r.generate_greedy(q);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    ids.push_back(*out);
    logits.push_back(captured(cap, "logits.last"));
    speech.push_back(captured(cap, "speech_embeds"));
  }
  EXPECT_EQ(ids[0], ids[1]);
  ASSERT_EQ(speech[0].size(), speech[1].size());
  EXPECT_EQ(std::memcmp(speech[0].data(), speech[1].data(), speech[0].size() * sizeof(float)), 0)
      << "speech rows differ between 1 and 2 threads";
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0)
      << "logits differ between 1 and 2 threads";
}

TEST(Runner, GenerationEndsAfterTheFirstStopToken) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_cpu_runner(**ckpt, test_options(), 2);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  DeviceTensor speech =
      alloc_f32((*runner)->backend(), gc.tensor("speech_embeds").rows(), (*ckpt)->spec().decoder.hidden_size);
  const GoldenTensor se = gc.tensor("speech_embeds");
  (*runner)->backend().upload(speech.buf.data(), se.data.data(), se.data.size() * sizeof(float));
  const auto& gold = gc.generated_ids();
  // The first id that differs from the first one: stopping on it ends generation there (when all
  // ids are equal, stopping on that id ends it after one token).
  size_t k = 1;
  while (k < gold.size() && gold[k] == gold[0]) ++k;
  if (k == gold.size()) k = 0;
  GreedyRequest q;
  q.prompt = gc.prompt_ids();
  q.speech = &speech.t;
  q.max_new_tokens = 32;
  q.stop = {gold[k]};
  auto out = (*runner)->generate_greedy(q);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, std::vector<int32_t>(gold.begin(), gold.begin() + static_cast<long>(k) + 1));
}

TEST(Runner, PoolTooSmallForTheRequestIsAnErrorAndLeaksNoBlocks) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  RunnerOptions opt = test_options();
  opt.kv_positions = 64;
  auto runner = make_cpu_runner(**ckpt, opt, 1);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  GreedyRequest q;
  q.prompt = std::vector<int32_t>(60, 1);
  q.max_new_tokens = 10;
  auto out = (*runner)->generate_greedy(q);
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*runner)->kv().free_blocks(), (*runner)->kv().num_blocks());
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

TEST(Runner, AudioTokenCountDifferentFromSpeechRowsIsRefused) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_cpu_runner(**ckpt, test_options(), 1);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  const int audio = (*ckpt)->spec().audio_token_id;
  DeviceTensor speech = alloc_f32((*runner)->backend(), 3, (*ckpt)->spec().decoder.hidden_size);
  GreedyRequest q;
  q.prompt = {1, audio, audio, 2};  // two pads, three rows
  q.speech = &speech.t;
  auto out = (*runner)->generate_greedy(q);
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("3 speech rows"), std::string::npos) << out.status().message();
  EXPECT_EQ((*runner)->kv().free_blocks(), (*runner)->kv().num_blocks());
}

}  // namespace
}  // namespace vv::test

namespace vv::test {
namespace {

TEST(Runner, KeepsWorkingAfterTheCheckpointIsClosed) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto runner = make_cpu_runner(**ckpt, test_options(), 1);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  ckpt = Result<std::unique_ptr<Checkpoint>>(not_found("closed"));  // unmaps the safetensors
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  const std::vector<float> x = golden_input_values(gc);
  auto speech = (*runner)->encode(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_TRUE(speech.is_ok()) << speech.status().to_string();
  GreedyRequest q;
  q.prompt = gc.prompt_ids();
  q.speech = &speech->rows.t;
  q.max_new_tokens = static_cast<int>(gc.generated_ids().size());
  auto ids = (*runner)->generate_greedy(q);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, gc.generated_ids());
}

}  // namespace
}  // namespace vv::test
