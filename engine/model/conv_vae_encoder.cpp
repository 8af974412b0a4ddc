#include "engine/model/conv_vae_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vv {
namespace {

constexpr int64_t kFfnTileElems = int64_t{1} << 22;  // FFN hidden rows per tile × 4C ≤ 16 MiB of f32

Tensor f32_rows(void* base, int64_t row0, int64_t rows, int64_t cols) {
  return Tensor::matrix(static_cast<float*>(base) + row0 * cols, DType::kF32, rows, cols);
}

}  // namespace

void EncoderWorkspace::need(int64_t st, int64_t ac, int64_t ff, int64_t sc, int64_t no) {
  stage = std::max(stage, st);
  act = std::max(act, ac);
  ffn = std::max(ffn, ff);
  scratch = std::max(scratch, sc);
  noise = std::max(noise, no);
}

void EncoderWorkspace::allocate(Backend& be) {
  ping = alloc_f32(be, 1, stage);
  pong = alloc_f32(be, 1, stage);
  u = alloc_f32(be, 1, act);
  v = alloc_f32(be, 1, act);
  ffn_h = alloc_f32(be, 1, ffn);
  scratch_buf = alloc_f32(be, 1, scratch);
  noise_buf = alloc_f32(be, 1, noise);
  allocated = true;
}

Result<std::unique_ptr<ConvVaeEncoder>> ConvVaeEncoder::create(Backend& be, const EncoderSpec& spec,
                                                               const EncoderWeights& w, int64_t max_segment,
                                                               std::string name,
                                                               std::shared_ptr<EncoderWorkspace> shared,
                                                               int64_t max_pack) {
  std::unique_ptr<ConvVaeEncoder> e(new ConvVaeEncoder(be, spec));
  e->name_ = std::move(name);
  e->ws_ = shared ? std::move(shared) : std::make_shared<EncoderWorkspace>();
  VV_RETURN_IF_ERROR(e->load(w, max_segment, max_pack));
  if (!e->ws_->allocated && e->ws_.use_count() == 1) e->ws_->allocate(be);
  return e;
}

