// A seeded random model whose shapes share nothing with the tiny golden model (other ratios and
// depths per encoder, odd channel counts, head_dim from hidden/heads, GQA group 2, untied LM head,
// small vocabulary): the paths that must agree do agree — segmented vs one-pass encoding, chunked
// vs one-shot prefill, a batch vs each request alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/runner/cpu_runner.h"
#include "engine/runner/runner.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {
namespace {

ModelSpec other_spec() {
  ModelSpec s = tiny_spec();
  auto enc = [](int nf, std::vector<int> ratios, std::vector<int> depths, int vae) {
    EncoderSpec e;
    e.num_filters = nf;
    e.ratios = std::move(ratios);
    e.depths = std::move(depths);
    e.vae_dim = vae;
    e.kernel_size = 5;
    e.ffn_expansion = 3;
    e.std_dist_type = "none";
    return e;
  };
  s.acoustic = enc(3, {2, 4, 5}, {1, 2, 1, 1}, 8);
  s.semantic = enc(4, {5, 2, 4}, {2, 1, 1, 2}, 6);
  s.chunk_size = 40 * 16;
  DecoderSpec& d = s.decoder;
  d.vocab_size = 1000;
  d.hidden_size = 40;
  d.intermediate_size = 72;
  d.num_layers = 2;
  d.num_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 10;
  d.rope_theta = 10000;
  d.tie_word_embeddings = false;
  d.max_position_embeddings = 4096;
  s.audio_token_id = 997;
  s.audio_bos_token_id = 995;
  s.audio_eos_token_id = 996;
  return s;
}

std::vector<float> noise_audio(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 0.2f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  return x;
}

std::vector<int32_t> prompt_with_audio(const ModelSpec& s, int64_t frames, uint64_t seed, int text) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 990);
  std::vector<int32_t> p;
  for (int i = 0; i < text; ++i) p.push_back(id(rng));
  p.push_back(s.audio_bos_token_id);
  for (int64_t f = 0; f < frames; ++f) p.push_back(s.audio_token_id);
  p.push_back(s.audio_eos_token_id);
  for (int i = 0; i < text; ++i) p.push_back(id(rng));
  return p;
}

TEST(OtherShapes, RandomModelPathsAgreeAtShapesUnlikeTiny) {
  const ModelSpec spec = other_spec();
  auto ckpt = Checkpoint::random(spec, 99, DType::kBF16);
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  ASSERT_FALSE((*ckpt)->lm_head_tied());
  const int hop = 40;
  ASSERT_EQ((*ckpt)->spec().acoustic.hop(), hop);

  RunnerOptions one_shot;
  one_shot.kv_positions = 2048;
  one_shot.max_rows = 256;
  one_shot.prefill_chunk = 256;
  one_shot.encoder_segment = hop * 64;
  RunnerOptions chunked = one_shot;
  chunked.prefill_chunk = 7;
  chunked.max_rows = 20;
  auto ra = make_cpu_runner(**ckpt, one_shot, 2);
  auto rb = make_cpu_runner(**ckpt, chunked, 1);
  ASSERT_TRUE(ra.is_ok()) << ra.status().to_string();
  ASSERT_TRUE(rb.is_ok()) << rb.status().to_string();

  std::vector<SpeechRows> speech_a, speech_b;
  std::vector<GreedyRequest> reqs_a, reqs_b;
  for (int i = 0; i < 3; ++i) {
    const int64_t n = hop * (20 + 9 * i) - 13 * i;  // not all hop multiples
    const std::vector<float> x = noise_audio(n, 5 + i);
    auto sa = (*ra)->encode(x.data(), n);                                   // one segment
    auto sb = (*rb)->encode(x.data(), n, EncodeOptions{hop * 3, {}});       // segments of 3 frames
    ASSERT_TRUE(sa.is_ok() && sb.is_ok());
    ASSERT_EQ(sa->frames(), (n + hop - 1) / hop);
    auto ha = std::vector<float>(static_cast<size_t>(sa->frames() * spec.decoder.hidden_size));
    auto hb = ha;
    (*ra)->backend().download(ha.data(), sa->rows.buf.data(), ha.size() * sizeof(float));
    (*rb)->backend().download(hb.data(), sb->rows.buf.data(), hb.size() * sizeof(float));
    const Diff d = compare(hb.data(), ha.data(), ha.size());
    EXPECT_LE(d.rel_l2, 1e-6) << "segmented vs one-pass speech rows, request " << i;
    speech_a.push_back(std::move(sa).value());
    speech_b.push_back(std::move(sb).value());
    GreedyRequest q;
    q.prompt = prompt_with_audio(spec, speech_a.back().frames(), 17 + i, 9 + i);
    q.max_new_tokens = 12 + 3 * i;
    reqs_a.push_back(q);
    reqs_b.push_back(q);
  }
  for (int i = 0; i < 3; ++i) {
    reqs_a[i].speech = &speech_a[i].rows.t;
    reqs_b[i].speech = &speech_b[i].rows.t;
  }
  auto batch = (*rb)->generate_greedy(reqs_b);  // chunked prefill, rows of three sequences per step
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  for (int i = 0; i < 3; ++i) {
    auto alone = (*ra)->generate_greedy(reqs_a[i]);  // one-shot prefill, alone
    ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
    EXPECT_EQ((*batch)[i], *alone) << "request " << i;
    EXPECT_EQ(alone->size(), static_cast<size_t>(reqs_a[i].max_new_tokens));
  }
}

// consume_weights drops each host weight's pages as soon as it is on the device: the bound model
// must be the same as one bound from an untouched copy (nothing read after it was dropped).
TEST(OtherShapes, ConsumingTheCheckpointBindsTheSameModel) {
  const ModelSpec spec = other_spec();
  auto keep = Checkpoint::random(spec, 7, DType::kBF16);
  auto eat = Checkpoint::random(spec, 7, DType::kBF16);
  ASSERT_TRUE(keep.is_ok() && eat.is_ok());
  RunnerOptions opt;
  opt.kv_positions = 1024;
  opt.encoder_segment = 40 * 64;
  auto ra = make_cpu_runner(**keep, opt, 1);
  opt.consume_weights = true;
  auto rb = make_cpu_runner(**eat, opt, 1);
  ASSERT_TRUE(ra.is_ok() && rb.is_ok());
  const int64_t n = 40 * 31 - 5;
  const std::vector<float> x = noise_audio(n, 3);
  auto sa = (*ra)->encode(x.data(), n);
  auto sb = (*rb)->encode(x.data(), n);
  ASSERT_TRUE(sa.is_ok() && sb.is_ok());
  const int64_t h = spec.decoder.hidden_size;
  std::vector<float> ha(static_cast<size_t>(sa->frames() * h)), hb(ha.size());
  (*ra)->backend().download(ha.data(), sa->rows.t.data, ha.size() * sizeof(float));
  (*rb)->backend().download(hb.data(), sb->rows.t.data, hb.size() * sizeof(float));
  EXPECT_EQ(ha, hb);
  GreedyRequest qa{prompt_with_audio(spec, sa->frames(), 11, 9), &sa->rows.t, 12, {}};
  GreedyRequest qb{prompt_with_audio(spec, sb->frames(), 11, 9), &sb->rows.t, 12, {}};
  auto ia = (*ra)->generate_greedy(qa);
  auto ib = (*rb)->generate_greedy(qb);
  ASSERT_TRUE(ia.is_ok() && ib.is_ok());
  EXPECT_EQ(ia->size(), 12u);
  EXPECT_EQ(*ia, *ib);
}

}  // namespace
}  // namespace vv::test
