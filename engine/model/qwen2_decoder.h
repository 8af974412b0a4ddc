// The Qwen2 decoder of VibeVoice-ASR (MODEL.md §7.4, §8) on the op set, batch-shaped: forward()
// runs one step over the flat rows of a StepPlan (prefill chunks and decode rows of several
// sequences together) against a paged KV cache, and returns the next token (and optionally the
// logits) of each sequence that asks. A Qwen2Decoder owns its device weights and a workspace sized
// at create() for max_rows rows and max_seqs sequences per step; the KV memory belongs to the
// caller (KvView). One thread (the Backend's driver) at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/weights.h"
#include "engine/model/device_tensor.h"
#include "engine/model/step_plan.h"
#include "engine/model/tensor_capture.h"
#include "kernels/backend.h"

namespace vv {

struct DecoderOptions {
  int max_rows = 512;            // rows per step (all sequences together)
  int max_seqs = 64;             // sequences per step
  int max_blocks_per_seq = 0;    // block-table width; 0 = max_position_embeddings / 16 (rounded up)
  // Layer shards (engine/runner): this decoder binds layers [layer_begin, layer_end) only
  // (layer_end 0 = through the last). The embedding is bound where layer_begin is 0, the final
  // norm and LM head where the range ends the model; a decoder that does not end the model stops
  // after its layers (forward returns no tokens, hidden_rows() holds the residual stream).
  int layer_begin = 0;
  int layer_end = 0;
  // Called during create() right after layer l's weights are on the device, with its tensors
  // (layer streaming moves them to host memory at once, so loading never holds two streamed layers).
  std::function<Status(int, const std::vector<DeviceTensor*>&)> layer_loaded;
};

class Qwen2Decoder {
 public:
  static Result<std::unique_ptr<Qwen2Decoder>> create(Backend& be, const ModelSpec& spec, const DecoderWeights& w,
                                                      const DecoderOptions& opt = {});

  // One step: embeddings (speech rows placed), every layer, final norm, LM head, argmax.
  Result<StepOutput> forward(const StepPlan& plan, KvView& kv);
  // The same from given residual-stream rows (F32 [rows of the plan, H] on the backend) entering
  // layer `first_layer` (0 = as if they were the input embeddings). Used to test one stage fed
  // the golden upstream tensor; the plan's ids then only count rows.
  Result<StepOutput> forward_from(const StepPlan& plan, KvView& kv, const Tensor& hidden, int first_layer);

  // Captures `inputs_embeds`, `hidden.0` .. `hidden.L`, `hidden.norm`, `logits.last` (the output
  // rows' logits) of every step while set.
  void set_capture(CaptureFn fn) { capture_ = std::move(fn); }

  // Layer streaming (engine/runner): the device tensors of layer l, which a streamer may re-point
  // at a reused device slot; and a hook called before the ops of layer l are issued in each step,
  // and with -1 before the first layer of each step.
  std::vector<DeviceTensor*> layer_tensors(int l);
  void set_layer_hook(std::function<void(int)> fn) { layer_hook_ = std::move(fn); }
  // Layer shards: the residual-stream rows [n, H] after this decoder's last layer in the latest
  // step, on its backend; and the bound layer range.
  Tensor hidden_rows(int64_t n) const { return x_.t.row_slice(0, n); }
  int layer_begin() const { return opt_.layer_begin; }
  int layer_end() const { return opt_.layer_end; }
  bool ends_model() const { return opt_.layer_end == spec_.num_layers; }

  const DecoderSpec& spec() const { return spec_; }
  AttentionShape attention_shape() const;
  int max_rows() const { return opt_.max_rows; }
  int max_seqs() const { return opt_.max_seqs; }

 private:
  struct Layer {
    // q, k and v as one [qd + 2·kvd, H] weight and one bias: one GEMM where three were (at 64 rows
    // on the H200 three cuBLASLt calls took 54 us a layer; k and v alone 19 us each for 3.7 MB)
    DeviceTensor input_norm, qkv_w, qkv_b, o_w, post_norm, gate_up_w, down_w;
  };
  Qwen2Decoder(Backend& be, const ModelSpec& spec) : be_(be), spec_(spec.decoder), audio_token_(spec.audio_token_id) {}
  Status load(const DecoderWeights& w);
  Status stage_rows(const StepPlan& plan, KvView& kv, int64_t* rows, AttentionRows* attn);
  Status place_embeddings(const StepPlan& plan, Tensor& x);
  void run_layer(int l, Tensor& x, const AttentionRows& rows, KvLayer& kv);
  Result<StepOutput> run(const StepPlan& plan, KvView& kv, const Tensor* hidden, int first_layer);

  Backend& be_;
  DecoderSpec spec_;
  int audio_token_;
  DecoderOptions opt_;
  DeviceTensor embed_, final_norm_, lm_head_own_;
  const Tensor* lm_head_ = nullptr;  // &embed_.t when tied
  std::vector<Layer> layers_;
  // Workspace: activations for max_rows rows, per-row metadata, the output rows.
  DeviceTensor x_, a_, qkv_, attn_, gu_, m_, last_, logits_, next_;
  // A step's row metadata in one device buffer, ids [R] | positions [R] | sequences [R] | block tables
  // [S × max_blocks_per_seq] (a step's tables are [nseq, width] from the tables' offset), staged in
  // host memory of the same layout that the device copies from asynchronously (Backend::allocate_host:
  // pinned under CUDA) and uploaded in one copy: one transfer before a step, not four from pageable
  // memory. The staging is rewritten only after a host sync has seen the copy done (stage_rows).
  Buffer meta_, h_meta_;
  int32_t *d_ids_ = nullptr, *d_pos_ = nullptr, *d_seq_ = nullptr, *d_tables_ = nullptr;
  bool meta_in_flight_ = false;  // uploaded, and no host sync since
  // The step's next ids land here (pinned under CUDA) before they are copied out.
  Buffer h_next_;
  CaptureFn capture_;
  std::function<void(int)> layer_hook_;
  // The last one-row-per-sequence step whose ops the backend can launch again (Backend::
  // replay_flush): its shape and the handle. A step of the same shape (rows, table width, every row
  // wanting output, no speech rows, the same cache) records the same ops on the same operands, so
  // it stages its rows and replays that handle instead of recording.
  struct ReplayShape {
    int64_t rows = 0, width = 0;
    const void* cache = nullptr;
    bool logprob = false;  // the head's argmax also gives the rows' logprobs
    bool operator==(const ReplayShape&) const = default;
  };
  ReplayShape replay_shape_;
  uint64_t replay_handle_ = 0;
};

}  // namespace vv
