// Shared by the EngineLoop tests: the tiny golden model on the CPU, its tokenizer, prepared golden
// audio, and an event collector that waits for a request's terminal event. Header-only; test
// threads (the collector is filled on the engine thread).
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/audio/audio_preparer.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/cpu_runner.h"
#include "engine/text/prompt_builder.h"
#include "engine/text/tokenizer.h"
#include "scheduler/engine_loop.h"
#include "tests/support/test_paths.h"

namespace vv::test {

// Events of many requests, by RequestId; wait() blocks until a request's terminal event.
class Collector {
 public:
  EventSink sink() {
    return [this](RequestEvent&& e) {
      std::lock_guard<std::mutex> lk(mu_);
      const RequestId id = e.id;
      events_[id].push_back(std::move(e));
      cv_.notify_all();
    };
  }
  // The request's events once terminal; empty (and a test failure) after `timeout`.
  std::vector<RequestEvent> wait(RequestId id, std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock<std::mutex> lk(mu_);
    const bool ok = cv_.wait_for(lk, timeout, [&] {
      auto it = events_.find(id);
      return it != events_.end() && !it->second.empty() && it->second.back().terminal();
    });
    if (!ok) {
      ADD_FAILURE() << "request " << id << " did not finish in time";
      return {};
    }
    return events_[id];
  }
  std::vector<RequestEvent> snapshot(RequestId id) {
    std::lock_guard<std::mutex> lk(mu_);
    return events_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, std::vector<RequestEvent>> events_;
};

// The tiny golden model on a CPU runner with its tokenizer.
struct TinyEngine {
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Runner> runner;

  static std::unique_ptr<TinyEngine> make(const RunnerOptions& opt) {
    auto e = std::make_unique<TinyEngine>();
    auto ckpt = Checkpoint::open(golden_dir() + "/model-hf");
    EXPECT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    if (!ckpt.is_ok()) return nullptr;
    e->ckpt = std::move(ckpt).value();
    auto tok = Tokenizer::load_file(tokenizer_path());
    EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
    if (!tok.is_ok()) return nullptr;
    e->tokenizer = std::move(tok).value();
    auto runner = make_cpu_runner(*e->ckpt, opt, 2);
    EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
    if (!runner.is_ok()) return nullptr;
    e->runner = std::move(runner).value();
    return e;
  }
};

inline RunnerOptions tiny_runner_options() {
  RunnerOptions o;
  o.kv_positions = 8192;
  o.max_rows = 192;  // prompts are prefilled in pieces while others decode
  o.max_seqs = 16;
  o.prefill_chunk = 64;
  return o;
}

// A golden case's audio.wav through the audio front end.
inline audio::PreparedAudio golden_audio(const std::string& name, const ModelSpec& spec) {
  std::ifstream in(golden_dir() + "/cases/" + name + "/audio.wav", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  audio::PrepareOptions po;
  po.hop = spec.acoustic.hop();
  po.sample_rate = spec.sample_rate;
  po.normalize = spec.normalize_audio;
  po.target_dbfs = spec.target_dbfs;
  po.eps = spec.norm_eps;
  auto prepared = audio::prepare_audio(bytes, po);
  EXPECT_TRUE(prepared.is_ok()) << name << ": " << prepared.status().to_string();
  return prepared.is_ok() ? std::move(prepared).value() : audio::PreparedAudio{};
}

inline const RequestEvent* terminal_of(const std::vector<RequestEvent>& events) {
  return events.empty() || !events.back().terminal() ? nullptr : &events.back();
}

// A golden case's prompt and generated ids and its context (golden.json).
struct GoldenIds {
  std::vector<TokenId> prompt, generated;
  std::string context;
};

inline GoldenIds golden_ids(const std::string& name) {
  GoldenIds g;
  simdjson::dom::parser parser;
  simdjson::padded_string json =
      simdjson::padded_string::load(golden_dir() + "/cases/" + name + "/golden.json");
  simdjson::dom::element doc = parser.parse(json);
  for (auto v : doc["prompt_ids"].get_array()) g.prompt.push_back(static_cast<TokenId>(int64_t(v)));
  for (auto v : doc["generated_ids"].get_array()) g.generated.push_back(static_cast<TokenId>(int64_t(v)));
  std::string_view ci;
  if (!doc["context_info"].get_string().get(ci)) g.context = std::string(ci);
  return g;
}

// A transcription of `a` with `context` that generates exactly max_new_tokens (EOS ignored).
inline Request transcription(const audio::PreparedAudio& a, const std::string& context, int max_new_tokens) {
  Request r;
  r.kind = Request::Kind::kTranscription;
  r.audio.push_back(a);
  r.context = compose_context(context, {}, "");
  r.sampling.max_new_tokens = max_new_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

}  // namespace vv::test
