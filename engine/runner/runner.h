// Runner: one model on one device. Binds a Checkpoint's weights to a Backend once (speech embedder
// and decoder), owns the KV pool and the workspaces sized at start, and executes StepPlans. Also a
// single-request convenience path (prefill a prompt in chunks, then greedy-decode) and its batched
// form, which the golden tests use. The Runner owns its Backend; weights are copied to the device
// at create(), so the Checkpoint may be closed afterwards. One thread (the engine loop) drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/qwen2_decoder.h"
#include "engine/model/speech_embedder.h"
#include "engine/model/step_plan.h"
#include "engine/model/tensor_capture.h"
#include "engine/runner/kv_cache.h"
#include "kernels/backend.h"

namespace vv {

struct RunnerOptions {
  int64_t kv_positions = 8192;   // KV pool size in positions (rounded up to whole blocks)
  int block_size = 16;           // positions per KV block
  DType kv_dtype = DType::kF32;  // F32 is exact; BF16/F16 halve the pool and round cached k/v (opt-in)
  int max_rows = 512;            // decoder rows per step
  int max_seqs = 64;             // sequences per step
  int prefill_chunk = 256;       // prompt rows a sequence contributes to one step
  int64_t encoder_segment = 0;   // samples per encoder segment the workspace is sized for; 0 = chunk_size
  // Drop each host weight's pages as soon as it is on the device, so that loading never holds two
  // copies of the model (a 7B bf16 checkpoint on a 24 GB machine). Afterwards the Checkpoint's
  // mmapped tensors are re-read from disk if touched, and random weights read as zeros: only for a
  // Checkpoint that nothing else reads again.
  bool consume_weights = false;
};

// One greedy request for generate_greedy().
struct GreedyRequest {
  std::vector<TokenId> prompt;     // ids; audio-token rows take `speech` rows in order
  const Tensor* speech = nullptr;  // F32 [F, H] on the runner's backend (SpeechRows::rows.t)
  int max_new_tokens = 32;
  std::vector<TokenId> stop;       // generation ends after emitting one of these
};

class Runner {
 public:
  static Result<std::unique_ptr<Runner>> create(std::unique_ptr<Backend> backend, const Checkpoint& ckpt,
                                                const RunnerOptions& opt = {});

  Backend& backend() { return *backend_; }
  const ModelSpec& spec() const { return spec_; }
  SpeechEmbedder& speech() { return *speech_; }
  Qwen2Decoder& decoder() { return *decoder_; }
  KvCache& kv() { return *kv_; }
  const RunnerOptions& options() const { return opt_; }

  // Normalised 24 kHz mono samples → speech rows on this device.
  Result<SpeechRows> encode(const float* samples, int64_t n, const EncodeOptions& opt = {});
  // One decoder step over the plan's rows against this runner's KV pool.
  Result<StepOutput> execute(const StepPlan& plan);

  // Runs the requests together (prefill chunks and decode rows of all of them in each step until
  // every one is done) and returns each one's generated ids. KV blocks are taken as sequences grow
  // and all given back at the end (also on error; a pool that runs dry is kResourceExhausted).
  Result<std::vector<std::vector<TokenId>>> generate_greedy(const std::vector<GreedyRequest>& requests);
  Result<std::vector<TokenId>> generate_greedy(const GreedyRequest& request);

  // Named intermediates of the encoder, connectors and decoder (see TensorCapture).
  void set_capture(CaptureFn fn);

 private:
  Runner() = default;
  std::unique_ptr<Backend> backend_;
  ModelSpec spec_;
  RunnerOptions opt_;
  std::unique_ptr<SpeechEmbedder> speech_;
  std::unique_ptr<Qwen2Decoder> decoder_;
  std::unique_ptr<KvCache> kv_;
};

}  // namespace vv
