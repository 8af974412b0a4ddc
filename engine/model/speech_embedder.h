// Audio → speech rows: the acoustic and semantic Conv-VAE encoders run segment by segment over a
// 24 kHz clip, then the connectors turn the latents into decoder rows [F, H] (MODEL.md §5–6).
// A SpeechEmbedder owns both encoders and the connectors on one Backend; SpeechRows own their
// device buffer. One thread (the Backend's driver) at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/weights.h"
#include "engine/model/connector.h"
#include "engine/model/conv_vae_encoder.h"
#include "engine/model/device_tensor.h"
#include "engine/model/tensor_capture.h"
#include "kernels/backend.h"

namespace vv {

// The decoder's speech rows for one clip: F32 [F, H] on the backend.
struct SpeechRows {
  DeviceTensor rows;
  int64_t frames() const { return rows.t.rows(); }
};

struct EncodeOptions {
  int64_t segment = 0;        // samples per encoder segment (multiple of the hop); 0 = the model's chunk_size
  SamplingOptions acoustic;   // mean by default; the semantic path always uses the mean
};

// One clip being encoded segment by segment, so that a caller (the engine loop) can interleave
// segments with decoder steps, report progress and drop the job between segments. Owns its
// latents and speech rows; reads the caller's samples, which must outlive the job.
class SpeechJob {
 public:
  int64_t frames() const { return frames_; }
  int64_t frames_done() const { return done_samples_ / hop_; }
  bool done() const { return done_samples_ >= padded_; }
  // The speech rows, once done() (moves them out).
  SpeechRows take() { return std::move(rows_); }

 private:
  friend class SpeechEmbedder;
  const float* x_ = nullptr;
  int64_t n_ = 0, padded_ = 0, segment_ = 0, done_samples_ = 0, frames_ = 0;
  int hop_ = 1;
  std::unique_ptr<EncoderStream> acoustic_, semantic_;
  DeviceTensor lat_a_, lat_s_;
  SpeechRows rows_;
  std::vector<float> tail_;
};

class SpeechEmbedder {
 public:
  // max_segment: the longest segment the workspaces are sized for (0 = spec.chunk_size).
  static Result<std::unique_ptr<SpeechEmbedder>> create(Backend& be, const ModelSpec& spec,
                                                        const ModelWeights& w, int64_t max_segment = 0);

  // x: normalised 24 kHz mono samples (padded with zeros to a multiple of the hop here).
  // Captures `acoustic.latents`, `semantic.latents` and `speech_embeds` when a hook is set.
  Result<SpeechRows> embed(const float* x, int64_t n, const EncodeOptions& opt = {});

  // The same in steps: start() checks the options and allocates the job's outputs; each step()
  // encodes the next segment through both encoders and the connectors (a no-op once done).
  Result<std::unique_ptr<SpeechJob>> start(const float* x, int64_t n, const EncodeOptions& opt = {});
  Status step(SpeechJob& job);

  // The connectors alone, fed latents (host, row-major): [F, Da] and [F, Ds] → speech rows.
  Result<SpeechRows> connect(const float* acoustic, const float* semantic, int64_t frames);

  void set_capture(CaptureFn fn) { capture_ = std::move(fn); }
  ConvVaeEncoder& acoustic() { return *acoustic_; }
  ConvVaeEncoder& semantic() { return *semantic_; }
  int hop() const { return acoustic_->hop(); }

 private:
  SpeechEmbedder(Backend& be) : be_(be) {}
  Backend& be_;
  int hidden_ = 0;
  std::unique_ptr<ConvVaeEncoder> acoustic_, semantic_;
  std::unique_ptr<SpeechConnector> connector_;
  CaptureFn capture_;
};

}  // namespace vv
