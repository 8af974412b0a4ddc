// What the engine-loop benches share: seeded random weights at a preset's shape with the bundled
// tokenizer, and requests of seeded noise audio with forced ids (no request stops early).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "engine/audio/audio_preparer.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/text/tokenizer.h"
#include "scheduler/request.h"
#include "tests/support/test_paths.h"

namespace vv::bench {

struct RandomModel {
  ModelSpec spec;
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<Tokenizer> tok;
};

// preset "7b" or "tiny"; exits with the reason when the weights or the tokenizer cannot be made.
inline RandomModel random_model(const std::string& preset, bool bf16) {
  RandomModel m;
  m.spec = preset == "7b" ? qwen7b_asr_spec() : tiny_spec();
  auto ckpt = Checkpoint::random(m.spec, 1234, bf16 ? DType::kBF16 : DType::kF32);
  if (!ckpt.is_ok()) {
    std::fprintf(stderr, "random weights: %s\n", ckpt.status().to_string().c_str());
    std::exit(1);
  }
  auto tok = Tokenizer::load_file(test::tokenizer_path());
  if (!tok.is_ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().to_string().c_str());
    std::exit(1);
  }
  m.ckpt = std::move(ckpt).value();
  m.tok = std::move(tok).value();
  return m;
}

// `seconds` of seeded Gaussian noise at 24 kHz, padded to whole hops.
inline audio::PreparedAudio noise(double seconds, std::uint64_t seed, int hop) {
  audio::PreparedAudio a;
  a.samples = static_cast<std::int64_t>(seconds * 24000);
  a.frames = (a.samples + hop - 1) / hop;
  a.input_values.resize(static_cast<std::size_t>(a.frames * hop), 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.1f);
  for (std::int64_t i = 0; i < a.samples; ++i) a.input_values[static_cast<std::size_t>(i)] = g(rng);
  return a;
}

// A request of noise that generates exactly `tokens` forced ids. Repetition handling is off: one
// token repeated would be cut back as a loop and resampled.
inline Request forced_request(double seconds, int tokens, std::uint64_t seed, int hop) {
  Request r;
  r.audio.push_back(noise(seconds, seed, hop));
  r.sampling.max_new_tokens = tokens;
  r.forced_ids.assign(static_cast<std::size_t>(tokens), 1000 + static_cast<int>(seed % 1000));
  r.repetition_detection = false;
  return r;
}

}  // namespace vv::bench
