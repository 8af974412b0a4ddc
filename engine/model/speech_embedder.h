// Audio → speech rows: the acoustic and semantic Conv-VAE encoders run segment by segment over a
// 24 kHz clip, then the connectors turn the latents into decoder rows [F, H] (MODEL.md §5–6).
// A SpeechEmbedder owns both encoders and the connectors on one Backend; SpeechRows own their
// device buffer. step() over several jobs encodes the next segment of each in one launch per
// encoder and one connector pass over all their frames. One thread (the Backend's driver) at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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
  int64_t segment = 0;       // samples per encoder segment (multiple of the hop); 0 = the model's chunk_size
  SamplingOptions acoustic;  // mean by default; the semantic path always uses the mean
};

// One clip being encoded segment by segment, so that a caller (the engine loop) can interleave
// segments with decoder steps, report progress and drop the job between segments. Owns its
// latents and speech rows; reads the caller's samples, which must outlive the job.
class SpeechJob {
 public:
  int64_t frames() const { return frames_; }
  int64_t frames_done() const { return done_samples_ / hop_; }
  bool done() const { return done_samples_ >= padded_; }
  // Samples the next step() encodes for this job (0 once done).
  int64_t next_samples() const { return done() ? 0 : std::min(segment_, padded_ - done_samples_); }
  // The speech rows, once done() (moves them out).
  SpeechRows take() { return std::move(rows_); }

 private:
  friend class SpeechEmbedder;
  const float* x_ = nullptr;
  int64_t n_ = 0, padded_ = 0, segment_ = 0, done_samples_ = 0, frames_ = 0;
  int hop_ = 1;
  std::unique_ptr<EncoderStream> acoustic_, semantic_;
  SpeechRows rows_;
  std::vector<float> tail_;
};

class SpeechEmbedder {
 public:
  // max_segment: the longest segment of one job (0 = spec.chunk_size). max_pack: the most samples
  // one step() over several jobs encodes, all jobs together (0 = max_segment; never less). The
  // encoders' shared workspace is sized for max_pack samples (ConvVaeEncoder::create), plus
  // max_pack/hop packed frames of latents and speech rows here: (Da + Ds + H)·4 B per frame, 6.8 MB
  // for 60 s at the 7B shape. Where the backend has a second stream (make_lane; the CUDA backend
  // unless VV_CUDA_LANES=0) the semantic encoder runs on it beside the acoustic one, with a
  // workspace of its own (the same size again).
  static Result<std::unique_ptr<SpeechEmbedder>> create(Backend& be, const ModelSpec& spec,
                                                        const ModelWeights& w, int64_t max_segment = 0,
                                                        int64_t max_pack = 0);

  // x: normalised 24 kHz mono samples (padded with zeros to a multiple of the hop here).
  // Captures `acoustic.latents`, `semantic.latents` and `speech_embeds` when a hook is set.
  Result<SpeechRows> embed(const float* x, int64_t n, const EncodeOptions& opt = {});

  // The same in steps: start() checks the options and allocates the job's outputs; each step()
  // encodes the next segment through both encoders and the connectors (a no-op once done).
  Result<std::unique_ptr<SpeechJob>> start(const float* x, int64_t n, const EncodeOptions& opt = {});
  Status step(SpeechJob& job);
  // The next segment of every job not yet done, all in one launch per encoder and one connector
  // pass: each job gets the rows step(job) would give it alone. The jobs' next_samples() must add
  // up to at most max_pack() (kInvalidArgument otherwise, before anything runs); a job at most once.
  Status step(std::span<SpeechJob* const> jobs);

  // The connectors alone, fed latents (host, row-major): [F, Da] and [F, Ds] → speech rows.
  Result<SpeechRows> connect(const float* acoustic, const float* semantic, int64_t frames);

  void set_capture(CaptureFn fn) { capture_ = std::move(fn); }
  ConvVaeEncoder& acoustic() { return *acoustic_; }
  ConvVaeEncoder& semantic() { return *semantic_; }
  int hop() const { return acoustic_->hop(); }
  int64_t max_pack() const { return acoustic_->max_pack(); }

 private:
  SpeechEmbedder(Backend& be) : be_(be) {}
  Backend& be_;
  int hidden_ = 0;
  // The semantic encoder's backend where be_ has a second stream (Backend::make_lane): the two
  // encoders then run side by side, each with its own workspace. Declared before the encoders, so
  // that it outlives them.
  std::unique_ptr<Backend> lane_;
  std::unique_ptr<ConvVaeEncoder> acoustic_, semantic_;
  std::unique_ptr<SpeechConnector> connector_;
  // One launch's latents and speech rows, the jobs' frames one after another: [max_pack/hop, ·].
  DeviceTensor lat_a_, lat_s_, rows_;
  CaptureFn capture_;
};

}  // namespace vv
