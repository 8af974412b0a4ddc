// Runner: one model on one device, or on several as layer shards. Binds a Checkpoint's weights to
// its Backend(s) once (speech embedder and decoder), owns the KV pool and the workspaces sized at
// start, and executes StepPlans. Memory is planned from a budget (RunnerOptions::memory_cap: the KV
// pool takes what remains, layers beyond gpu_layers stream from host memory every step). Layer
// shards: the first backend holds the encoders, the embedding and the first layers, each next one
// the following layers, the last the final norm and LM head; only the hidden rows cross between
// them, and each holds the KV memory of its own layers (one set of block ids for all). Also a
// single-request convenience path (prefill a prompt in chunks, then greedy-decode) and its batched
// form, which the golden tests use. The Runner owns its Backends; weights are copied to the devices
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
#include "engine/runner/layer_stream.h"
#include "engine/runner/memory_plan.h"
#include "kernels/backend.h"

namespace vv {

struct RunnerOptions {
  int64_t kv_positions = 8192;   // KV pool size in positions (rounded up to whole blocks)
  int block_size = 16;           // positions per KV block
  DType kv_dtype = DType::kF32;  // F32 is exact; BF16/F16 halve the pool and round cached k/v (opt-in)
  // make_runner(s): a CUDA backend computing in bf16 (BackendOptions::gpu_bf16_gemm) caches k/v in
  // bf16, as the PyTorch reference's bf16 run does (half the pool's bytes and half the attention's
  // reads); kv_dtype is kept on the CPU and in f32 compute. The service and the CLI set it.
  bool kv_dtype_follows_compute = false;
  int max_rows = 512;            // decoder rows per step
  int max_seqs = 64;             // sequences per step
  int prefill_chunk = 256;       // prompt rows a sequence contributes to one step
  int64_t encoder_segment = 0;   // samples per encoder segment the workspace is sized for; 0 = chunk_size
  // Samples one encoder launch takes over all the requests packed into it (SpeechEmbedder::step
  // over several jobs); 0 = encoder_segment, which already holds 60 s at the default: packing then
  // costs only the packed latents and speech rows (6.8 MB at the 7B shape). More grows the encoder
  // workspace by ≈ 512 B per sample (two stage buffers and u, v of 32 f32 channels).
  int64_t encoder_pack_samples = 0;
  // Drop each host weight's pages as soon as it is on the device, so that loading never holds two
  // copies of the model (a 7B bf16 checkpoint on a 24 GB machine). Afterwards the Checkpoint's
  // mmapped tensors are re-read from disk if touched, and random weights read as zeros: only for a
  // Checkpoint that nothing else reads again.
  bool consume_weights = false;
  // Device memory cap per device, in bytes (0 = none): the memory already in use on the device (the
  // CUDA context), encoders, resident weights, streaming slots, workspaces, a scratch reserve and
  // the KV pool must fit under it (MemoryPlan). The KV pool shrinks to what remains, down to
  // min_kv_positions (0 = min(kv_positions, 2048)); below that create() fails naming the cap.
  size_t memory_cap = 0;
  std::vector<size_t> shard_memory_caps;  // layer shards: one cap per shard (overrides memory_cap)
  int64_t min_kv_positions = 0;
  // Decoder layers resident on the device (per shard); the others stay in host memory and stream
  // into a double buffer before use every step. -1 = as many as memory_cap allows (all without one).
  int gpu_layers = -1;
  // Counted under a cap for the backend's own workspaces; -1 = 256 MiB plus the bf16 GEMM operand
  // buffer on a device that reports its memory (a GPU), 0 on the CPU.
  int64_t scratch_reserve = -1;
  // Steps of one row per sequence (decode steps) run padded up to 2, 4, 8 sequences, then to a
  // multiple of decode_pad (at most max_seqs and max_rows), so that a backend replaying repeated steps
  // (CUDA graphs) sees one step shape per bucket rather than one per running-request count. Padding
  // rows read token 0 at position 0 of a KV block set aside for them (one block more is allocated)
  // and their outputs are dropped; rows never read each other, so the real rows' results are those
  // of an unpadded step of the same row count. -1 = 8 on a CUDA backend and off elsewhere; 0 = off.
  int decode_pad = -1;
};

// One greedy request for generate_greedy().
struct GreedyRequest {
  std::vector<TokenId> prompt;     // ids; audio-token rows take `speech` rows in order
  const Tensor* speech = nullptr;  // F32 [F, H] on the runner's backend (SpeechRows::rows.t)
  int max_new_tokens = 32;
  std::vector<TokenId> stop;  // generation ends after emitting one of these
};

class Runner {
 public:
  static Result<std::unique_ptr<Runner>> create(std::unique_ptr<Backend> backend, const Checkpoint& ckpt,
                                                const RunnerOptions& opt = {});
  // Layer shards over `backends` (at least one); layers_per_shard: decoder layers of each, in order,
  // summing to the model's (empty = as even as possible, the remainder on the first shards).
  static Result<std::unique_ptr<Runner>> create_sharded(std::vector<std::unique_ptr<Backend>> backends,
                                                        const Checkpoint& ckpt, const RunnerOptions& opt = {},
                                                        std::vector<int> layers_per_shard = {});

