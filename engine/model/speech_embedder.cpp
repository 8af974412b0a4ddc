#include "engine/model/speech_embedder.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace vv {

Result<std::unique_ptr<SpeechEmbedder>> SpeechEmbedder::create(Backend& be, const ModelSpec& spec,
                                                               const ModelWeights& w, int64_t max_segment,
                                                               int64_t max_pack) {
  std::unique_ptr<SpeechEmbedder> e(new SpeechEmbedder(be));
  if (max_segment <= 0) max_segment = spec.chunk_size;
  e->hidden_ = spec.decoder.hidden_size;
  // Encoders that run one after the other share one workspace, sized for the larger of the two;
  // on a second stream (a lane) the semantic one runs beside the acoustic one, with its own. A lane
  // only where that second workspace (about the acoustic one's) is at most an eighth of the device's
  // free memory, which the decoder's KV cache would otherwise get.
  auto ws = std::make_shared<EncoderWorkspace>();
  VV_ASSIGN_OR_RETURN(e->acoustic_, ConvVaeEncoder::create(be, spec.acoustic, w.acoustic, max_segment,
                                                           "acoustic", ws, max_pack));
  size_t free_bytes = 0, total_bytes = 0;
  if (!be.device_memory(&free_bytes, &total_bytes) || ws->bytes() <= free_bytes / 8)
    e->lane_ = be.make_lane();
  Backend& sem_be = e->lane_ ? *e->lane_ : be;
  auto ws_sem = e->lane_ ? std::make_shared<EncoderWorkspace>() : ws;
  VV_ASSIGN_OR_RETURN(e->semantic_, ConvVaeEncoder::create(sem_be, spec.semantic, w.semantic, max_segment,
                                                           "semantic", ws_sem, max_pack));
  ws->allocate(be);
  if (ws_sem != ws) ws_sem->allocate(sem_be);
  if (e->acoustic_->hop() != e->semantic_->hop()) {
    return invalid_argument("acoustic hop " + std::to_string(e->acoustic_->hop()) +
                            " differs from semantic hop " + std::to_string(e->semantic_->hop()));
  }
  const int64_t frames = e->acoustic_->max_pack() / e->acoustic_->hop();
  e->lat_a_ = alloc_f32(be, frames, spec.acoustic.vae_dim);
  e->lat_s_ = alloc_f32(be, frames, spec.semantic.vae_dim);
  e->rows_ = alloc_f32(be, frames, e->hidden_);
  VV_ASSIGN_OR_RETURN(e->connector_,
                      SpeechConnector::create(be, w.acoustic_connector, w.semantic_connector, e->hidden_,
                                              spec.acoustic.vae_dim, spec.semantic.vae_dim));
  return e;
}

Result<std::unique_ptr<SpeechJob>> SpeechEmbedder::start(const float* x, int64_t n,
                                                         const EncodeOptions& opt) {
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
  job->rows_.rows = alloc_f32(be_, job->frames_, hidden_);
  job->acoustic_ = acoustic_->start_stream(opt.acoustic);
  job->semantic_ = semantic_->start_stream(SamplingOptions{});
  return job;
}

Status SpeechEmbedder::step(SpeechJob& job) {
  SpeechJob* one = &job;
  return step(std::span<SpeechJob* const>(&one, 1));
}

Status SpeechEmbedder::step(std::span<SpeechJob* const> jobs) {
  // The launch: every job's next segment, its frames one after another in the packed latents.
  struct Item {
    SpeechJob* job;
    const float* src;
    int64_t len, frame;  // samples; first row in the packed buffers
  };
  std::vector<Item> items;
  int64_t samples = 0, frames = 0;
  for (SpeechJob* job : jobs) {
    if (job == nullptr || job->done()) continue;
    for (const Item& it : items) {
      if (it.job == job) return invalid_argument("speech embedder: one job twice in one step");
    }
    const int64_t len = job->next_samples();
    items.push_back({job, job->x_ + job->done_samples_, len, frames});
    samples += len;
    frames += len / job->hop_;
  }
  if (items.empty()) return Status::ok();
  if (samples > max_pack()) {
    return invalid_argument("speech embedder: " + std::to_string(samples) +
                            " samples in one step; the workspace takes " + std::to_string(max_pack()));
  }
  std::vector<SegmentRef> ra, rs;
  for (Item& it : items) {
    SpeechJob& job = *it.job;
    const int64_t off = job.done_samples_;
    if (off + it.len > job.n_) {  // the zero-padded end of the clip
      job.tail_.assign(static_cast<size_t>(it.len), 0.f);
      std::memcpy(job.tail_.data(), job.x_ + off, static_cast<size_t>(job.n_ - off) * sizeof(float));
      it.src = job.tail_.data();
    }
    const int64_t rows = it.len / job.hop_;
    ra.push_back({job.acoustic_.get(), it.src, it.len, lat_a_.t.row_slice(it.frame, rows)});
    rs.push_back({job.semantic_.get(), it.src, it.len, lat_s_.t.row_slice(it.frame, rows)});
  }
  // With a lane: the semantic encoder's ops wait for everything issued here so far (the previous
  // step's connector still reads lat_s_), then both encoders' ops are issued, each on its stream,
  // and the connector waits for the semantic one.
  if (lane_) lane_->wait_for(be_);
  VV_RETURN_IF_ERROR(acoustic_->encode_segments(ra));
  VV_RETURN_IF_ERROR(semantic_->encode_segments(rs));
  if (lane_) be_.wait_for(*lane_);
  // The connectors are per frame: one pass over every job's frames gives each job's rows. A single
  // job's go straight to its own rows; several go through the packed rows and are copied out.
  Tensor la = lat_a_.t.row_slice(0, frames), ls = lat_s_.t.row_slice(0, frames);
  const bool direct = items.size() == 1;
  Tensor packed =
      direct ? items[0].job->rows_.rows.t.row_slice(items[0].job->done_samples_ / items[0].job->hop_, frames)
             : rows_.t.row_slice(0, frames);
  VV_RETURN_IF_ERROR(connector_->run(la, ls, packed));
  for (size_t i = 0; i < items.size(); ++i) {
    SpeechJob& job = *items[i].job;
    const int64_t rows = items[i].len / job.hop_;
    Tensor out = job.rows_.rows.t.row_slice(job.done_samples_ / job.hop_, rows);
    if (!direct) be_.copy(packed.row_slice(items[i].frame, rows), out);
    if (capture_) {
      capture_("acoustic.latents", ra[i].out);
      capture_("semantic.latents", rs[i].out);
      capture_("speech_embeds", out);
    }
    job.done_samples_ += items[i].len;
  }
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
  be_.upload(lat_a.buf.data(), acoustic,
             static_cast<size_t>(frames * acoustic_->spec().vae_dim) * sizeof(float));
  be_.upload(lat_s.buf.data(), semantic,
             static_cast<size_t>(frames * semantic_->spec().vae_dim) * sizeof(float));
  SpeechRows out;
  out.rows = alloc_f32(be_, frames, hidden_);
  VV_RETURN_IF_ERROR(connector_->run(lat_a.t, lat_s.t, out.rows.t));
  if (capture_) capture_("speech_embeds", out.rows.t);
  return out;
}

}  // namespace vv
