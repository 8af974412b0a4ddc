// The engine behind the service: the EngineLoop on the model runner (model.device), or the scripted
// FakeEngine (VIBEVOICE_TEST_FAKE_ENGINE). make_engine() runs on the loader thread at start;
// the handle owns everything the engine borrows and outlives it.
#pragma once

#include <functional>
#include <map>
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
  std::string dtype = "float32";  // the compute dtype in use (API.md §14.3 model.dtype, resolved)
  ~EngineHandle();
};

// What model.dtype and model.device come to (API.md §14.3): on a GPU, `auto` is the checkpoint's
// dtype, and a 16-bit dtype runs the GEMMs on bf16/f16 tensor cores (CudaCompute::kBF16);
// `float32` keeps every op in f32 (exact, far slower). The CPU computes in float32 whatever the
// setting (a 16-bit choice there only names the weights' storage, which the checkpoint decides).
struct ComputeChoice {
  bool gpu = false;       // the first device is a GPU
  bool gpu_bf16 = false;  // BackendOptions::gpu_bf16_gemm
  std::string dtype;      // float32 | bfloat16 | float16, as /version and build_info report it
};
// checkpoint_dtypes: Checkpoint::dtype_counts() ("BF16" -> tensors), empty when not known yet.
Result<ComputeChoice> choose_compute(const config::Settings& s,
                                     const std::map<std::string, int>& checkpoint_dtypes);

// Opens model.path, builds the engine; `progress` gets the loaded fraction (0–1).
Result<std::shared_ptr<EngineHandle>> make_engine(AppState& state, std::shared_ptr<const Tokenizer> tokenizer,
                                                  const std::function<void(double)>& progress);

// Transcribes 1 s of silence and waits for the result (model.warmup).
Status warm_up(EngineHandle& handle);

// The scripted decoder's ids (VIBEVOICE_TEST_SCRIPT): the file tokenized, then <|im_end|>.
Result<std::vector<TokenId>> load_script(const Tokenizer& tokenizer, const std::string& path);

}  // namespace vv::api
