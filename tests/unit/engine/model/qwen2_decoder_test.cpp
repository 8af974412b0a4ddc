// The Qwen2 decoder against the golden tensors: every layer fed the golden hidden state, the
// whole decoder from the golden inputs_embeds, speech rows placed by the embedding step, chunked
// prefill through a paged cache, and rows of several sequences in one step.
#include "engine/model/qwen2_decoder.h"

#include <gtest/gtest.h>

#include "kernels/forwarding_backend.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace vv::test {
namespace {

struct DecoderBench {
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Qwen2Decoder> dec;
};

DecoderBench make_decoder(const std::string& layout, int max_rows = 1024, int threads = 2) {
  DecoderBench b;
  auto ckpt = open_layout(layout);
  EXPECT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  if (!ckpt.is_ok()) return b;
  b.ckpt = std::move(ckpt).value();
  b.be = cpu_backend(threads);
  DecoderOptions opt;
  opt.max_rows = max_rows;
  opt.max_seqs = 8;
  auto dec = Qwen2Decoder::create(*b.be, b.ckpt->spec(), b.ckpt->weights().decoder, opt);
  EXPECT_TRUE(dec.is_ok()) << dec.status().to_string();
  if (dec.is_ok()) b.dec = std::move(dec).value();
  return b;
}

StepPlan one_sequence(const std::vector<int32_t>& ids, int64_t start, int64_t positions, const Tensor* speech,
                      int64_t speech_begin, int block_size = 16) {
  SequenceRows s;
  s.ids = ids;
  s.start_pos = start;
  s.blocks = reversed_blocks((positions + block_size - 1) / block_size);
  s.speech = speech;
  s.speech_begin = speech_begin;
  StepPlan p;
  p.seqs.push_back(std::move(s));
  p.return_logits = true;
  return p;
}

class DecoderGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderGolden, EachLayerFedGoldenHiddenMatchesTheNextHidden) {
  DecoderBench b = make_decoder(GetParam());
  ASSERT_TRUE(b.dec);
  const int L = b.ckpt->spec().decoder.num_layers;
  int checked = 0;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    const int64_t T = static_cast<int64_t>(gc.prompt_ids().size());
    for (int i = 0; i <= L; ++i) {
      const std::string in = "hidden." + std::to_string(i);
      const std::string want = i < L ? "hidden." + std::to_string(i + 1) : "hidden.norm";
      if (!gc.has(in) || !gc.has(want)) continue;
      TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
      DeviceTensor h = upload_golden(*b.be, gc.tensor(in));
      TensorCapture cap(*b.be);
      b.dec->set_capture(cap.fn());
      auto out = b.dec->forward_from(one_sequence(gc.prompt_ids(), 0, T, nullptr, 0), kv.view, h.t, i);
      b.dec->set_capture(nullptr);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      expect_fed_golden(name + " " + want + " fed " + in + " (" + GetParam() + ")", captured(cap, want), gc.tensor(want));
      if (i == L) {
        expect_fed_golden(name + " logits.last fed " + in, captured(cap, "logits.last"), gc.tensor("logits.last"));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, L) << "too few golden layer pairs";
}

TEST_P(DecoderGolden, WholeDecoderFromGoldenEmbedsMatchesEveryStage) {
  DecoderBench b = make_decoder(GetParam());
  ASSERT_TRUE(b.dec);
  const int L = b.ckpt->spec().decoder.num_layers;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    const int64_t T = static_cast<int64_t>(gc.prompt_ids().size());
    TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
    DeviceTensor h = upload_golden(*b.be, gc.tensor("inputs_embeds"));
    TensorCapture cap(*b.be);
    b.dec->set_capture(cap.fn());
    auto out = b.dec->forward_from(one_sequence(gc.prompt_ids(), 0, T, nullptr, 0), kv.view, h.t, 0);
    b.dec->set_capture(nullptr);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    for (int i = 1; i <= L; ++i) {
      const std::string n = "hidden." + std::to_string(i);
      if (gc.has(n)) expect_end_to_end(name + " " + n, captured(cap, n), gc.tensor(n));
    }
    expect_end_to_end(name + " hidden.norm", captured(cap, "hidden.norm"), gc.tensor("hidden.norm"));
    expect_end_to_end(name + " logits.last", captured(cap, "logits.last"), gc.tensor("logits.last"));
    EXPECT_EQ(out->next[0], gc.generated_ids()[0]) << name << ": first greedy id";
  }
}

