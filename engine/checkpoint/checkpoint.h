// Checkpoint: a loaded VibeVoice-ASR model on the host — its ModelSpec and every weight bound by
// role. It owns the mmapped safetensors files (or the buffers of random weights); the views in
// weights() stay valid while it lives. Immutable after open()/random(); any thread may read it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/weights.h"
#include "kernels/backend.h"

namespace vv {

class SafetensorsArchive;

class Checkpoint {
 public:
  // config.json (+ preprocessor_config.json) and the safetensors: one *.safetensors file, or the
  // shards named by model.safetensors.index.json. Every naming scheme of MODEL.md §3 is accepted.
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& model_dir);
  // Seeded random weights at a spec's shapes, built in memory (for `vibevoice bench --random`).
  // dtype: kBF16, kF16 or kF32 for the matrices (norms and biases too).
  static Result<std::unique_ptr<Checkpoint>> random(const ModelSpec& spec, uint64_t seed, DType dtype);

  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return weights_; }
  const std::vector<std::string>& skipped() const { return skipped_; }   // tensors present but unused by ASR (not read)

  // Every bound tensor once (a tied LM head that reuses the embedding is not repeated).
  const std::vector<const HostTensor*>& bound_tensors() const { return bound_; }
  int64_t parameter_count() const;                  // sum of numel over bound_tensors()
  std::map<std::string, int> dtype_counts() const;  // "BF16" -> number of bound tensors
  bool lm_head_tied() const { return lm_head_tied_; }  // the LM head is the embedding matrix
  const std::string& source() const { return source_; }  // model dir, or "random:<seed>"

 private:
  Checkpoint();
  ModelSpec spec_;
  ModelWeights weights_;
  std::vector<std::string> skipped_;
  std::vector<const HostTensor*> bound_;  // into weights_
  bool lm_head_tied_ = false;
  std::string source_;
  std::unique_ptr<SafetensorsArchive> archive_;
  std::vector<std::pair<void*, size_t>> owned_;  // random weights' buffers (anonymous mmaps)
  friend struct CheckpointBuilder;
};

ModelSpec tiny_spec();        // shapes of the bundled tiny model (for --random tiny)
ModelSpec qwen7b_asr_spec();  // the real VibeVoice-ASR 7B shapes from MODEL.md §2

}  // namespace vv