Status ConvVaeEncoder::load(const EncoderWeights& w, int64_t max_segment, int64_t max_pack) {
  const std::string& n = name_;
  const size_t ns = spec_.ratios.size();
  if (spec_.depths.size() != ns + 1) {
    return invalid_argument(n + " encoder: depths has " + std::to_string(spec_.depths.size()) +
                            " entries, expected ratios+1 = " + std::to_string(ns + 1));
  }
  if (spec_.channels != 1)
    return unsupported(n + " encoder: channels = " + std::to_string(spec_.channels) +
                       " (only mono input is supported)");
  if (w.down_w.size() != ns || w.down_b.size() != ns || w.stages.size() != ns + 1) {
    return invalid_argument(n + " encoder: weights have " + std::to_string(w.down_w.size()) +
                            " strided convs and " + std::to_string(w.stages.size()) +
                            " stages; the spec needs " + std::to_string(ns) + " and " +
                            std::to_string(ns + 1));
  }
  hop_ = 1;
  for (int r : spec_.ratios) {
    if (r < 1) return invalid_argument(n + " encoder: downsampling ratio " + std::to_string(r) + " < 1");
    hop_ *= r;
  }
  if (max_segment <= 0) return invalid_argument(n + " encoder: segment length must be positive");
  max_segment_ = (max_segment + hop_ - 1) / hop_ * hop_;
  if (max_pack < 0) return invalid_argument(n + " encoder: pack budget must not be negative");
  max_pack_ = std::max(max_segment_, (max_pack + hop_ - 1) / hop_ * hop_);

  auto make_conv = [&](const HostTensor& wt, const HostTensor& bt, int in, int stride, Conv& c) -> Status {
    if (wt.shape.size() != 3 || wt.shape[1] != in) {
      return invalid_argument("conv weight " + wt.name + ": expected [out, " + std::to_string(in) +
                              ", kernel]");
    }
    c.in = in;
    c.out = static_cast<int>(wt.shape[0]);
    c.kernel = static_cast<int>(wt.shape[2]);
    c.stride = stride;
    if (c.kernel < stride)
      return invalid_argument("conv weight " + wt.name + ": kernel shorter than its stride");
    VV_RETURN_IF_ERROR(expect_shape(bt, {c.out}));
    VV_ASSIGN_OR_RETURN(c.w, upload_conv_as_gemm(be_, wt));
    VV_ASSIGN_OR_RETURN(c.b, upload_f32(be_, bt));
    return Status::ok();
  };

  const int nf = spec_.num_filters;
  VV_RETURN_IF_ERROR(make_conv(w.stem_w, w.stem_b, spec_.channels, 1, stem_));
  if (stem_.out != nf)
    return invalid_argument("conv weight " + w.stem_w.name + ": " + std::to_string(stem_.out) +
                            " filters, spec says " + std::to_string(nf));
  downs_.resize(ns);
  int ch = nf;
  for (size_t i = 0; i < ns; ++i) {
    VV_RETURN_IF_ERROR(make_conv(w.down_w[i], w.down_b[i], ch, spec_.ratios[i], downs_[i]));
    ch = downs_[i].out;
  }
  VV_RETURN_IF_ERROR(make_conv(w.head_w, w.head_b, ch, 1, head_));
  if (head_.out != spec_.vae_dim)
    return invalid_argument("conv weight " + w.head_w.name + ": " + std::to_string(head_.out) +
                            " outputs, spec vae_dim is " + std::to_string(spec_.vae_dim));

  stages_.resize(ns + 1);
  for (size_t s = 0; s <= ns; ++s) {
    const int c = s == 0 ? nf : downs_[s - 1].out;
    if (static_cast<int>(w.stages[s].size()) != spec_.depths[s]) {
      return invalid_argument(n + " encoder stage " + std::to_string(s) + ": " +
                              std::to_string(w.stages[s].size()) + " blocks in the weights, spec depth " +
                              std::to_string(spec_.depths[s]));
    }
    for (const ConvNextBlockWeights& bw : w.stages[s]) {
      Block b;
      b.channels = c;
      const int64_t e = static_cast<int64_t>(spec_.ffn_expansion) * c;
      VV_RETURN_IF_ERROR(expect_shape(bw.norm, {c}));
      if (bw.mixer_w.shape.size() != 3 || bw.mixer_w.shape[0] != c || bw.mixer_w.shape[1] != 1) {
        return invalid_argument("depthwise weight " + bw.mixer_w.name + ": expected [" + std::to_string(c) +
                                ", 1, K]");
      }
      VV_RETURN_IF_ERROR(expect_shape(bw.mixer_b, {c}));
      VV_RETURN_IF_ERROR(expect_shape(bw.gamma, {c}));
      VV_RETURN_IF_ERROR(expect_shape(bw.ffn_norm, {c}));
      VV_RETURN_IF_ERROR(expect_shape(bw.fc1_w, {e, c}));
      VV_RETURN_IF_ERROR(expect_shape(bw.fc1_b, {e}));
      VV_RETURN_IF_ERROR(expect_shape(bw.fc2_w, {c, e}));
      VV_RETURN_IF_ERROR(expect_shape(bw.fc2_b, {c}));
      VV_RETURN_IF_ERROR(expect_shape(bw.ffn_gamma, {c}));
      VV_ASSIGN_OR_RETURN(b.norm, upload_f32(be_, bw.norm));
      VV_ASSIGN_OR_RETURN(b.mixer_w, upload_f32(be_, bw.mixer_w));
      VV_ASSIGN_OR_RETURN(b.mixer_b, upload_f32(be_, bw.mixer_b));
      VV_ASSIGN_OR_RETURN(b.gamma, upload_f32(be_, bw.gamma));
      VV_ASSIGN_OR_RETURN(b.ffn_norm, upload_f32(be_, bw.ffn_norm));
      VV_ASSIGN_OR_RETURN(b.fc1_w, upload_matrix(be_, bw.fc1_w));
      VV_ASSIGN_OR_RETURN(b.fc1_b, upload_f32(be_, bw.fc1_b));
      VV_ASSIGN_OR_RETURN(b.fc2_w, upload_matrix(be_, bw.fc2_w));
      VV_ASSIGN_OR_RETURN(b.fc2_b, upload_f32(be_, bw.fc2_b));
      VV_ASSIGN_OR_RETURN(b.ffn_gamma, upload_f32(be_, bw.ffn_gamma));
      stages_[s].push_back(std::move(b));
    }
  }

  // Workspace for the largest launch: max_pack_ samples over at most max_pack_/hop clips (every
  // clip brings at least one hop). A stage's buffer holds each clip's rows after the consuming
  // conv's carried rows, so it takes (clips·pad + rows)·C floats; the pads are small beside the
  // rows (at the full shape and a 60 s budget, stages 0-2 hold 46.08 M floats of rows each and
  // 450 clips add at most 230 K, at stage 2), so the memory is that of one segment of max_pack_
  // samples: ≈ 32·max_pack_ floats for each of the two stage buffers and of u and v (≈ 512 B per
  // sample in all, 737 MB for 60 s), plus an FFN tile of at most 16 MiB. The FFN over all clips'
  // rows runs over the pads between them too (their contents are dead: each conv writes its
  // carried rows there before reading them), so u and v are sized like the stage buffers; the
  // extra rows are at most 8 % of a stage's FFN work (6 rows beside 75 at the last stage for
  // 10 s clips).
  const int64_t clips = max_pack_ / hop_;
  int64_t stage_buf = (clips * stem_.pad() + max_pack_) * static_cast<int64_t>(spec_.channels);
  int64_t act = 0, ffn = 0, scratch_rows = 0, scratch_cols = 1;
  int64_t t = max_pack_;
  for (size_t s = 0; s <= ns; ++s) {
    const int c = s == 0 ? nf : downs_[s - 1].out;
    if (s > 0) t /= spec_.ratios[s - 1];
    const Conv& consumer = s < ns ? downs_[s] : head_;
    const int64_t rows = clips * consumer.pad() + t;
    stage_buf = std::max(stage_buf, rows * c);
    act = std::max(act, rows * c);
    const int64_t e = static_cast<int64_t>(spec_.ffn_expansion) * c;
    ffn = std::max(ffn, std::max(e, std::min(rows * e, kFfnTileElems)));
    scratch_cols = std::max<int64_t>(scratch_cols, c);
    for (const Block& b : stages_[s]) scratch_rows = std::max<int64_t>(scratch_rows, b.mixer_w.t.cols() - 1);
  }
  ffn_tile_elems_ = ffn;
  ws_->need(stage_buf, act, ffn, std::max<int64_t>(scratch_rows, 1) * scratch_cols,
            max_pack_ / hop_ * spec_.vae_dim);
  return Status::ok();
}

