// The engine behind the service: the EngineLoop on the model runner (model.device), or the scripted
// FakeEngine (VIBEVOICE_TEST_FAKE_ENGINE). make_engine() runs on the loader thread at start;
// the handle owns everything the engine borrows and outlives it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/audio/audio_preparer.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/text/tokenizer.h"
#include "scheduler/request.h"
#include "service/api/app_state.h"

namespace vv {
class Runner;
}

namespace vv::api {

struct EngineHandle {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<Checkpoint> checkpoint;
  std::shared_ptr<Runner> runner;                 // the first of `runners`
  std::vector<std::shared_ptr<Runner>> runners;   // one per replica (model.device lists several)
  std::shared_ptr<EngineClient> engine;
  audio::PrepareOptions prepare;
  std::string dtype = "float32";
  ~EngineHandle();
};

// Opens model.path, builds the engine; `progress` gets the loaded fraction (0–1).
Result<std::shared_ptr<EngineHandle>> make_engine(AppState& state, std::shared_ptr<const Tokenizer> tokenizer,
                                                  const std::function<void(double)>& progress);

// Transcribes 1 s of silence and waits for the result (model.warmup).
Status warm_up(EngineHandle& handle);

// The scripted decoder's ids (VIBEVOICE_TEST_SCRIPT): the file tokenized, then <|im_end|>.
Result<std::vector<TokenId>> load_script(const Tokenizer& tokenizer, const std::string& path);

}  // namespace vv::api
