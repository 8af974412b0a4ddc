// Layer streaming on the CPU (--gpu-layers): the same code path as on a GPU, with the CPU
// backend's copy (memcpy) in place of the async host-to-device copy. Every resident-layer count
// gives ids identical to all-resident for every golden case; the streamed bytes are what the plan
// says; the streamed layers' device memory is two slots, not the layers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/runner.h"
#include "kernels/device/backend_factory.h"
#include "tests/unit/engine/model/golden_fixture.h"
#include "tests/unit/engine/runner/golden_input.h"

namespace vv::test {
namespace {

RunnerOptions stream_options(int gpu_layers) {
  RunnerOptions o;
  o.kv_positions = 4096;
  o.max_rows = 512;
  o.max_seqs = 8;
  o.prefill_chunk = 100;
  o.gpu_layers = gpu_layers;
  return o;
}

struct CaseRun {
  std::vector<TokenId> ids;
  int64_t steps = 0;  // decoder steps the request took
};

CaseRun run_case(Runner& r, const GoldenCase& gc) {
  CaseRun out;
  const std::vector<float> x = golden_input_values(gc);
  EXPECT_FALSE(x.empty()) << gc.name();
  auto speech = r.encode(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(speech.is_ok()) << speech.status().to_string();
  if (!speech.is_ok()) return out;
  GreedyRequest req;
  req.prompt = gc.prompt_ids();
  req.speech = &speech->rows.t;
  req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
  auto ids = r.generate_greedy(req);
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  if (ids.is_ok()) out.ids = *ids;
  // Prefill chunks of 100 rows, then one step per generated token after the first.
  const int64_t plen = static_cast<int64_t>(req.prompt.size());
  out.steps = (plen + 99) / 100 + static_cast<int64_t>(out.ids.size()) - 1;
  return out;
}

TEST(LayerStream, EveryResidentLayerCountGivesIdsIdenticalToAllResidentForEveryCase) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int L = (*ckpt)->spec().decoder.num_layers;
  auto resident = Runner::create(cpu_backend(1), **ckpt, stream_options(-1));
  ASSERT_TRUE(resident.is_ok()) << resident.status().to_string();
  EXPECT_EQ((*resident)->layer_stream(), nullptr);
  EXPECT_EQ((*resident)->memory_plan().resident_layers, L);
  std::vector<CaseRun> want;
  for (const std::string& name : golden_cases()) {
    GoldenCase gc(name);
    ASSERT_TRUE(gc.ok()) << gc.error();
    want.push_back(run_case(**resident, gc));
    EXPECT_EQ(want.back().ids, gc.generated_ids()) << name;
  }
  for (int n = 0; n < L; ++n) {
    auto streamed = Runner::create(cpu_backend(1), **ckpt, stream_options(n));
    ASSERT_TRUE(streamed.is_ok()) << streamed.status().to_string();
    Runner& r = **streamed;
    const LayerStream* ls = r.layer_stream();
    ASSERT_NE(ls, nullptr);
    EXPECT_EQ(ls->first(), n);
    EXPECT_EQ(ls->count(), L - n);
    size_t c = 0;
    for (const std::string& name : golden_cases()) {
      GoldenCase gc(name);
      const uint64_t before = ls->bytes_streamed();
      const CaseRun got = run_case(r, gc);
      EXPECT_EQ(got.ids, want[c].ids) << name << " with " << n << " of " << L << " layers resident";
      // Every step brings every streamed layer in once.
      EXPECT_EQ(ls->bytes_streamed() - before, static_cast<uint64_t>(got.steps) * ls->host_bytes()) << name;
      ++c;
    }
  }
}

TEST(LayerStream, StreamedLayersTakeTwoSlotsOfDeviceMemoryNotTheirWeights) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int L = (*ckpt)->spec().decoder.num_layers;
  ASSERT_GE(L, 3) << "three streamed layers show that two slots are reused";
  auto resident = Runner::create(cpu_backend(1), **ckpt, stream_options(-1));
  auto streamed = Runner::create(cpu_backend(1), **ckpt, stream_options(0));
  ASSERT_TRUE(resident.is_ok() && streamed.is_ok());
  const DecoderBytes b =
      decoder_bytes((*ckpt)->spec().decoder, (*ckpt)->weights().decoder, 512, 8, 256, 0, L);
  size_t all_layers = 0;
  for (size_t x : b.layers) all_layers += x;
  const LayerStream* ls = (*streamed)->layer_stream();
  ASSERT_NE(ls, nullptr);
  EXPECT_EQ(ls->host_bytes(), all_layers) << "the host image is the layers as bound";
  // On the device: the resident runner holds every layer, the streaming one two slots instead.
  const size_t a = (*resident)->backend().allocated_bytes(), s = (*streamed)->backend().allocated_bytes();
  EXPECT_LT(s, a);
  EXPECT_GE(a - s + 2 * ls->slot_bytes(), all_layers - L * 7 * 256)
      << "(each tensor may round up to 256 bytes)";
  EXPECT_LE(a - s + 2 * ls->slot_bytes(), all_layers);
}

TEST(LayerStream, RefusesMoreResidentLayersThanTheModelHas) {
  auto ckpt = Checkpoint::open(hf_model_dir());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const int L = (*ckpt)->spec().decoder.num_layers;
  auto r = Runner::create(cpu_backend(1), **ckpt, stream_options(L + 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--gpu-layers"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace vv::test