std::unique_ptr<EncoderStream> ConvVaeEncoder::start_stream(const SamplingOptions& sampling) {
  auto s = std::make_unique<EncoderStream>();
  int64_t total = 0;
  auto conv_rows = [&](const Conv& c) { total += static_cast<int64_t>(c.pad()) * c.in; };
  conv_rows(stem_);
  for (const Conv& c : downs_) conv_rows(c);
  conv_rows(head_);
  for (const auto& st : stages_)
    for (const Block& b : st) total += (b.mixer_w.t.cols() - 1) * b.channels;
  s->state_ = alloc_f32(be_, 1, total);  // zero-filled: the stream starts from silence
  float* p = static_cast<float*>(s->state_.buf.data());
  auto take = [&](int64_t rows, int64_t cols) {
    Tensor t = Tensor::matrix(p, DType::kF32, rows, cols);
    p += rows * cols;
    return t;
  };
  s->conv_state_.push_back(take(stem_.pad(), stem_.in));
  for (const Conv& c : downs_) s->conv_state_.push_back(take(c.pad(), c.in));
  s->conv_state_.push_back(take(head_.pad(), head_.in));
  for (const auto& st : stages_)
    for (const Block& b : st) s->mixer_state_.push_back(take(b.mixer_w.t.cols() - 1, b.channels));

  s->mode_ = sampling.mode;
  s->rng_.seed(sampling.seed);
  if (sampling.mode == LatentSampling::kGaussian) {
    std::normal_distribution<float> normal(0.f, 1.f);
    s->sigma_ = spec_.fix_std / 0.8f * normal(s->rng_);
  } else if (sampling.mode == LatentSampling::kFix) {
    s->sigma_ = spec_.fix_std;
  }
  return s;
}