  // The first shard's: the encoders, the embedding and the speech rows live there.
  Backend& backend() { return *shards_[0].backend; }
  const ModelSpec& spec() const { return spec_; }
  SpeechEmbedder& speech() { return *speech_; }
  Qwen2Decoder& decoder() { return *shards_[0].decoder; }
  // The first shard's pool; its block ids hold for every shard's pool (same number of blocks).
  KvCache& kv() { return *shards_[0].kv; }
  const RunnerOptions& options() const { return opt_; }

  size_t shard_count() const { return shards_.size(); }
  Backend& shard_backend(size_t i) { return *shards_[i].backend; }
  Qwen2Decoder& shard_decoder(size_t i) { return *shards_[i].decoder; }
  const MemoryPlan& memory_plan(size_t shard = 0) const { return shards_[shard].plan; }
  // The shard's streamed layers (nullptr when all are resident).
  const LayerStream* layer_stream(size_t shard = 0) const { return shards_[shard].stream.get(); }

  // Normalised 24 kHz mono samples → speech rows on this device.
  Result<SpeechRows> encode(const float* samples, int64_t n, const EncodeOptions& opt = {});
  // One decoder step over the plan's rows against this runner's KV pool. A device error recorded by
  // any shard's backend (Backend::device_error) fails the step with kInternal naming the device.
  // A step of one row per sequence runs padded (RunnerOptions::decode_pad); the output has the
  // plan's sequences only.
  Result<StepOutput> execute(const StepPlan& plan);
  // The sequence count a plan of `seqs` sequences of one row each runs at (seqs when not padded).
  int64_t padded_seqs(int64_t seqs) const;
  int decode_pad() const { return pad_; }

  // Runs the requests together (prefill chunks and decode rows of all of them in each step until
  // every one is done) and returns each one's generated ids. KV blocks are taken as sequences grow
  // and all given back at the end (also on error; a pool that runs dry is kResourceExhausted).
  Result<std::vector<std::vector<TokenId>>> generate_greedy(const std::vector<GreedyRequest>& requests);
  Result<std::vector<TokenId>> generate_greedy(const GreedyRequest& request);

  // Named intermediates of the encoder, connectors and decoder (see TensorCapture).
  void set_capture(CaptureFn fn);

 private:
  Result<StepOutput> execute_shards(const StepPlan& plan);
  struct Shard {
    std::unique_ptr<Backend> backend;
    // Declared after the backend, so destroyed before it.
    std::unique_ptr<LayerStream> stream;
    std::unique_ptr<Qwen2Decoder> decoder;
    std::unique_ptr<KvCache> kv;
    DeviceTensor hidden_in;  // shards after the first: the previous shard's rows, [max_rows, H]
    MemoryPlan plan;
  };
  Runner() = default;
  Status bind_shard(size_t i, const Checkpoint& ckpt, int layer_begin, int layer_end);

  ModelSpec spec_;
  RunnerOptions opt_;
  std::vector<Shard> shards_;
  std::unique_ptr<SpeechEmbedder> speech_;  // on the first shard's backend
  std::vector<float> staging_;              // host rows between shards
  int pad_ = 0;                             // RunnerOptions::decode_pad as resolved (0 = off)
  BlockId pad_block_ = -1;                  // the KV block padding rows use (every shard's pool)
  StepPlan padded_;                         // the last padded plan (its vectors' storage is reused)
};

}  // namespace vv
