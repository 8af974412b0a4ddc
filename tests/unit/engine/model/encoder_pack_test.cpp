// The encoder packer (issue 13): the next segments of several clips in one encoder launch
// (ConvVaeEncoder::encode_segments, SpeechEmbedder::step over several jobs) against each clip
// encoded alone, and against the golden tensors.
//
// Exactness: packing changes no op's arithmetic on a row. The convolutions and mixers run per clip
// with its own carried rows; the norms, FFN GEMMs and connectors see more rows per call, and the
// CPU GEMM computes every output element in the same order whatever the row count
// (kernels/cpu/gemm_avx2.cpp), as do its row-wise norms and elementwise ops. So on the CPU a packed
// clip is bitwise the clip alone; these tests require exact equality (a GPU backend whose GEMM
// tiling depends on the row count would instead land within the golden README's float32 bounds,
// as each path does against the goldens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/model/conv_vae_encoder.h"
#include "engine/model/speech_embedder.h"
#include "kernels/forwarding_backend.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace vv::test {
namespace {

std::vector<float> clip_audio(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.05f);
  const double f0 = 120.0 + 37.0 * static_cast<double>(seed % 7);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 24000.0;
    x[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * f0 * t) * std::sin(2 * M_PI * 2.5 * t) +
                              0.1 * std::sin(2 * M_PI * 1330 * t)) +
           noise(rng);
  }
  return x;
}

// One clip of a packed test: its samples (zero-padded to a hop multiple), its segment length and
// sampling.
struct Clip {
  std::vector<float> x;
  int64_t segment = 0;
  SamplingOptions sampling;
};

// Clips of unequal lengths and segment lengths (in hops), each with a short final segment where its
// length is not a multiple of its segment: `count` of them, in an order that puts long and short
// clips side by side.
std::vector<Clip> make_clips(int hop, int count) {
  const int64_t hops[] = {23, 7, 41, 3, 16};
  const int64_t seg_hops[] = {5, 4, 8, 2, 16};
  std::vector<Clip> clips;
  for (int i = 0; i < count; ++i) {
    Clip c;
    c.x = clip_audio(hops[i] * hop, 100 + static_cast<uint64_t>(i));
    c.segment = seg_hops[i] * hop;
    if (i == 2) c.sampling = SamplingOptions{LatentSampling::kGaussian, 77};  // per-clip noise stream
    clips.push_back(std::move(c));
  }
  return clips;
}

// Encodes every clip packed: each launch takes the next segment of every clip not yet done.
// Returns each clip's latents (host) and the number of launches.
std::vector<std::vector<float>> encode_packed(Backend& be, ConvVaeEncoder& enc,
                                              const std::vector<Clip>& clips, int* launches) {
  const int hop = enc.hop();
  const int64_t dim = enc.spec().vae_dim;
  std::vector<std::unique_ptr<EncoderStream>> streams;
  std::vector<DeviceTensor> outs;
  std::vector<int64_t> done(clips.size(), 0);
  for (const Clip& c : clips) {
    streams.push_back(enc.start_stream(c.sampling));
    outs.push_back(alloc_f32(be, static_cast<int64_t>(c.x.size()) / hop, dim));
  }
  *launches = 0;
  while (true) {
    std::vector<SegmentRef> items;
    for (size_t i = 0; i < clips.size(); ++i) {
      const int64_t n = static_cast<int64_t>(clips[i].x.size());
      if (done[i] >= n) continue;
      const int64_t len = std::min(clips[i].segment, n - done[i]);
      items.push_back({streams[i].get(), clips[i].x.data() + done[i], len,
                       outs[i].t.row_slice(done[i] / hop, len / hop)});
      done[i] += len;
    }
    if (items.empty()) break;
    const Status s = enc.encode_segments(items);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (!s.is_ok()) return {};
    ++*launches;
  }
  std::vector<std::vector<float>> host;
  for (size_t i = 0; i < clips.size(); ++i) {
    host.push_back(download(be, outs[i].t));
    EXPECT_EQ(streams[i]->frames_out(), outs[i].t.rows()) << "clip " << i;
  }
  return host;
}

int64_t pack_budget(const std::vector<Clip>& clips) {
  int64_t sum = 0;
  for (const Clip& c : clips) sum += c.segment;
  return sum;
}