Status ConvVaeEncoder::run_conv(const Conv& c, Tensor& state, void* in_base, int64_t t_in, Tensor& out) {
  const int p = c.pad();
  Tensor in = Tensor::matrix(in_base, DType::kF32, p + t_in, c.in);
  if (p > 0) {
    Tensor head = in.row_slice(0, p);
    be_.copy(state, head);
  }
  const int64_t t_out = t_in / c.stride;
  if (out.rows() != t_out || out.cols() != c.out)
    return internal_error(name_ + " encoder: conv output shape mismatch");
  Tensor a = Tensor::matrix(in_base, DType::kF32, t_out, static_cast<int64_t>(c.kernel) * c.in,
                            static_cast<int64_t>(c.stride) * c.in);
  be_.gemm(a, c.w.t, &c.b.t, out, Epilogue::kNone);
  if (p > 0) be_.copy(in.row_slice(t_in, p), state);
  return Status::ok();
}

void ConvVaeEncoder::update_history(Tensor& history, const Tensor& u) {
  const int64_t k1 = history.rows(), t = u.rows();
  if (k1 == 0) return;
  if (t >= k1) {
    be_.copy(u.row_slice(t - k1, k1), history);
    return;
  }
  Tensor tmp = Tensor::matrix(ws_->scratch_buf.buf.data(), DType::kF32, k1, history.cols());
  Tensor keep = tmp.row_slice(0, k1 - t);
  be_.copy(history.row_slice(t, k1 - t), keep);
  Tensor fresh = tmp.row_slice(k1 - t, t);
  be_.copy(u, fresh);
  be_.copy(tmp, history);
}

void ConvVaeEncoder::run_mixer(const Block& b, Tensor& history, Tensor& x, int64_t ws_row) {
  const int64_t t = x.rows(), c = b.channels;
  // u and v at the clip's own rows of the launch's layout (any rows would do: the clips' mixers
  // run one after another, and only u's last rows are read back, by update_history).
  Tensor u = f32_rows(ws_->u.buf.data(), ws_row, t, c);
  Tensor v = f32_rows(ws_->v.buf.data(), ws_row, t, c);
  // Mixer branch: x += gamma ⊙ dwconv(RMSNorm(x)); the normed rows u feed the next segment's history.
  be_.conv_mixer(x, b.norm.t, spec_.rms_norm_eps, history, b.mixer_w.t, b.mixer_b.t, b.gamma.t, u, v);
  update_history(history, u);
}

bool ConvVaeEncoder::run_block(const Block& b, Tensor& history, Tensor& x, int64_t ws_row) {
  const int64_t t = x.rows(), c = b.channels;
  Tensor u = f32_rows(ws_->u.buf.data(), ws_row, t, c);
  Tensor v = f32_rows(ws_->v.buf.data(), ws_row, t, c);
  const int64_t e = static_cast<int64_t>(spec_.ffn_expansion) * c;
  const int64_t tile = std::min(t, std::max<int64_t>(1, ffn_tile_elems_ / e));
  Tensor h = Tensor::matrix(ws_->ffn_h.buf.data(), DType::kF32, tile, e);
  const Backend::ConvBlockWeights wt{b.norm.t,  b.mixer_w.t, b.mixer_b.t, b.gamma.t, b.ffn_norm.t,
                                     b.fc1_w.t, b.fc1_b.t,   b.fc2_w.t,   b.fc2_b.t, b.ffn_gamma.t};
  if (!be_.conv_block(x, spec_.rms_norm_eps, history, wt, u, v, h)) return false;
  update_history(history, u);
  return true;
}

