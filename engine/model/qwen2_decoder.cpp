#include "engine/model/qwen2_decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace vv {

Result<std::unique_ptr<Qwen2Decoder>> Qwen2Decoder::create(Backend& be, const ModelSpec& spec,
                                                           const DecoderWeights& w, const DecoderOptions& opt) {
  std::unique_ptr<Qwen2Decoder> d(new Qwen2Decoder(be, spec));
  d->opt_ = opt;
  VV_RETURN_IF_ERROR(d->load(w));
  return d;
}

AttentionShape Qwen2Decoder::attention_shape() const {
  AttentionShape s;
  s.heads = spec_.num_heads;
  s.kv_heads = spec_.num_kv_heads;
  s.head_dim = spec_.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec_.head_dim)));
  return s;
}

Status Qwen2Decoder::load(const DecoderWeights& w) {
  const DecoderSpec& s = spec_;
  if (s.hidden_size <= 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.vocab_size <= 0 ||
      s.intermediate_size <= 0 || s.num_heads % s.num_kv_heads != 0 || s.head_dim % 2 != 0) {
    return invalid_argument("decoder config: hidden " + std::to_string(s.hidden_size) + ", heads " +
                            std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) + ", head_dim " +
                            std::to_string(s.head_dim) + " is not a valid Qwen2 geometry");
  }
  if (s.rope_theta <= 0) return invalid_argument("decoder config: rope_theta is missing");
  if (static_cast<int>(w.layers.size()) != s.num_layers) {
    return invalid_argument("decoder: " + std::to_string(w.layers.size()) + " layers in the weights, config says " +
                            std::to_string(s.num_layers));
  }
  if (opt_.max_rows < 1 || opt_.max_seqs < 1) return invalid_argument("decoder: max_rows and max_seqs must be positive");
  if (opt_.layer_end == 0) opt_.layer_end = s.num_layers;
  if (opt_.layer_begin < 0 || opt_.layer_begin >= opt_.layer_end || opt_.layer_end > s.num_layers) {
    return invalid_argument("decoder: layer range [" + std::to_string(opt_.layer_begin) + ", " +
                            std::to_string(opt_.layer_end) + ") is not inside the " + std::to_string(s.num_layers) +
                            " layers");
  }
  const bool first = opt_.layer_begin == 0, last = opt_.layer_end == s.num_layers;
  const int64_t H = s.hidden_size, V = s.vocab_size, I = s.intermediate_size;
  const int64_t qd = static_cast<int64_t>(s.num_heads) * s.head_dim, kvd = static_cast<int64_t>(s.num_kv_heads) * s.head_dim;

  VV_RETURN_IF_ERROR(expect_shape(w.embed, {V, H}));
  const bool tied = w.lm_head.data == nullptr || w.lm_head.data == w.embed.data;
  if (first || (last && tied)) {
    if (w.embed.dtype == DType::kF16) {  // the embedding op reads F32 or BF16 tables
      VV_ASSIGN_OR_RETURN(embed_, upload_f32(be_, w.embed));
    } else {
      VV_ASSIGN_OR_RETURN(embed_, upload_matrix(be_, w.embed));
    }
  }
  VV_RETURN_IF_ERROR(expect_shape(w.final_norm, {H}));
  if (last) {
    VV_ASSIGN_OR_RETURN(final_norm_, upload_f32(be_, w.final_norm));
  }
  if (last && tied) {  // (a shard that does not end the model has no head)
    if (w.lm_head.data == nullptr && !s.tie_word_embeddings) {
      return not_found("lm_head.weight is missing and tie_word_embeddings is false");
    }
    lm_head_ = &embed_.t;
  } else if (last) {
    VV_RETURN_IF_ERROR(expect_shape(w.lm_head, {V, H}));
    VV_ASSIGN_OR_RETURN(lm_head_own_, upload_matrix(be_, w.lm_head));
    lm_head_ = &lm_head_own_.t;
  }
  layers_.resize(static_cast<size_t>(s.num_layers));
  for (int li = 0; li < s.num_layers; ++li) {
    const DecoderLayerWeights& lw = w.layers[static_cast<size_t>(li)];
    VV_RETURN_IF_ERROR(expect_shape(lw.input_norm, {H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.q_w, {qd, H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.q_b, {qd}));
    VV_RETURN_IF_ERROR(expect_shape(lw.k_w, {kvd, H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.k_b, {kvd}));
    VV_RETURN_IF_ERROR(expect_shape(lw.v_w, {kvd, H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.v_b, {kvd}));
    VV_RETURN_IF_ERROR(expect_shape(lw.o_w, {H, qd}));
    VV_RETURN_IF_ERROR(expect_shape(lw.post_norm, {H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.gate_w, {I, H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.up_w, {I, H}));
    VV_RETURN_IF_ERROR(expect_shape(lw.down_w, {H, I}));
    if (li < opt_.layer_begin || li >= opt_.layer_end) continue;  // another shard's layer
    Layer& l = layers_[static_cast<size_t>(li)];
    VV_ASSIGN_OR_RETURN(l.input_norm, upload_f32(be_, lw.input_norm));
    VV_ASSIGN_OR_RETURN(l.qkv_w, upload_stacked_rows(be_, {&lw.q_w, &lw.k_w, &lw.v_w}));  // [qd + 2kvd, H]
    VV_ASSIGN_OR_RETURN(l.qkv_b, upload_joined_f32(be_, {&lw.q_b, &lw.k_b, &lw.v_b}));
    VV_ASSIGN_OR_RETURN(l.o_w, upload_matrix(be_, lw.o_w));
    VV_ASSIGN_OR_RETURN(l.post_norm, upload_f32(be_, lw.post_norm));
    VV_ASSIGN_OR_RETURN(l.gate_up_w, upload_stacked_rows(be_, lw.gate_w, lw.up_w));  // [2I, H]: silu_mul halves
    VV_ASSIGN_OR_RETURN(l.down_w, upload_matrix(be_, lw.down_w));
    if (opt_.layer_loaded) VV_RETURN_IF_ERROR(opt_.layer_loaded(li, layer_tensors(li)));
  }

  if (opt_.max_blocks_per_seq <= 0) {
    const int64_t maxpos = s.max_position_embeddings > 0 ? s.max_position_embeddings : 32768;
    opt_.max_blocks_per_seq = static_cast<int>((maxpos + 15) / 16);
  }
  const int64_t R = opt_.max_rows, S = opt_.max_seqs;
  x_ = alloc_f32(be_, R, H);
  a_ = alloc_f32(be_, R, H);
  qkv_ = alloc_f32(be_, R, qd + 2 * kvd);
  attn_ = alloc_f32(be_, R, qd);
  gu_ = alloc_f32(be_, R, 2 * I);
  m_ = alloc_f32(be_, R, I);
  const size_t meta = static_cast<size_t>(3 * R + S * opt_.max_blocks_per_seq) * sizeof(int32_t);
  meta_ = be_.allocate(meta);
  h_meta_ = be_.allocate_host(meta);
  if (meta_.data() == nullptr || h_meta_.data() == nullptr)
    return Status(StatusCode::kResourceExhausted,
                  "decoder: no memory for a step's row metadata (" + std::to_string(meta) + " bytes)");
  d_ids_ = static_cast<int32_t*>(meta_.data());
  d_pos_ = d_ids_ + R;
  d_seq_ = d_ids_ + 2 * R;
  d_tables_ = d_ids_ + 3 * R;
  if (last) {  // the head's rows
    last_ = alloc_f32(be_, S, H);
    logits_ = alloc_f32(be_, S, V);
    next_ = alloc_i32(be_, 2 * S);  // a step's m ids, then (asked for) their m logprobs
    h_next_ = be_.allocate_host(static_cast<size_t>(2 * S) * sizeof(int32_t));
    if (h_next_.data() == nullptr)
      return Status(StatusCode::kResourceExhausted, "decoder: no host memory for a step's next ids");
  }
  return Status::ok();
}

std::vector<DeviceTensor*> Qwen2Decoder::layer_tensors(int l) {
  if (l < opt_.layer_begin || l >= opt_.layer_end) return {};
  Layer& w = layers_[static_cast<size_t>(l)];
  return {&w.input_norm, &w.qkv_w, &w.qkv_b, &w.o_w, &w.post_norm, &w.gate_up_w, &w.down_w};
}

Status Qwen2Decoder::stage_rows(const StepPlan& plan, KvView& kv, int64_t* rows, AttentionRows* attn) {
  const int64_t nseq = static_cast<int64_t>(plan.seqs.size());
  if (nseq == 0) return invalid_argument("step plan has no sequences");
  if (nseq > opt_.max_seqs) {
    return out_of_range("step plan has " + std::to_string(nseq) + " sequences; the decoder was sized for " +
                        std::to_string(opt_.max_seqs));
  }
  if (static_cast<int>(kv.layers.size()) != spec_.num_layers) {
    return invalid_argument("KV cache has " + std::to_string(kv.layers.size()) + " layers, the decoder " +
                            std::to_string(spec_.num_layers));
  }
  int64_t n = 0;
  size_t width = 1;
  for (const SequenceRows& s : plan.seqs) {
    n += static_cast<int64_t>(s.ids.size());
    width = std::max(width, s.blocks.size());
  }
  // A decode step (one row per sequence) gets a table width rounded up (to 4 blocks, then to a
  // quarter of the power of two below it): the width is part of the step's operands, and a backend
  // that replays repeated steps (CUDA graphs) would otherwise see a new step every block_size
  // tokens. Padding entries are never read: every row attends up to its own position.
  if (n == nseq && static_cast<int64_t>(width) < opt_.max_blocks_per_seq) {
    size_t g = 4;
    while (g * 8 <= width) g *= 2;
    width = std::min<size_t>((width + g - 1) / g * g, static_cast<size_t>(opt_.max_blocks_per_seq));
  }
  if (n > opt_.max_rows) {
    return out_of_range("step plan has " + std::to_string(n) + " rows; the decoder was sized for " +
                        std::to_string(opt_.max_rows));
  }
  if (static_cast<int64_t>(width) > opt_.max_blocks_per_seq) {
    return out_of_range("a block table has " + std::to_string(width) + " blocks; the decoder was sized for " +
                        std::to_string(opt_.max_blocks_per_seq));
  }
  // The staging may still be the source of the previous step's copy if no host sync came since (a
  // step without output rows): wait for it before rewriting.
  if (meta_in_flight_) be_.synchronize();
  const int64_t R = opt_.max_rows;
  int32_t* h_ids = static_cast<int32_t*>(h_meta_.data());
  int32_t* h_pos = h_ids + R;
  int32_t* h_seq = h_ids + 2 * R;
  int32_t* h_tables = h_ids + 3 * R;
  std::fill(h_tables, h_tables + nseq * static_cast<int64_t>(width), 0);
  int64_t row = 0;
  for (int64_t si = 0; si < nseq; ++si) {
    const SequenceRows& s = plan.seqs[si];
    if (s.ids.empty()) return invalid_argument("sequence " + std::to_string(si) + " of the step has no rows");
    const int64_t end = s.start_pos + static_cast<int64_t>(s.ids.size());
    if (s.start_pos < 0 || static_cast<int64_t>(s.blocks.size()) * kv.block_size < end) {
      return out_of_range("sequence " + std::to_string(si) + ": positions up to " + std::to_string(end) + " need " +
                          std::to_string((end + kv.block_size - 1) / kv.block_size) + " KV blocks, its table has " +
                          std::to_string(s.blocks.size()));
    }
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      if (s.blocks[b] < 0 || s.blocks[b] >= kv.num_blocks) {
        return out_of_range("sequence " + std::to_string(si) + ": KV block id " + std::to_string(s.blocks[b]) +
                            " outside the pool of " + std::to_string(kv.num_blocks));
      }
      h_tables[si * static_cast<int64_t>(width) + static_cast<int64_t>(b)] = s.blocks[b];
    }
    for (size_t r = 0; r < s.ids.size(); ++r) {
      const TokenId id = s.ids[r];
      if (id < 0 || id >= spec_.vocab_size) {
        return out_of_range("sequence " + std::to_string(si) + " row " + std::to_string(r) + ": token id " +
                            std::to_string(id) + " outside the vocabulary of " + std::to_string(spec_.vocab_size));
      }
      h_ids[row] = id;
      h_pos[row] = static_cast<int32_t>(s.start_pos + static_cast<int64_t>(r));
      h_seq[row] = static_cast<int32_t>(si);
      ++row;
    }
  }
  // One copy: the three row vectors whole (their unused tails are never read) and the step's tables.
  be_.upload(meta_.data(), h_meta_.data(),
             static_cast<size_t>(3 * R + nseq * static_cast<int64_t>(width)) * sizeof(int32_t));
  meta_in_flight_ = true;
  *rows = n;
  attn->row_seq = Tensor::vector(d_seq_, DType::kI32, n);
  attn->row_pos = Tensor::vector(d_pos_, DType::kI32, n);
  attn->block_tables = Tensor::matrix(d_tables_, DType::kI32, nseq, static_cast<int64_t>(width));
  attn->one_row_per_seq = n == nseq;  // every sequence has at least one row (checked above)
  attn->block_size = kv.block_size;
  return Status::ok();
}

// inputs_embeds = embed[ids], then the audio-token rows of each sequence are overwritten, in order,
// with its speech rows (MODEL.md §7.4).
Status Qwen2Decoder::place_embeddings(const StepPlan& plan, Tensor& x) {
  Tensor ids = Tensor::vector(d_ids_, DType::kI32, x.rows());
  be_.embedding(embed_.t, ids, x);
  int64_t row = 0;
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const SequenceRows& s = plan.seqs[si];
    int64_t next_speech = s.speech_begin;
    const int64_t n = static_cast<int64_t>(s.ids.size());
    for (int64_t r = 0; r < n;) {
      if (s.ids[r] != audio_token_) {
        ++r;
        continue;
      }
      int64_t e = r;
      while (e < n && s.ids[e] == audio_token_) ++e;
      const int64_t count = e - r;
      if (s.speech == nullptr || next_speech < 0 || next_speech + count > s.speech->rows() ||
          s.speech->cols() != spec_.hidden_size) {
        return invalid_argument("sequence " + std::to_string(si) + ": audio-token rows " + std::to_string(r) + ".." +
                                std::to_string(e - 1) + " need speech rows " + std::to_string(next_speech) + ".." +
                                std::to_string(next_speech + count - 1) + ", but " +
                                (s.speech ? std::to_string(s.speech->rows()) + " speech rows of width " +
                                                std::to_string(s.speech->cols()) + " were given"
                                          : std::string("none were given")));
      }
      Tensor dst = x.row_slice(row + r, count);
      be_.copy(s.speech->row_slice(next_speech, count), dst);
      next_speech += count;
      r = e;
    }
    row += n;
  }
  return Status::ok();
}

void Qwen2Decoder::run_layer(int l, Tensor& x, const AttentionRows& rows, KvLayer& kv) {
  const Layer& w = layers_[l];
  const int64_t n = x.rows();
  const float eps = spec_.rms_norm_eps;
  const AttentionShape shape = attention_shape();
  const int64_t qd = static_cast<int64_t>(spec_.num_heads) * spec_.head_dim;
  const int64_t kvd = static_cast<int64_t>(spec_.num_kv_heads) * spec_.head_dim;
  Tensor a = a_.t.row_slice(0, n), qkv = qkv_.t.row_slice(0, n);
  Tensor q = qkv.col_slice(0, qd), k = qkv.col_slice(qd, kvd), v = qkv.col_slice(qd + kvd, kvd);
  Tensor attn = attn_.t.row_slice(0, n), gu = gu_.t.row_slice(0, n), m = m_.t.row_slice(0, n);
  Tensor pos = rows.row_pos;
  const float theta = static_cast<float>(spec_.rope_theta);
  // Attention block: x += o(attention(rope(q), rope(k), v)) over the paged cache.
  be_.rms_norm(x, w.input_norm.t, eps, a);
  be_.gemm(a, w.qkv_w.t, &w.qkv_b.t, qkv, Epilogue::kNone);  // q | k | v side by side in each row
  be_.discard(a);  // (a backend that fed the GEMM from its own copy of a may leave a unwritten)
  be_.rope(q, pos, spec_.num_heads, spec_.head_dim, theta);
  be_.rope(k, pos, spec_.num_kv_heads, spec_.head_dim, theta);
  be_.kv_write(k, v, rows, kv, shape);
  be_.paged_attention(q, rows, kv, shape, attn);
  be_.discard(q);  // (a backend that applied q's rope inside attention leaves q as it was)
  be_.gemm(attn, w.o_w.t, nullptr, x, Epilogue::kAddResidual);
  // MLP block: x += down(silu(gate(m)) ⊙ up(m)).
  be_.rms_norm(x, w.post_norm.t, eps, a);
  be_.gemm(a, w.gate_up_w.t, nullptr, gu, Epilogue::kNone);
  be_.silu_mul(gu, m);
  be_.gemm(m, w.down_w.t, nullptr, x, Epilogue::kAddResidual);
  be_.discard(gu);  // (all three are rewritten before they are read again)
  be_.discard(m);
  be_.discard(a);
}

Result<StepOutput> Qwen2Decoder::forward(const StepPlan& plan, KvView& kv) { return run(plan, kv, nullptr, 0); }

Result<StepOutput> Qwen2Decoder::forward_from(const StepPlan& plan, KvView& kv, const Tensor& hidden,
                                              int first_layer) {
  if (first_layer < 0 || first_layer > spec_.num_layers) {
    return out_of_range("first layer " + std::to_string(first_layer) + " outside 0.." + std::to_string(spec_.num_layers));
  }
  if (first_layer < opt_.layer_begin || first_layer > opt_.layer_end) {
    return out_of_range("first layer " + std::to_string(first_layer) + " outside this decoder's layers " +
                        std::to_string(opt_.layer_begin) + ".." + std::to_string(opt_.layer_end - 1));
  }
  return run(plan, kv, &hidden, first_layer);
}

Result<StepOutput> Qwen2Decoder::run(const StepPlan& plan, KvView& kv, const Tensor* hidden, int first_layer) {
  if (!hidden && opt_.layer_begin > 0) {
    return invalid_argument("this decoder shard starts at layer " + std::to_string(opt_.layer_begin) +
                            ": it runs from the previous shard's hidden rows (forward_from)");
  }
  using Clock = std::chrono::steady_clock;
  const auto t_enter = Clock::now();
  int64_t n = 0;
  AttentionRows rows;
  VV_RETURN_IF_ERROR(stage_rows(plan, kv, &n, &rows));
  const auto t_staged = Clock::now();
  // One row per sequence, each wanting output, none of them a speech row, from the first layer to
  // the head: the step's ops follow from its shape alone, so a backend may replay them by handle.
  bool replayable = !hidden && first_layer == 0 && ends_model() && !capture_ && !layer_hook_ &&
                    n == static_cast<int64_t>(plan.seqs.size());
  for (size_t si = 0; replayable && si < plan.seqs.size(); ++si)
    replayable = plan.seqs[si].want_output && plan.seqs[si].ids[0] != audio_token_;
  bool logprob = false;
  for (const SequenceRows& s : plan.seqs) logprob = logprob || (s.want_output && s.want_logprob);
  const ReplayShape shape{n, rows.block_tables.cols(), kv.layers.empty() ? nullptr : kv.layers[0].k.data,
                          logprob};
  const bool replayed =
      replayable && replay_handle_ != 0 && shape == replay_shape_ && be_.replay_flush(replay_handle_);

  // The LM head runs only on the last row of each sequence that wants output.
  StepOutput out;
  out.next.assign(plan.seqs.size(), -1);
  out.logits.resize(plan.seqs.size());
  if (logprob) out.logprob.assign(plan.seqs.size(), 0.0f);
  std::vector<size_t> wanted;
  int64_t row = 0;
  // Those last rows, in runs of consecutive rows (a decode step: one run of all of them).
  struct Run {
    int64_t src, dst, len;
  };
  std::vector<Run> runs;
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    row += static_cast<int64_t>(plan.seqs[si].ids.size());
    if (!plan.seqs[si].want_output) continue;
    if (runs.empty() || runs.back().src + runs.back().len != row - 1)
      runs.push_back({row - 1, static_cast<int64_t>(wanted.size()), 0});
    ++runs.back().len;
    wanted.push_back(si);
  }
  const int64_t m = static_cast<int64_t>(wanted.size());
  if (!replayed) {
    Tensor x = x_.t.row_slice(0, n);
    if (hidden) {
      if (hidden->rows() != n || hidden->cols() != spec_.hidden_size) {
        return invalid_argument("decoder input rows [" + std::to_string(hidden->rows()) + ", " +
                                std::to_string(hidden->cols()) + "] do not match the plan's " +
                                std::to_string(n) + " rows");
      }
      be_.copy(*hidden, x);
    } else {
      VV_RETURN_IF_ERROR(place_embeddings(plan, x));
    }
    if (capture_ && first_layer == 0) {
      capture_("inputs_embeds", x);
      capture_("hidden.0", x);
    }
    if (layer_hook_) layer_hook_(-1);
    for (int l = first_layer; l < opt_.layer_end; ++l) {
      if (layer_hook_) layer_hook_(l);
      run_layer(l, x, rows, kv.layers[l]);
      if (capture_) capture_("hidden." + std::to_string(l + 1), x);
    }
    if (!ends_model()) return out;  // a shard before the last: the rows stay in x_ for the next shard
    if (capture_) {
      Tensor a = a_.t.row_slice(0, n);
      be_.rms_norm(x, final_norm_.t, spec_.rms_norm_eps, a);
      capture_("hidden.norm", a);
    }
    if (wanted.empty()) return out;
    // One run is read where it is; several are gathered into last_ first.
    Tensor rows_in = x.row_slice(runs.front().src, m);
    if (runs.size() > 1) {
      for (const Run& r : runs) {
        Tensor dst = last_.t.row_slice(r.dst, r.len);
        be_.copy(x.row_slice(r.src, r.len), dst);
      }
      rows_in = last_.t.row_slice(0, m);
    }
    // The final norm into rows of its own (a_'s, free here), not in place: a backend may then run it
    // inside the LM head's launch (the CUDA one-row GEMV's norm prologue) and skip writing it.
    Tensor last = a_.t.row_slice(0, m);
    be_.rms_norm(rows_in, final_norm_.t, spec_.rms_norm_eps, last);
    Tensor logits = logits_.t.row_slice(0, m);
    be_.gemm(last, *lm_head_, nullptr, logits, Epilogue::kNone);
    be_.discard(last);
    if (capture_) capture_("logits.last", logits);
    Tensor next = Tensor::vector(next_.buf.data(), DType::kI32, m);
    if (logprob) {
      Tensor lp = Tensor::vector(static_cast<int32_t*>(next_.buf.data()) + m, DType::kF32, m);
      be_.argmax_logprob(logits, next, lp);
    } else {
      be_.argmax(logits, next);
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(m));
  const auto t_recorded = Clock::now();
  out.stage_seconds = std::chrono::duration<double>(t_staged - t_enter).count();
  out.record_seconds = std::chrono::duration<double>(t_recorded - t_staged).count();
  // The ids and (asked for) the logprobs after them: one copy.
  be_.download(h_next_.data(), next_.buf.data(), (logprob ? 2 : 1) * ids.size() * sizeof(int32_t));
  meta_in_flight_ = false;  // the download waited for the step, and so for its metadata's copy
  std::memcpy(ids.data(), h_next_.data(), ids.size() * sizeof(int32_t));
  const float* lps = reinterpret_cast<const float*>(static_cast<const int32_t*>(h_next_.data()) + m);
  if (!replayed) {  // the download launched the ops: was that a sequence the backend can launch again?
    replay_handle_ = replayable ? be_.last_flush_handle() : 0;
    replay_shape_ = shape;
  }
  const int64_t V = spec_.vocab_size;
  const float* dev_logits = static_cast<const float*>(logits_.buf.data());
  const size_t row_bytes = static_cast<size_t>(V) * sizeof(float);
  for (int64_t j = 0; j < m; ++j) {
    out.next[wanted[j]] = ids[j];
    if (logprob) out.logprob[wanted[j]] = lps[j];
    // Logits rows only for the sequences that asked (sampling, logprobs): each is a [V] host copy
    // that the step waits on.
    const bool asked = plan.return_logits || plan.seqs[wanted[j]].want_logits;
    if (asked && (plan.return_logits || !plan.logits_host)) {
      auto& dst = out.logits[wanted[j]];
      dst.resize(static_cast<size_t>(V));
      be_.download(dst.data(), dev_logits + j * V, row_bytes);
    }
  }
  if (plan.logits_host && !plan.return_logits) {
    // Into the caller's memory: one copy for each run of rows whose sequences follow one another.
    for (int64_t j = 0; j < m;) {
      if (!plan.seqs[wanted[j]].want_logits) {
        ++j;
        continue;
      }
      int64_t e = j + 1;
      while (e < m && plan.seqs[wanted[e]].want_logits && wanted[e] == wanted[j] + static_cast<size_t>(e - j))
        ++e;
      be_.download(plan.logits_host + static_cast<int64_t>(wanted[j]) * V, dev_logits + j * V,
                   static_cast<size_t>(e - j) * row_bytes);
      j = e;
    }
  }
  return out;
}

}  // namespace vv