TEST(EncoderPack, PackedClipsAreBitwiseEachClipAloneForOneToFiveClips) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  const int hop = spec.acoustic.hop();
  for (const bool acoustic : {true, false}) {
    EncoderSpec es = acoustic ? spec.acoustic : spec.semantic;
    if (acoustic && es.fix_std == 0.f) es.fix_std = 0.5f;  // make the sampled clip's noise visible
    const EncoderWeights& w = acoustic ? (*ckpt)->weights().acoustic : (*ckpt)->weights().semantic;
    for (int count : {1, 2, 3, 5}) {
      std::vector<Clip> clips = make_clips(hop, count);
      if (!acoustic) {
        for (Clip& c : clips) c.sampling = {};  // the semantic path always uses the mean
      }
      int64_t max_seg = 0;
      for (const Clip& c : clips) max_seg = std::max(max_seg, c.segment);
      auto enc = ConvVaeEncoder::create(*be, es, w, max_seg, "enc", nullptr, pack_budget(clips));
      ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
      int launches = 0;
      const auto packed = encode_packed(*be, **enc, clips, &launches);
      ASSERT_EQ(packed.size(), clips.size());
      int64_t most = 0;
      for (const Clip& c : clips)
        most = std::max<int64_t>(most, (static_cast<int64_t>(c.x.size()) + c.segment - 1) / c.segment);
      EXPECT_EQ(launches, most) << "one launch per round of segments";
      for (size_t i = 0; i < clips.size(); ++i) {
        auto alone = (*enc)->encode(clips[i].x.data(), static_cast<int64_t>(clips[i].x.size()),
                                    clips[i].segment, clips[i].sampling);
        ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
        ASSERT_EQ(alone->size(), packed[i].size());
        EXPECT_EQ(std::memcmp(alone->data(), packed[i].data(), alone->size() * sizeof(float)), 0)
            << (acoustic ? "acoustic" : "semantic") << ", " << count << " clips: clip " << i
            << " differs, max|a-b| " << compare(packed[i].data(), alone->data(), alone->size()).max_abs_err;
      }
    }
  }
}

// A backend that takes Backend::conv_block (as a GPU backend with a whole-block kernel does) by running
// the CPU's mixer then its FFN, keeping u's last rows (the history) as conv_block promises. `every`:
// it declines each every-th call (0: never), so that a launch mixes fused clips with the fallback of
// the rest. Everything else goes to the CPU backend.
class BlockTaker final : public ForwardingBackend {
 public:
  BlockTaker(std::unique_ptr<Backend> inner, int every)
      : ForwardingBackend(std::move(inner)), every_(every) {}
  int taken = 0, declined = 0;

  bool conv_block(Tensor& x, float eps, const Tensor& history, const ConvBlockWeights& wt, Tensor& u,
                  Tensor& v, Tensor& h) override {
    if (every_ > 0 && ++calls_ % every_ == 0) {
      ++declined;
      return false;
    }
    ++taken;
    inner().conv_mixer(x, wt.norm_w, eps, history, wt.mixer_w, wt.mixer_b, wt.gamma, u, v);
    // The FFN may use u as scratch: u's last rows (host memory here) are put back after it.
    const int64_t keep = std::min<int64_t>(x.rows(), 6), C = x.cols();
    std::vector<float> last(static_cast<size_t>(keep * C));
    for (int64_t r = 0; r < keep; ++r)
      std::memcpy(last.data() + r * C, u.ptr<float>() + (x.rows() - keep + r) * u.row_stride(),
                  C * sizeof(float));
    inner().conv_ffn(x, wt.ffn_norm_w, eps, wt.w1, wt.b1, wt.w2, wt.b2, wt.ffn_gamma, u, v, h);
    for (int64_t r = 0; r < keep; ++r)
      std::memcpy(u.ptr<float>() + (x.rows() - keep + r) * u.row_stride(), last.data() + r * C,
                  C * sizeof(float));
    return true;
  }

 private:
  int every_ = 0;
  int calls_ = 0;
};

// The encoder's conv_block path (ConvVaeEncoder::run_block: each clip's block as one op, its history
// carried after it; the clips a backend declines run the mixer and the FFN on their own rows) gives
// the bits of the op sequence, for every clip of every launch: with every block taken, and with every
// third declined (launches that mix the two).
TEST(EncoderPack, WholeBlockPathGivesTheOpSequencesBits) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto plain = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  const int hop = spec.acoustic.hop();
  std::vector<Clip> clips = make_clips(hop, 5);
  int64_t max_seg = 0;
  for (const Clip& c : clips) max_seg = std::max(max_seg, c.segment);
  auto ref_enc = ConvVaeEncoder::create(*plain, spec.acoustic, (*ckpt)->weights().acoustic, max_seg, "ref",
                                        nullptr, pack_budget(clips));
  ASSERT_TRUE(ref_enc.is_ok()) << ref_enc.status().to_string();
  int launches = 0;
  const auto want = encode_packed(*plain, **ref_enc, clips, &launches);
  for (const int every : {0, 3}) {
    BlockTaker taker(cpu_backend(), every);
    auto enc = ConvVaeEncoder::create(taker, spec.acoustic, (*ckpt)->weights().acoustic, max_seg, "blocks",
                                      nullptr, pack_budget(clips));
    ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
    const auto got = encode_packed(taker, **enc, clips, &launches);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GT(taker.taken, 0);
    if (every > 0) {
      EXPECT_GT(taker.declined, 0);
    }
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
          << "declining every " << every << ": clip " << i << " differs, max|a-b| "
          << compare(got[i].data(), want[i].data(), got[i].size()).max_abs_err;
    }
  }
}