void ConvVaeEncoder::run_ffn(const Block& b, Tensor& x) {
  const int64_t t = x.rows(), c = b.channels;
  Tensor u = Tensor::matrix(ws_->u.buf.data(), DType::kF32, t, c);
  Tensor v = Tensor::matrix(ws_->v.buf.data(), DType::kF32, t, c);
  // FFN branch: x += ffn_gamma ⊙ (W2·gelu(W1·RMSNorm(x) + b1) + b2), pointwise in time: one op, which
  // a backend may fuse (the hidden rows never leave the chip); unfused it runs in tiles of h's rows.
  const int64_t e = static_cast<int64_t>(spec_.ffn_expansion) * c;
  const int64_t tile = std::min(t, std::max<int64_t>(1, ffn_tile_elems_ / e));
  Tensor h = Tensor::matrix(ws_->ffn_h.buf.data(), DType::kF32, tile, e);
  be_.conv_ffn(x, b.ffn_norm.t, spec_.rms_norm_eps, b.fc1_w.t, b.fc1_b.t, b.fc2_w.t, b.fc2_b.t, b.ffn_gamma.t,
               u, v, h);
}

void ConvVaeEncoder::add_noise(EncoderStream& s, Tensor& out) {
  const int64_t n = out.rows() * out.cols();
  std::vector<float> host(static_cast<size_t>(n));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& z : host) z = s.sigma_ * normal(s.rng_);
  Tensor noise = Tensor::matrix(ws_->noise_buf.buf.data(), DType::kF32, out.rows(), out.cols());
  be_.upload(noise.data, host.data(), host.size() * sizeof(float));
  be_.add(out, noise, out);
}

Status ConvVaeEncoder::encode_segment(EncoderStream& s, const float* samples, int64_t n, Tensor& out) {
  if (n <= 0 || n % hop_ != 0 || n > max_segment_) {
    return invalid_argument(name_ + " encoder: segment of " + std::to_string(n) +
                            " samples; it must be a positive multiple of " + std::to_string(hop_) +
                            " and at most " + std::to_string(max_segment_));
  }
  const SegmentRef one{&s, samples, n, out};
  return encode_segments(std::span<const SegmentRef>(&one, 1));
}

