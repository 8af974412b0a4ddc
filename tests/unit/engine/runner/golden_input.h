// A golden case's 24 kHz model input: the dumped `input_values` when the case has them, else (the
// `long` case) the audio front end on its 24 kHz audio.wav (no resampling, so exact up to 1e-7). A
// front-end failure is a test failure and gives no samples.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/runner/runner.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {

inline std::vector<float> golden_input_values(const GoldenCase& gc) {
  if (gc.has("input_values")) return gc.tensor("input_values").data;
  std::ifstream in(gc.dir() + "/audio.wav", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto prepared = audio::prepare_audio(bytes);
  EXPECT_TRUE(prepared.is_ok()) << gc.name() << ": " << prepared.status().to_string();
  return prepared.is_ok() ? prepared->input_values : std::vector<float>{};
}

// The greedy ids `r` gives a case from its model input (golden_input_values), as many as the golden
// run generated; a failure (no input, encode or generation error) is a test failure and gives none.
inline std::vector<TokenId> golden_greedy_ids(Runner& r, const GoldenCase& gc) {
  const std::vector<float> x = golden_input_values(gc);
  EXPECT_FALSE(x.empty()) << gc.name();
  if (x.empty()) return {};
  auto speech = r.encode(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(speech.is_ok()) << gc.name() << ": " << speech.status().to_string();
  if (!speech.is_ok()) return {};
  GreedyRequest req;
  req.prompt = gc.prompt_ids();
  req.speech = &speech->rows.t;
  req.max_new_tokens = static_cast<int>(gc.generated_ids().size());
  auto ids = r.generate_greedy(req);
  EXPECT_TRUE(ids.is_ok()) << gc.name() << ": " << ids.status().to_string();
  return ids.is_ok() ? *ids : std::vector<TokenId>{};
}

}  // namespace vv::test