TEST(EncoderPack, GoldenClipPackedBesideOthersMatchesGoldenLatents) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const ModelSpec& spec = (*ckpt)->spec();
  const int hop = spec.acoustic.hop();
  int checked = 0;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    if (!gc.has("input_values")) continue;
    std::vector<Clip> clips = make_clips(hop, 3);
    for (Clip& c : clips) c.sampling = {};
    Clip golden;
    golden.x = gc.tensor("input_values").data;
    golden.x.resize((golden.x.size() + hop - 1) / hop * hop, 0.f);
    golden.segment = static_cast<int64_t>(hop) * 6;  // several segments, the last one short
    clips.insert(clips.begin() + 1, golden);
    for (const bool acoustic : {true, false}) {
      const EncoderSpec& es = acoustic ? spec.acoustic : spec.semantic;
      const EncoderWeights& w = acoustic ? (*ckpt)->weights().acoustic : (*ckpt)->weights().semantic;
      auto enc = ConvVaeEncoder::create(*be, es, w, hop * 16, "enc", nullptr, pack_budget(clips));
      ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
      int launches = 0;
      const auto packed = encode_packed(*be, **enc, clips, &launches);
      ASSERT_EQ(packed.size(), clips.size());
      const char* key = acoustic ? "acoustic.latents" : "semantic.latents";
      expect_end_to_end(name + " " + key + " packed with 3 other clips", packed[1], gc.tensor(key));
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no golden case has input_values";
}

TEST(EncoderPack, LaunchesBeyondTheWorkspaceOrWithAClipTwiceAreRefused) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend(1);
  const EncoderSpec& spec = (*ckpt)->spec().acoustic;
  const int hop = spec.hop();
  auto enc =
      ConvVaeEncoder::create(*be, spec, (*ckpt)->weights().acoustic, hop * 4, "acoustic", nullptr, hop * 6);
  ASSERT_TRUE(enc.is_ok()) << enc.status().to_string();
  EXPECT_EQ((*enc)->max_pack(), hop * 6);
  std::vector<float> x(static_cast<size_t>(hop) * 8, 0.25f);
  DeviceTensor o1 = alloc_f32(*be, 4, spec.vae_dim), o2 = alloc_f32(*be, 4, spec.vae_dim);
  auto s1 = (*enc)->start_stream(), s2 = (*enc)->start_stream();
  std::vector<SegmentRef> over = {{s1.get(), x.data(), hop * 4, o1.t}, {s2.get(), x.data(), hop * 4, o2.t}};
  Status st = (*enc)->encode_segments(over);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(std::to_string(hop * 8)), std::string::npos) << st.message();
  EXPECT_EQ(s1->frames_out(), 0) << "nothing ran";
  std::vector<SegmentRef> twice = {{s1.get(), x.data(), hop, o1.t.row_slice(0, 1)},
                                   {s1.get(), x.data(), hop, o2.t.row_slice(0, 1)}};
  EXPECT_FALSE((*enc)->encode_segments(twice).is_ok());
  std::vector<SegmentRef> odd = {{s1.get(), x.data(), hop + 1, o1.t.row_slice(0, 1)}};
  EXPECT_FALSE((*enc)->encode_segments(odd).is_ok());
  // The pack budget is never below the segment: 0 (and anything less) means one segment.
  auto small =
      ConvVaeEncoder::create(*be, spec, (*ckpt)->weights().acoustic, hop * 4, "acoustic", nullptr, hop);
  ASSERT_TRUE(small.is_ok());
  EXPECT_EQ((*small)->max_pack(), hop * 4);
}

