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

}  // namespace vv::test
