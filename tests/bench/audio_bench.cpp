// The audio front end per request, the part of an upload's service time that is not HTTP: a 2 s
// 16 kHz mono PCM16 WAV (what loadtest/vvload.py uploads) through WAV decode, soxr HQ resampling to
// 24 kHz and loudness normalisation (prepare_audio), and the resampler alone. Synthetic tone + noise.
//   audio_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/audio/resampler.h"

namespace {

std::vector<float> signal(int rate, double seconds) {
  std::vector<float> x(static_cast<std::size_t>(rate * seconds));
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.02f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.3f * static_cast<float>(std::sin(2 * M_PI * 220.0 * static_cast<double>(i) / rate)) + noise(rng);
  }
  return x;
}

void put32(std::vector<std::uint8_t>& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
}

std::vector<std::uint8_t> wav_pcm16(const std::vector<float>& x, int rate) {
  std::vector<std::uint8_t> b;
  const auto data_bytes = static_cast<std::uint32_t>(x.size() * 2);
  b.insert(b.end(), {'R', 'I', 'F', 'F'});
  put32(b, 36 + data_bytes);
  b.insert(b.end(), {'W', 'A', 'V', 'E', 'f', 'm', 't', ' '});
  put32(b, 16);
  put16(b, 1);
  put16(b, 1);
  put32(b, static_cast<std::uint32_t>(rate));
  put32(b, static_cast<std::uint32_t>(rate * 2));
  put16(b, 2);
  put16(b, 16);
  b.insert(b.end(), {'d', 'a', 't', 'a'});
  put32(b, data_bytes);
  for (float v : x) put16(b, static_cast<std::uint16_t>(static_cast<std::int16_t>(std::lround(v * 32767.0f))));
  return b;
}

void BM_PrepareAudioWav2s16k(benchmark::State& state) {
  const std::vector<std::uint8_t> wav = wav_pcm16(signal(16000, 2.0), 16000);
  for (auto _ : state) {
    auto p = vv::audio::prepare_audio(wav);
    if (!p.is_ok()) state.SkipWithError(p.status().to_string().c_str());
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_PrepareAudioWav2s16k)->Unit(benchmark::kMicrosecond);

void BM_ResampleHq(benchmark::State& state) {
  const int in_rate = static_cast<int>(state.range(0));
  const std::vector<float> x = signal(in_rate, 2.0);
  for (auto _ : state) {
    auto y = vv::audio::resample_hq(x, in_rate, 24000);
    benchmark::DoNotOptimize(y);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}
BENCHMARK(BM_ResampleHq)->Arg(16000)->Arg(44100)->Arg(48000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