TEST_P(DecoderGolden, PromptIdsWithGoldenSpeechRowsGiveGoldenInputsEmbeds) {
  DecoderBench b = make_decoder(GetParam());
  ASSERT_TRUE(b.dec);
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    const int64_t T = static_cast<int64_t>(gc.prompt_ids().size());
    TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
    DeviceTensor speech = upload_golden(*b.be, gc.tensor("speech_embeds"));
    TensorCapture cap(*b.be);
    b.dec->set_capture(cap.fn());
    auto out = b.dec->forward(one_sequence(gc.prompt_ids(), 0, T, &speech.t, 0), kv.view);
    b.dec->set_capture(nullptr);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    const GoldenTensor ref = gc.tensor("inputs_embeds");
    const std::vector<float> got = captured(cap, "inputs_embeds");
    ASSERT_EQ(got.size(), ref.data.size());
    EXPECT_EQ(compare(got.data(), ref.data.data(), got.size()).max_abs_err, 0.0) << name << ": rows are copies";
    expect_end_to_end(name + " logits.last", captured(cap, "logits.last"), gc.tensor("logits.last"));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DecoderGolden, ::testing::Values("hf", "orig"));

TEST(Qwen2Decoder, ChunkedPrefillMatchesOneShotPrefill) {
  DecoderBench b = make_decoder("hf");
  ASSERT_TRUE(b.dec);
  GoldenCase gc(golden_cases().front());
  ASSERT_TRUE(gc.ok()) << gc.error();
  const auto& ids = gc.prompt_ids();
  const int64_t T = static_cast<int64_t>(ids.size());
  DeviceTensor speech = upload_golden(*b.be, gc.tensor("speech_embeds"));
  TestKv kv1 = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
  auto one = b.dec->forward(one_sequence(ids, 0, T, &speech.t, 0), kv1.view);
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  TestKv kv2 = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
  const int64_t chunk = 7;  // splits the speech placeholders across chunks
  int64_t speech_used = 0;
  StepOutput last;
  for (int64_t p = 0; p < T; p += chunk) {
    const int64_t n = std::min(chunk, T - p);
    std::vector<int32_t> part(ids.begin() + p, ids.begin() + p + n);
    StepPlan plan = one_sequence(part, p, T, &speech.t, speech_used);
    plan.seqs[0].want_output = p + n == T;
    auto r = b.dec->forward(plan, kv2.view);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    speech_used += std::count(part.begin(), part.end(), b.ckpt->spec().audio_token_id);
    last = *r;
  }
  EXPECT_EQ(last.next[0], one->next[0]);
  const Diff d = compare(last.logits[0].data(), one->logits[0].data(), one->logits[0].size());
  EXPECT_LE(d.rel_l2, 1e-6);
}

TEST(Qwen2Decoder, RowsOfSeveralSequencesInOneStepMatchEachAlone) {
  DecoderBench b = make_decoder("hf");
  ASSERT_TRUE(b.dec);
  const auto cases = golden_cases();
  std::vector<GoldenCase> gcs;
  for (size_t i = 0; i < cases.size() && gcs.size() < 3; ++i) {
    if (cases[i] == "long") continue;
    gcs.emplace_back(cases[i]);
    ASSERT_TRUE(gcs.back().ok());
  }
  std::vector<DeviceTensor> speech;
  int64_t total = 0;
  for (auto& gc : gcs) {
    speech.push_back(upload_golden(*b.be, gc.tensor("speech_embeds")));
    total += static_cast<int64_t>(gc.prompt_ids().size());
  }
  // Alone: each sequence in its own pool.
  std::vector<StepOutput> alone;
  for (size_t i = 0; i < gcs.size(); ++i) {
    const int64_t T = static_cast<int64_t>(gcs[i].prompt_ids().size());
    TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, T);
    auto r = b.dec->forward(one_sequence(gcs[i].prompt_ids(), 0, T, &speech[i].t, 0), kv.view);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    alone.push_back(*r);
  }
  // Together: one pool, disjoint block tables, one step.
  TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, total + 16 * static_cast<int64_t>(gcs.size()));
  StepPlan plan;
  plan.return_logits = true;
  BlockId next_block = 0;
  for (size_t i = 0; i < gcs.size(); ++i) {
    SequenceRows s;
    s.ids = gcs[i].prompt_ids();
    const int64_t blocks = (static_cast<int64_t>(s.ids.size()) + 15) / 16;
    for (int64_t k = 0; k < blocks; ++k) s.blocks.push_back(next_block++);
    s.speech = &speech[i].t;
    plan.seqs.push_back(std::move(s));
  }
  auto together = b.dec->forward(plan, kv.view);
  ASSERT_TRUE(together.is_ok()) << together.status().to_string();
  for (size_t i = 0; i < gcs.size(); ++i) {
    EXPECT_EQ(together->next[i], alone[i].next[0]) << gcs[i].name();
    const Diff d = compare(together->logits[i].data(), alone[i].logits[0].data(), alone[i].logits[0].size());
    EXPECT_LE(d.rel_l2, 1e-6) << gcs[i].name();
  }
}