Status ConvVaeEncoder::encode_segments(std::span<const SegmentRef> items) {
  if (items.empty()) return Status::ok();
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const SegmentRef& it = items[i];
    if (it.stream == nullptr || it.samples == nullptr)
      return invalid_argument(name_ + " encoder: clip " + std::to_string(i) + " has no stream or no samples");
    if (it.n <= 0 || it.n % hop_ != 0) {
      return invalid_argument(name_ + " encoder: segment of " + std::to_string(it.n) +
                              " samples; it must be a positive multiple of " + std::to_string(hop_));
    }
    if (it.out.rows() != it.n / hop_ || it.out.cols() != spec_.vae_dim || it.out.dtype != DType::kF32) {
      return invalid_argument(name_ + " encoder: output must be F32 [" + std::to_string(it.n / hop_) + ", " +
                              std::to_string(spec_.vae_dim) + "]");
    }
    for (size_t j = 0; j < i; ++j) {
      if (items[j].stream == it.stream) {
        return invalid_argument(name_ +
                                " encoder: one clip twice in one launch (its segments depend on each other)");
      }
    }
    total += it.n;
  }
  if (total > max_pack_) {
    return invalid_argument(name_ + " encoder: a launch of " + std::to_string(total) +
                            " samples; the workspace takes " + std::to_string(max_pack_));
  }
  if (!ws_->allocated) return internal_error(name_ + " encoder: its shared workspace was never allocated");

  // Layout of a stage buffer: clip 0's carried rows, clip 0's rows, clip 1's carried rows, ... The
  // convolutions run per clip over [carried rows, rows]; the blocks' row-wise FFN runs once over
  // everything from clip 0's first row to the last clip's last row (the carried rows in between
  // are dead at that point and overwritten before the next conv reads them).
  const size_t nb = items.size();
  std::vector<int64_t> t(nb), in_row(nb), out_row(nb);
  void* cur = ws_->ping.buf.data();
  void* nxt = ws_->pong.buf.data();
  int64_t row = 0;
  for (size_t i = 0; i < nb; ++i) {
    t[i] = items[i].n;
    in_row[i] = row;
    // Stem input: the samples after the stem's carried rows.
    be_.upload(static_cast<float*>(cur) + (row + stem_.pad()) * stem_.in, items[i].samples,
               static_cast<size_t>(items[i].n) * sizeof(float));
    row += stem_.pad() + items[i].n;
  }
  size_t conv_i = 0, block_i = 0;
  const size_t ns = downs_.size();
  for (size_t st = 0; st <= ns; ++st) {
    const Conv& producer = st == 0 ? stem_ : downs_[st - 1];
    const Conv& consumer = st < ns ? downs_[st] : head_;
    const int64_t p = consumer.pad();
    row = 0;
    for (size_t i = 0; i < nb; ++i) {
      out_row[i] = row;
      row += p + t[i] / producer.stride;
    }
    const int64_t span = row - p;  // clip 0's first row .. the last clip's last row
    std::vector<Tensor> x(nb);
    for (size_t i = 0; i < nb; ++i) {
      // The producer writes after the consumer's carried rows, so the consumer reads one block of rows.
      x[i] = f32_rows(nxt, out_row[i] + p, t[i] / producer.stride, producer.out);
      void* in = static_cast<float*>(cur) + in_row[i] * producer.in;
      VV_RETURN_IF_ERROR(run_conv(producer, items[i].stream->conv_state_[conv_i], in, t[i], x[i]));
    }
    Tensor all = f32_rows(nxt, p, span, producer.out);
    for (const Block& b : stages_[st]) {
      // The whole block as one op per clip where the backend fuses it; otherwise the mixer per clip,
      // then the FFN once over every clip's rows (one launch for the packed clips).
      size_t fused = 0;
      while (fused < nb && run_block(b, items[fused].stream->mixer_state_[block_i], x[fused], out_row[fused]))
        ++fused;
      if (fused == 0) {
        for (size_t i = 0; i < nb; ++i)
          run_mixer(b, items[i].stream->mixer_state_[block_i], x[i], out_row[i]);
        run_ffn(b, all);
      } else {
        for (size_t i = fused; i < nb; ++i) {  // a backend that took the first clips but not these
          run_mixer(b, items[i].stream->mixer_state_[block_i], x[i], out_row[i]);
          run_ffn(b, x[i]);
        }
      }
      ++block_i;
    }
    ++conv_i;
    for (size_t i = 0; i < nb; ++i) t[i] /= producer.stride;
    std::swap(in_row, out_row);
    std::swap(cur, nxt);
  }
  for (size_t i = 0; i < nb; ++i) {
    EncoderStream& s = *items[i].stream;
    Tensor out = items[i].out;
    void* in = static_cast<float*>(cur) + in_row[i] * head_.in;
    VV_RETURN_IF_ERROR(run_conv(head_, s.conv_state_[conv_i], in, t[i], out));
    if (s.mode_ != LatentSampling::kMean && s.sigma_ != 0.f) add_noise(s, out);
    s.frames_out_ += out.rows();
  }
  return Status::ok();
}

Result<std::vector<float>> ConvVaeEncoder::encode(const float* samples, int64_t n, int64_t segment,
                                                  const SamplingOptions& sampling) {
  if (segment == 0) segment = max_segment_;
  if (segment <= 0 || segment % hop_ != 0 || segment > max_segment_) {
    return invalid_argument(name_ + " encoder: segment " + std::to_string(segment) +
                            " must be a multiple of " + std::to_string(hop_) + " and at most " +
                            std::to_string(max_segment_));
  }
  const int64_t frames = (n + hop_ - 1) / hop_;
  const int64_t padded = frames * hop_;
  auto stream = start_stream(sampling);
  DeviceTensor out = alloc_f32(be_, frames, spec_.vae_dim);
  std::vector<float> tail;
  for (int64_t off = 0; off < padded; off += segment) {
    const int64_t len = std::min(segment, padded - off);
    const float* src = samples + off;
    if (off + len > n) {  // the zero-padded end of the clip
      tail.assign(static_cast<size_t>(len), 0.f);
      if (n > off) std::memcpy(tail.data(), samples + off, static_cast<size_t>(n - off) * sizeof(float));
      src = tail.data();
    }
    Tensor rows = out.t.row_slice(off / hop_, len / hop_);
    VV_RETURN_IF_ERROR(encode_segment(*stream, src, len, rows));
  }
  std::vector<float> host(static_cast<size_t>(frames * spec_.vae_dim));
  be_.synchronize();
  be_.download(host.data(), out.buf.data(), host.size() * sizeof(float));
  return host;
}

}  // namespace vv
