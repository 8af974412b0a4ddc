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

Result<std::unique_ptr<SpeechJob>> SpeechEmbedder::start(const float* x, int64_t n, const EncodeOptions& opt) {
  const int hop = acoustic_->hop();
  const int64_t segment = opt.segment > 0 ? opt.segment : acoustic_->max_segment();
  if (segment % hop != 0 || segment > acoustic_->max_segment()) {
    return invalid_argument("encoder segment " + std::to_string(segment) + " must be a multiple of " +
                            std::to_string(hop) + " and at most " + std::to_string(acoustic_->max_segment()));
  }
  if (n <= 0 || x == nullptr) return invalid_argument("audio has no samples");
  auto job = std::make_unique<SpeechJob>();
  job->x_ = x;
  job->n_ = n;
  job->hop_ = hop;
  job->segment_ = segment;
  job->frames_ = (n + hop - 1) / hop;
  job->padded_ = job->frames_ * hop;
  job->lat_a_ = alloc_f32(be_, job->frames_, acoustic_->spec().vae_dim);
  job->lat_s_ = alloc_f32(be_, job->frames_, semantic_->spec().vae_dim);
  job->rows_.rows = alloc_f32(be_, job->frames_, hidden_);
  job->acoustic_ = acoustic_->start_stream(opt.acoustic);
  job->semantic_ = semantic_->start_stream(SamplingOptions{});
  return job;
}

Status SpeechEmbedder::step(SpeechJob& job) {
  if (job.done()) return Status::ok();
  const int64_t off = job.done_samples_;
  const int64_t len = std::min(job.segment_, job.padded_ - off);
  const float* src = job.x_ + off;
  if (off + len > job.n_) {  // the zero-padded end of the clip
    job.tail_.assign(static_cast<size_t>(len), 0.f);
    std::memcpy(job.tail_.data(), job.x_ + off, static_cast<size_t>(job.n_ - off) * sizeof(float));
    src = job.tail_.data();
  }
  const int64_t r0 = off / job.hop_, rows = len / job.hop_;
  Tensor ra = job.lat_a_.t.row_slice(r0, rows);
  Tensor rs = job.lat_s_.t.row_slice(r0, rows);
  VV_RETURN_IF_ERROR(acoustic_->encode_segment(*job.acoustic_, src, len, ra));
  VV_RETURN_IF_ERROR(semantic_->encode_segment(*job.semantic_, src, len, rs));
  // The connectors are per frame: running them per segment gives the whole-clip rows.
  Tensor out = job.rows_.rows.t.row_slice(r0, rows);
  VV_RETURN_IF_ERROR(connector_->run(ra, rs, out));
  if (capture_) {
    capture_("acoustic.latents", ra);
    capture_("semantic.latents", rs);
    capture_("speech_embeds", out);
  }
  job.done_samples_ = off + len;
  return Status::ok();
}

Result<SpeechRows> SpeechEmbedder::embed(const float* x, int64_t n, const EncodeOptions& opt) {
  VV_ASSIGN_OR_RETURN(auto job, start(x, n, opt));
  while (!job->done()) VV_RETURN_IF_ERROR(step(*job));
  return job->take();
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