// A decode step (one row per sequence: the block-table width is rounded up for it) gives each
// sequence the ids and logits of its own decode step alone, and logits only to the rows that ask.
TEST(Qwen2Decoder, DecodeRowsOfSeveralSequencesMatchEachAloneAndReturnLogitsOnlyWhereAsked) {
  DecoderBench b = make_decoder("hf");
  ASSERT_TRUE(b.dec);
  const auto cases = golden_cases();
  std::vector<GoldenCase> gcs;
  for (size_t i = 0; i < cases.size() && gcs.size() < 3; ++i) {
    if (cases[i] == "long") continue;
    gcs.emplace_back(cases[i]);
    ASSERT_TRUE(gcs.back().ok());
  }
  ASSERT_GE(gcs.size(), 2u);
  std::vector<DeviceTensor> speech;
  for (auto& gc : gcs) speech.push_back(upload_golden(*b.be, gc.tensor("speech_embeds")));
  // Alone: prefill, then one decode row, each sequence in its own pool.
  std::vector<TokenId> first;
  std::vector<StepOutput> alone;
  for (size_t i = 0; i < gcs.size(); ++i) {
    const int64_t T = static_cast<int64_t>(gcs[i].prompt_ids().size());
    TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, T + 1);
    auto pre = b.dec->forward(one_sequence(gcs[i].prompt_ids(), 0, T + 1, &speech[i].t, 0), kv.view);
    ASSERT_TRUE(pre.is_ok()) << pre.status().to_string();
    first.push_back(pre->next[0]);
    auto dec = b.dec->forward(one_sequence({pre->next[0]}, T, T + 1, nullptr, 0), kv.view);
    ASSERT_TRUE(dec.is_ok()) << dec.status().to_string();
    alone.push_back(*dec);
  }
  // Together: one pool, disjoint block tables; a prefill step, then a decode step in which only
  // the second sequence asks for logits.
  int64_t total = 0;
  for (auto& gc : gcs) total += static_cast<int64_t>(gc.prompt_ids().size()) + 16;
  TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, total);
  StepPlan pre;
  BlockId next_block = 0;
  for (size_t i = 0; i < gcs.size(); ++i) {
    SequenceRows s;
    s.ids = gcs[i].prompt_ids();
    const int64_t blocks = (static_cast<int64_t>(s.ids.size()) + 1 + 15) / 16;
    for (int64_t k = 0; k < blocks; ++k) s.blocks.push_back(next_block++);
    s.speech = &speech[i].t;
    pre.seqs.push_back(std::move(s));
  }
  auto p = b.dec->forward(pre, kv.view);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  StepPlan step;
  for (size_t i = 0; i < gcs.size(); ++i) {
    EXPECT_EQ(p->next[i], first[i]) << gcs[i].name();
    EXPECT_TRUE(p->logits[i].empty()) << gcs[i].name() << ": logits nobody asked for";
    SequenceRows s;
    s.ids = {p->next[i]};
    s.start_pos = static_cast<int64_t>(gcs[i].prompt_ids().size());
    s.blocks = pre.seqs[i].blocks;
    s.want_logits = i == 1;
    step.seqs.push_back(std::move(s));
  }
  auto d = b.dec->forward(step, kv.view);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  for (size_t i = 0; i < gcs.size(); ++i) {
    EXPECT_EQ(d->next[i], alone[i].next[0]) << gcs[i].name();
    if (i != 1) {
      EXPECT_TRUE(d->logits[i].empty()) << gcs[i].name() << ": logits nobody asked for";
      continue;
    }
    ASSERT_EQ(d->logits[i].size(), alone[i].logits[0].size()) << gcs[i].name();
    const Diff diff = compare(d->logits[i].data(), alone[i].logits[0].data(), alone[i].logits[0].size());
    EXPECT_LE(diff.rel_l2, 1e-6) << gcs[i].name();
  }
}

