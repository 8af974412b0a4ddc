// Tokenizer encode throughput (MB/s of UTF-8 input, one core) on mixed text: English prose,
// CJK, VibeVoice JSON transcripts and C++ code, generated from a seeded RNG so words repeat as in
// real text but the stream is not one string over and over. Bound to compare with: 10 MB/s.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/text/incremental_decoder.h"
#include "engine/text/tokenizer.h"
#include "tests/support/test_paths.h"

namespace {

struct Rng {
  std::uint64_t s;
  std::uint64_t next() {  // SplitMix64
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

const char* kEnglish[] = {"the", "of", "and", "transcription", "speaker", "model", "audio", "we",
                          "meeting", "Kubernetes", "deployment", "isn't", "they'll", "quickly",
                          "Grafana", "dashboard", "latency", "throughput", "because", "however",
                          "tomorrow", "engineering", "question", "answer", "I'm", "really", "data"};
const char* kCjk[] = {"我们", "今天", "讨论", "语音", "识别", "模型", "的", "会议", "时间", "问题",
                      "日本語", "の", "テスト", "です", "한국어", "음성", "인식"};
const char* kCode[] = {"for (std::size_t i = 0; i < n; ++i) {\n", "  out.push_back(x[i] * 2);\n",
                       "}\n", "if (!status.is_ok()) return status;\n",
                       "auto it = map.find(key);\n", "// TODO: handle the error\n",
                       "def main():\n    print(\"hello\")\n", "    return 0;\n"};

std::string make_text(std::size_t bytes, std::uint64_t seed) {
  Rng rng{seed};
  std::string s;
  while (s.size() < bytes) {
    switch (rng.below(4)) {
      case 0: {  // prose
        for (int w = 0; w < 40; ++w) {
          s += kEnglish[rng.below(std::size(kEnglish))];
          s += rng.below(10) == 0 ? ", " : " ";
        }
        s += std::to_string(rng.below(100000)) + ".\n";
        break;
      }
      case 1: {  // CJK
        for (int w = 0; w < 40; ++w) s += kCjk[rng.below(std::size(kCjk))];
        s += "。\n";
        break;
      }
      case 2: {  // JSON transcript
        s += "[";
        double t = 0;
        for (int k = 0; k < 4; ++k) {
          double e = t + 0.5 + static_cast<double>(rng.below(500)) / 100.0;
          char head[96];
          std::snprintf(head, sizeof head, "{\"Start\":%.2f,\"End\":%.2f,\"Speaker\":%d,\"Content\":\"", t,
                        e, static_cast<int>(rng.below(4)));
          s += head;
          for (int w = 0; w < 12; ++w) {
            s += kEnglish[rng.below(std::size(kEnglish))];
            s += ' ';
          }
          s += "\"}";
          s += k < 3 ? "," : "";
          t = e;
        }
        s += "]\n";
        break;
      }
      default:
        for (int l = 0; l < 8; ++l) s += kCode[rng.below(std::size(kCode))];
    }
  }
  return s;
}

const vv::Tokenizer& tokenizer() {
  static std::unique_ptr<vv::Tokenizer> tok = [] {
    auto r = vv::Tokenizer::load_file(vv::test::tokenizer_path());
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      std::abort();
    }
    return std::move(r).value();
  }();
  return *tok;
}

void BM_EncodeMixed(benchmark::State& state) {
  const vv::Tokenizer& tok = tokenizer();
  const std::string text = make_text(static_cast<std::size_t>(state.range(0)), 42);
  std::size_t ids = 0;
  for (auto _ : state) {
    auto r = tok.encode(text);
    ids = r->size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(ids);
  state.SetLabel("bound: >= 10 MB/s");
}
BENCHMARK(BM_EncodeMixed)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

// Many different 4 KiB requests (each new text; the per-thread piece cache sees fresh mixes).
void BM_EncodeManyRequests(benchmark::State& state) {
  const vv::Tokenizer& tok = tokenizer();
  std::vector<std::string> texts;
  for (std::uint64_t i = 0; i < 256; ++i) texts.push_back(make_text(4096, 1000 + i));
  std::size_t k = 0, bytes = 0;
  for (auto _ : state) {
    const std::string& t = texts[k++ % texts.size()];
    auto r = tok.encode(t);
    benchmark::DoNotOptimize(r->size());
    bytes += t.size();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.SetLabel("bound: >= 10 MB/s");
}
BENCHMARK(BM_EncodeManyRequests);

void BM_DecodeIncremental(benchmark::State& state) {
  const vv::Tokenizer& tok = tokenizer();
  const std::string text = make_text(1 << 18, 7);
  auto ids = tok.encode(text).value();
  for (auto _ : state) {
    vv::IncrementalDecoder dec(tok);
    std::size_t n = 0;
    for (vv::TokenId id : ids) n += dec.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeIncremental)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  for (auto _ : state) {
    auto r = vv::Tokenizer::load_file(vv::test::tokenizer_path());
    benchmark::DoNotOptimize(r.is_ok());
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
