#include "engine/model/speech_embedder.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace vv {

Result<std::unique_ptr<SpeechEmbedder>> SpeechEmbedder::create(Backend& be, const ModelSpec& spec,
                                                               const ModelWeights& w, int64_t max_segment) {
  std::unique_ptr<SpeechEmbedder> e(new SpeechEmbedder(be));
  if (max_segment <= 0) max_segment = spec.chunk_size;
  e->hidden_ = spec.decoder.hidden_size;
  // The two encoders run one after the other: one workspace, sized for the larger of the two.
  auto ws = std::make_shared<EncoderWorkspace>();
  VV_ASSIGN_OR_RETURN(e->acoustic_, ConvVaeEncoder::create(be, spec.acoustic, w.acoustic, max_segment, "acoustic", ws));
  VV_ASSIGN_OR_RETURN(e->semantic_, ConvVaeEncoder::create(be, spec.semantic, w.semantic, max_segment, "semantic", ws));
  ws->allocate(be);
  if (e->acoustic_->hop() != e->semantic_->hop()) {
    return invalid_argument("acoustic hop " + std::to_string(e->acoustic_->hop()) + " differs from semantic hop " +
                            std::to_string(e->semantic_->hop()));
  }
  VV_ASSIGN_OR_RETURN(e->connector_, SpeechConnector::create(be, w.acoustic_connector, w.semantic_connector,
                                                             e->hidden_, spec.acoustic.vae_dim, spec.semantic.vae_dim));
  return e;
}

Result<SpeechRows> SpeechEmbedder::embed(const float* x, int64_t n, const EncodeOptions& opt) {
  const int hop = acoustic_->hop();
  int64_t segment = opt.segment > 0 ? opt.segment : acoustic_->max_segment();
  if (segment % hop != 0 || segment > acoustic_->max_segment()) {
    return invalid_argument("encoder segment " + std::to_string(segment) + " must be a multiple of " +
                            std::to_string(hop) + " and at most " + std::to_string(acoustic_->max_segment()));
  }
  if (n <= 0) return invalid_argument("audio has no samples");
  const int64_t frames = (n + hop - 1) / hop;
  const int64_t padded = frames * hop;
  DeviceTensor lat_a = alloc_f32(be_, frames, acoustic_->spec().vae_dim);
  DeviceTensor lat_s = alloc_f32(be_, frames, semantic_->spec().vae_dim);
  auto sa = acoustic_->start_stream(opt.acoustic);
  auto ss = semantic_->start_stream(SamplingOptions{});
  std::vector<float> tail;
  for (int64_t off = 0; off < padded; off += segment) {
    const int64_t len = std::min(segment, padded - off);
    const float* src = x + off;
    if (off + len > n) {  // the zero-padded end of the clip
      tail.assign(static_cast<size_t>(len), 0.f);
      std::memcpy(tail.data(), x + off, static_cast<size_t>(n - off) * sizeof(float));
      src = tail.data();
    }
    Tensor ra = lat_a.t.row_slice(off / hop, len / hop);
    Tensor rs = lat_s.t.row_slice(off / hop, len / hop);
    VV_RETURN_IF_ERROR(acoustic_->encode_segment(*sa, src, len, ra));
    VV_RETURN_IF_ERROR(semantic_->encode_segment(*ss, src, len, rs));
  }
  if (capture_) {
    capture_("acoustic.latents", lat_a.t);
    capture_("semantic.latents", lat_s.t);
  }
  SpeechRows out;
  out.rows = alloc_f32(be_, frames, hidden_);
  VV_RETURN_IF_ERROR(connector_->run(lat_a.t, lat_s.t, out.rows.t));
  if (capture_) capture_("speech_embeds", out.rows.t);
  return out;
}

Result<SpeechRows> SpeechEmbedder::connect(const float* acoustic, const float* semantic, int64_t frames) {
  DeviceTensor lat_a = alloc_f32(be_, frames, acoustic_->spec().vae_dim);
  DeviceTensor lat_s = alloc_f32(be_, frames, semantic_->spec().vae_dim);
  be_.upload(lat_a.buf.data(), acoustic, static_cast<size_t>(frames * acoustic_->spec().vae_dim) * sizeof(float));
  be_.upload(lat_s.buf.data(), semantic, static_cast<size_t>(frames * semantic_->spec().vae_dim) * sizeof(float));
  SpeechRows out;
  out.rows = alloc_f32(be_, frames, hidden_);
  VV_RETURN_IF_ERROR(connector_->run(lat_a.t, lat_s.t, out.rows.t));
  if (capture_) capture_("speech_embeds", out.rows.t);
  return out;
}

}  // namespace vv