// Jobs of unequal lengths and segments through SpeechEmbedder::step over several jobs, one launch
// per round, against each clip embedded alone.
TEST(EncoderPack, SpeechEmbedderStepOverSeveralJobsIsBitwiseEachJobAlone) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const int hop = (*ckpt)->spec().acoustic.hop();
  for (int count : {1, 2, 3, 5}) {
    std::vector<Clip> clips = make_clips(hop, count);
    // Unpadded lengths: the job pads each clip's last segment with zeros itself.
    for (size_t i = 0; i < clips.size(); ++i) clips[i].x.resize(clips[i].x.size() - (i % 2 ? 0 : 1234));
    auto emb = SpeechEmbedder::create(*be, (*ckpt)->spec(), (*ckpt)->weights(), hop * 16, pack_budget(clips));
    ASSERT_TRUE(emb.is_ok()) << emb.status().to_string();
    std::vector<std::unique_ptr<SpeechJob>> jobs;
    for (const Clip& c : clips) {
      auto j =
          (*emb)->start(c.x.data(), static_cast<int64_t>(c.x.size()), EncodeOptions{c.segment, c.sampling});
      ASSERT_TRUE(j.is_ok()) << j.status().to_string();
      jobs.push_back(std::move(j).value());
    }
    std::vector<SpeechJob*> ptrs;
    for (auto& j : jobs) ptrs.push_back(j.get());
    int steps = 0;
    auto all_done = [&] {
      return std::all_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->done(); });
    };
    while (!all_done()) {
      ASSERT_TRUE((*emb)->step(ptrs).is_ok());
      ++steps;
    }
    int64_t most = 0;
    for (const Clip& c : clips)
      most = std::max<int64_t>(
          most, ((static_cast<int64_t>(c.x.size()) + hop - 1) / hop * hop + c.segment - 1) / c.segment);
    EXPECT_EQ(steps, most);
    for (size_t i = 0; i < clips.size(); ++i) {
      SpeechRows packed = jobs[i]->take();
      auto alone = (*emb)->embed(clips[i].x.data(), static_cast<int64_t>(clips[i].x.size()),
                                 EncodeOptions{clips[i].segment, clips[i].sampling});
      ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
      const std::vector<float> a = download(*be, alone->rows.t), p = download(*be, packed.rows.t);
      ASSERT_EQ(a.size(), p.size());
      EXPECT_EQ(std::memcmp(a.data(), p.data(), a.size() * sizeof(float)), 0)
          << count << " jobs: job " << i << " differs, max|a-b| "
          << compare(p.data(), a.data(), a.size()).max_abs_err;
    }
  }
}

TEST(EncoderPack, SpeechEmbedderPackedGoldenJobMatchesGoldenSpeechEmbeds) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend();
  const int hop = (*ckpt)->spec().acoustic.hop();
  int checked = 0;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    if (!gc.has("input_values")) continue;
    const std::vector<float> x = gc.tensor("input_values").data;
    std::vector<Clip> others = make_clips(hop, 2);
    auto emb = SpeechEmbedder::create(*be, (*ckpt)->spec(), (*ckpt)->weights(), hop * 16, hop * 32);
    ASSERT_TRUE(emb.is_ok()) << emb.status().to_string();
    auto g = (*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 10, {}});
    auto a = (*emb)->start(others[0].x.data(), static_cast<int64_t>(others[0].x.size()),
                           EncodeOptions{hop * 5, {}});
    auto b = (*emb)->start(others[1].x.data(), static_cast<int64_t>(others[1].x.size()),
                           EncodeOptions{hop * 4, {}});
    ASSERT_TRUE(g.is_ok() && a.is_ok() && b.is_ok());
    std::vector<SpeechJob*> jobs = {a->get(), g->get(), b->get()};
    while (!(*g)->done()) ASSERT_TRUE((*emb)->step(jobs).is_ok());
    SpeechRows rows = (*g)->take();
    expect_end_to_end(name + " speech_embeds packed with 2 other jobs", download(*be, rows.rows.t),
                      gc.tensor("speech_embeds"));
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(EncoderPack, SpeechEmbedderStepBeyondItsBudgetIsRefusedBeforeAnythingRuns) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  auto be = cpu_backend(1);
  const int hop = (*ckpt)->spec().acoustic.hop();
  auto emb = SpeechEmbedder::create(*be, (*ckpt)->spec(), (*ckpt)->weights(), hop * 4, hop * 6);
  ASSERT_TRUE(emb.is_ok()) << emb.status().to_string();
  EXPECT_EQ((*emb)->max_pack(), hop * 6);
  std::vector<float> x(static_cast<size_t>(hop) * 8, 0.1f);
  auto a = (*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 4, {}});
  auto b = (*emb)->start(x.data(), static_cast<int64_t>(x.size()), EncodeOptions{hop * 4, {}});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ((*a)->next_samples(), hop * 4);
  std::vector<SpeechJob*> both = {a->get(), b->get()};
  EXPECT_FALSE((*emb)->step(both).is_ok());
  EXPECT_EQ((*a)->frames_done(), 0);
  EXPECT_EQ((*b)->frames_done(), 0);
  std::vector<SpeechJob*> twice = {a->get(), a->get()};
  EXPECT_FALSE((*emb)->step(twice).is_ok());
  // One job alone fits.
  ASSERT_TRUE((*emb)->step(std::span<SpeechJob* const>(both.data(), 1)).is_ok());
  EXPECT_EQ((*a)->frames_done(), 4);
}

}  // namespace
}  // namespace vv::test