// The decoder tells the backend when every sequence of a step has exactly one row
// (AttentionRows::one_row_per_seq, which lets a backend write the rows' k/v inside the attention): a
// decode step of several sequences, or of one, does; a prompt (several rows of one sequence) and a step
// mixing a prompt chunk with a decode row do not.
class AttentionRowsLog final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache,
                       const AttentionShape& shape, Tensor& out) override {
    seen.push_back(rows.one_row_per_seq);
    ForwardingBackend::paged_attention(q, rows, cache, shape, out);
  }
  std::vector<bool> seen;
};

TEST(Qwen2Decoder, TellsTheBackendWhenEverySequenceHasOneRow) {
  auto ckpt = open_layout("hf");
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto log = std::make_unique<AttentionRowsLog>(cpu_backend(2));
  AttentionRowsLog& be = *log;
  DecoderOptions opt;
  opt.max_rows = 64;
  opt.max_seqs = 4;
  auto dec = Qwen2Decoder::create(be, (*ckpt)->spec(), (*ckpt)->weights().decoder, opt);
  ASSERT_TRUE(dec.is_ok()) << dec.status().to_string();
  const int layers = (*ckpt)->spec().decoder.num_layers;
  TestKv kv = make_test_kv(be, (*ckpt)->spec().decoder, 4 * 32);
  auto seq = [](std::vector<int32_t> ids, int64_t start, std::vector<BlockId> blocks) {
    SequenceRows s;
    s.ids = std::move(ids);
    s.start_pos = start;
    s.blocks = std::move(blocks);
    return s;
  };
  struct Step {
    const char* what;
    std::vector<SequenceRows> seqs;
    bool one_row_per_seq;
  };
  const std::vector<Step> steps = {
      {"a prompt of one sequence", {seq({1, 2, 3, 4, 5}, 0, {0, 1})}, false},
      {"a second prompt", {seq({6, 7, 8}, 0, {2, 3})}, false},
      {"one decode row", {seq({9}, 5, {0, 1})}, true},
      {"a decode row of each of two sequences", {seq({10}, 6, {0, 1}), seq({11}, 3, {2, 3})}, true},
      {"a prompt chunk beside a decode row", {seq({12}, 7, {0, 1}), seq({13, 14}, 4, {2, 3})}, false},
      {"a third sequence's prompt beside two decode rows",
       {seq({15}, 8, {0, 1}), seq({16}, 6, {2, 3}), seq({1, 2}, 0, {4, 5})},
       false}};
  for (const Step& st : steps) {
    be.seen.clear();
    StepPlan plan;
    plan.seqs = st.seqs;
    auto r = (*dec)->forward(plan, kv.view);
    ASSERT_TRUE(r.is_ok()) << st.what << ": " << r.status().to_string();
    ASSERT_EQ(be.seen.size(), static_cast<size_t>(layers)) << st.what;
    for (bool b : be.seen) EXPECT_EQ(b, st.one_row_per_seq) << st.what;
  }
}

TEST(Qwen2Decoder, AudioRowsWithoutSpeechRowsAreRefused) {
  DecoderBench b = make_decoder("hf");
  ASSERT_TRUE(b.dec);
  const int audio = b.ckpt->spec().audio_token_id;
  TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, 16);
  auto r = b.dec->forward(one_sequence({1, audio, audio, 2}, 0, 4, nullptr, 0), kv.view);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("speech rows"), std::string::npos) << r.status().message();
}

TEST(Qwen2Decoder, BlockTableTooShortIsRefused) {
  DecoderBench b = make_decoder("hf");
  ASSERT_TRUE(b.dec);
  TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, 64);
  StepPlan p = one_sequence(std::vector<int32_t>(20, 1), 0, 16, nullptr, 0);  // one block for 20 positions
  auto r = b.dec->forward(p, kv.view);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(Qwen2Decoder, TooManyRowsForTheWorkspaceAreRefused) {
  DecoderBench b = make_decoder("hf", /*max_rows=*/8);
  ASSERT_TRUE(b.dec);
  TestKv kv = make_test_kv(*b.be, b.ckpt->spec().decoder, 64);
  auto r = b.dec->forward(one_sequence(std::vector<int32_t>(9, 1), 0, 9, nullptr, 0), kv.view);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace vv::test
