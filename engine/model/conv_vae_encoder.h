// The Conv-VAE speech encoder of VibeVoice-ASR (MODEL.md §5), used twice: acoustic and semantic.
// float32 activations laid out [time, channels]; every causal conv is a GEMM over overlapping
// input rows. A ConvVaeEncoder owns its device weights and a workspace sized for one launch; an
// EncoderStream owns the carried convolution state of one clip, so long audio is encoded segment
// by segment with memory bounded by the segment. One launch may carry the next segment of several
// clips (encode_segments): their rows are packed one after another, the row-wise work (norms, FFN)
// runs once over all of them, the convolutions per clip with each clip's own carried rows. One
// thread (the Backend's driver) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/weights.h"
#include "engine/model/device_tensor.h"
#include "engine/model/tensor_capture.h"
#include "kernels/backend.h"

namespace vv {

// How the acoustic latents are turned into the decoder's input (MODEL.md §5.6). The semantic
// encoder always uses the mean.
enum class LatentSampling : uint8_t {
  kMean,      // the distribution's mean (default; what the goldens check)
  kGaussian,  // + σ·ε, σ = (fix_std/0.8)·n with n ~ N(0,1) drawn once per clip, ε ~ N(0,1) per element
  kFix,       // + fix_std·ε
};

struct SamplingOptions {
  LatentSampling mode = LatentSampling::kMean;
  uint64_t seed = 0;
};

// Scratch memory for one encode_segments() call, in floats per buffer. Encoders that never run at
// the same time (the acoustic and semantic encoders of one SpeechEmbedder) share one: each
// records its needs at create(), then the owner allocates once.
struct EncoderWorkspace {
  int64_t stage = 0, act = 0, ffn = 0, scratch = 0, noise = 0;
  DeviceTensor ping, pong, u, v, ffn_h, scratch_buf, noise_buf;
  bool allocated = false;
  void need(int64_t st, int64_t ac, int64_t ff, int64_t sc, int64_t no);
  void allocate(Backend& be);
  size_t bytes() const {  // what allocate() takes
    return static_cast<size_t>(2 * stage + 2 * act + ffn + scratch + noise) * sizeof(float);
  }
};

// The carried state of one clip through one encoder: the last (K − stride) input rows of every
// conv and the last K−1 normalised rows of every depthwise mixer; zeros at the start.
class EncoderStream {
 public:
  int64_t frames_out() const { return frames_out_; }

 private:
  friend class ConvVaeEncoder;
  DeviceTensor state_;               // every conv's and mixer's rows, back to back (F32)
  std::vector<Tensor> conv_state_;   // stem, down[0..], head: [K − s, C_in]
  std::vector<Tensor> mixer_state_;  // one per block in order: [K − 1, C]
  LatentSampling mode_ = LatentSampling::kMean;
  float sigma_ = 0.f;  // the per-clip noise scale (kGaussian / kFix)
  std::mt19937_64 rng_;
  int64_t frames_out_ = 0;
};

// One clip's next segment in a packed launch: `n` samples (a positive multiple of the hop) from
// host memory, encoded into `out` (F32 [n/hop, vae_dim] on the backend, row stride free).
struct SegmentRef {
  EncoderStream* stream = nullptr;
  const float* samples = nullptr;
  int64_t n = 0;
  Tensor out;
};

class ConvVaeEncoder {
 public:
  // max_segment: the longest segment (samples) one encode_segment() call takes; rounded up to a
  // multiple of the hop. max_pack: the most samples one encode_segments() launch takes over all
  // its clips (0 = max_segment; never less than it); the workspace is sized for it (stage buffers
  // ≈ 32·max_pack floats each at the full shape, see load()). shared: a workspace shared with other
  // encoders, which the caller allocates after creating all of them; null = the encoder allocates
  // its own.
  static Result<std::unique_ptr<ConvVaeEncoder>> create(Backend& be, const EncoderSpec& spec,
                                                        const EncoderWeights& w, int64_t max_segment,
                                                        std::string name,
                                                        std::shared_ptr<EncoderWorkspace> shared = nullptr,
                                                        int64_t max_pack = 0);

  const EncoderSpec& spec() const { return spec_; }
  int hop() const { return hop_; }
  int64_t max_segment() const { return max_segment_; }
  int64_t max_pack() const { return max_pack_; }

  // A fresh clip: zero state. Noise (if any) is seeded from `sampling`.
  std::unique_ptr<EncoderStream> start_stream(const SamplingOptions& sampling = {});

  // Encodes the next `n` samples of the clip (n a multiple of hop(), ≤ max_segment()) from host
  // memory into out (F32 [n/hop, vae_dim] on the backend, row stride free).
  Status encode_segment(EncoderStream& stream, const float* samples, int64_t n, Tensor& out);

  // The next segment of several clips in one launch (each clip at most once; segments of any
  // lengths, together at most max_pack() samples). Each clip's latents are those that
  // encode_segment() would give it alone: the same ops per row, in the same order (bitwise on a
  // backend whose GEMM rows do not depend on the row count, as the CPU's; see the tests).
  Status encode_segments(std::span<const SegmentRef> items);

  // A whole clip in segments of `segment` samples (0 = max_segment()); the clip is zero-padded to
  // a multiple of the hop. Returns the latents [ceil(n/hop), vae_dim] on the host.
  Result<std::vector<float>> encode(const float* samples, int64_t n, int64_t segment = 0,
                                    const SamplingOptions& sampling = {});

 private:
  struct Conv {
    DeviceTensor w;  // [out, K·in]
    DeviceTensor b;  // [out]
    int in = 0, out = 0, kernel = 0, stride = 1;
    int pad() const { return kernel - stride; }
  };
  struct Block {
    DeviceTensor norm, mixer_w /*[C, K]*/, mixer_b, gamma, ffn_norm, fc1_w, fc1_b, fc2_w, fc2_b, ffn_gamma;
    int channels = 0;
  };

  ConvVaeEncoder(Backend& be, const EncoderSpec& spec) : be_(be), spec_(spec) {}
  Status load(const EncoderWeights& w, int64_t max_segment, int64_t max_pack);
  Status run_conv(const Conv& c, Tensor& state, void* in_base, int64_t t_in, Tensor& out);
  void run_mixer(const Block& b, Tensor& history, Tensor& x, int64_t ws_row);
  void run_ffn(const Block& b, Tensor& x);
  // Backend::conv_block on one clip's rows (and its history after it); false where the backend does
  // not fuse the block (nothing has run then).
  bool run_block(const Block& b, Tensor& history, Tensor& x, int64_t ws_row);
  void update_history(Tensor& history, const Tensor& u);
  void add_noise(EncoderStream& s, Tensor& out);

  Backend& be_;
  EncoderSpec spec_;
  std::string name_;
  int hop_ = 1;
  int64_t max_segment_ = 0;
  int64_t max_pack_ = 0;
  Conv stem_, head_;
  std::vector<Conv> downs_;
  std::vector<std::vector<Block>> stages_;
  // Workspace for one launch: two ping-pong stage buffers (each clip's rows with room for the
  // consuming conv's carried rows in front of them), the normed/mixed activations laid out like
  // the stage rows, an FFN tile, scratch rows.
  std::shared_ptr<EncoderWorkspace> ws_;
  int64_t ffn_tile_elems_ = 0;
};

}  // namespace vv
