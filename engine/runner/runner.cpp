#include "engine/runner/runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace vv {
namespace {

// Gives the whole pages inside [data, data + bytes) back to the kernel (partial pages at either end
// stay: they may hold a neighbouring tensor).
void drop_host_pages(const void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Layers per shard: as even as possible without caps; with caps, in proportion to what each
// device's cap leaves once the memory already in use, the scratch reserve, the workspace and the
// smallest KV pool are counted, and the encoders with the embedding on the first device, the head
// on the last. At least one layer each (a shard that then does not fit fails, naming its cap).
std::vector<int> split_layers(const std::vector<std::unique_ptr<Backend>>& backends, const Checkpoint& ckpt,
                              const RunnerOptions& opt) {
  const int n = static_cast<int>(backends.size());
  const DecoderSpec& ds = ckpt.spec().decoder;
  const int L = ds.num_layers;
  std::vector<int> out;
  bool capped = opt.memory_cap > 0;
  for (size_t c : opt.shard_memory_caps) capped = capped || c > 0;
  if (!capped || n == 1 || n > L) {
    for (int i = 0; i < n; ++i) out.push_back(L / n + (i < L % n ? 1 : 0));
    return out;
  }
  const DecoderBytes all = decoder_bytes(ds, ckpt.weights().decoder, opt.max_rows, opt.max_seqs, 1, 0, L, 0);
  size_t layer_bytes = 0;
  for (size_t b : all.layers) layer_bytes += b;
  const double per_layer = static_cast<double>(layer_bytes) / L;
  const int64_t min_kv =
      opt.min_kv_positions > 0 ? opt.min_kv_positions : std::min<int64_t>(opt.kv_positions, 2048);
  std::vector<double> budget(static_cast<size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const size_t cap =
        static_cast<size_t>(i) < opt.shard_memory_caps.size() ? opt.shard_memory_caps[i] : opt.memory_cap;
    size_t fr = 0, total = 0;
    const bool reports = backends[i]->device_memory(&fr, &total);
    double b = static_cast<double>(cap) - (reports ? static_cast<double>(total - fr) + (256 << 20) : 0.0) -
               static_cast<double>(all.workspace) -
               static_cast<double>(KvCache::bytes_per_position(ds, opt.kv_dtype, L / n + 1) * min_kv);
    if (i == 0) b -= static_cast<double>(speech_bytes(ckpt.weights()) + all.embed);
    if (i == n - 1) b -= static_cast<double>(all.head);
    budget[i] = std::max(b, per_layer);  // a cap that leaves nothing still gets one layer (and fails)
    sum += budget[i];
  }
  int given = 0;
  std::vector<std::pair<double, int>> rest;
  for (int i = 0; i < n; ++i) {
    const double share = L * budget[i] / sum;
    out.push_back(std::max(1, static_cast<int>(share)));
    given += out.back();
    rest.push_back({share - static_cast<int>(share), i});
  }
  std::sort(rest.begin(), rest.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (size_t k = 0; given < L; k = (k + 1) % rest.size(), ++given) ++out[rest[k].second];
  for (int i = n - 1; given > L; i = (i + n - 1) % n) {
    if (out[i] > 1) {
      --out[i];
      --given;
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Runner>> Runner::create(std::unique_ptr<Backend> backend, const Checkpoint& ckpt,
                                               const RunnerOptions& opt) {
  std::vector<std::unique_ptr<Backend>> one;
  one.push_back(std::move(backend));
  return create_sharded(std::move(one), ckpt, opt);
}

Result<std::unique_ptr<Runner>> Runner::create_sharded(std::vector<std::unique_ptr<Backend>> backends,
                                                       const Checkpoint& ckpt, const RunnerOptions& opt,
                                                       std::vector<int> layers_per_shard) {
  if (backends.empty()) return invalid_argument("runner: no backend");
  for (const auto& b : backends) {
    if (!b) return invalid_argument("runner: no backend");
  }
  if (opt.block_size < 1 || opt.kv_positions < 1 || opt.prefill_chunk < 1) {
    return invalid_argument("runner: block_size, kv_positions and prefill_chunk must be positive");
  }
  const int L = ckpt.spec().decoder.num_layers;
  const int n = static_cast<int>(backends.size());
  if (layers_per_shard.empty()) layers_per_shard = split_layers(backends, ckpt, opt);
  if (static_cast<int>(layers_per_shard.size()) != n) {
    return invalid_argument("runner: " + std::to_string(layers_per_shard.size()) + " layer counts for " +
                            std::to_string(n) + " devices");
  }
  int sum = 0;
  for (int c : layers_per_shard) {
    if (c < 1) return invalid_argument("runner: every layer shard needs at least one decoder layer");
    sum += c;
  }
  if (sum != L) {
    return invalid_argument("runner: the layer shards hold " + std::to_string(sum) +
                            " layers, the model has " + std::to_string(L));
  }
  std::unique_ptr<Runner> r(new Runner());
  r->spec_ = ckpt.spec();
  r->opt_ = opt;
  for (auto& b : backends) {
    Shard s;
    s.backend = std::move(b);
    r->shards_.push_back(std::move(s));
  }
  r->pad_ = opt.decode_pad >= 0 ? opt.decode_pad : r->backend().name().rfind("cuda", 0) == 0 ? 8 : 0;
  // Restores the previous upload hook however this function returns.
  struct HookGuard {
    UploadedFn old;
    ~HookGuard() { set_upload_hook(std::move(old)); }
  } guard{set_upload_hook(opt.consume_weights ? UploadedFn(drop_host_pages) : UploadedFn())};
  int begin = 0;
  for (int i = 0; i < n; ++i) {
    VV_RETURN_IF_ERROR(r->bind_shard(static_cast<size_t>(i), ckpt, begin, begin + layers_per_shard[i]));
    begin += layers_per_shard[i];
  }
  // One set of block ids for every shard: the smallest pool any shard's budget allows.
  int64_t positions = opt.kv_positions;
  for (const Shard& s : r->shards_) positions = std::min(positions, s.plan.kv_positions);
  const int64_t blocks = (positions + opt.block_size - 1) / opt.block_size;
  begin = 0;
  for (int i = 0; i < n; ++i) {
    Shard& s = r->shards_[static_cast<size_t>(i)];
    // Padding rows get a block of their own past the scheduler's (the same id on every shard).
    VV_ASSIGN_OR_RETURN(
        s.kv, KvCache::create(*s.backend, r->spec_.decoder, blocks + (r->pad_ > 0 ? 1 : 0), opt.block_size,
                              opt.kv_dtype, begin, begin + layers_per_shard[i]));
    if (r->pad_ > 0) r->pad_block_ = s.kv->set_aside_last_block();
    begin += layers_per_shard[i];
    s.plan.kv_positions = blocks * opt.block_size;
  }
  if (r->pad_block_ < 0) r->pad_ = 0;
  if (n > 1)
    r->staging_.resize(static_cast<size_t>(opt.max_rows) * static_cast<size_t>(r->spec_.decoder.hidden_size));
  return r;
}

Status Runner::bind_shard(size_t i, const Checkpoint& ckpt, int layer_begin, int layer_end) {
  Shard& s = shards_[i];
  Backend& be = *s.backend;
  const DecoderSpec& ds = spec_.decoder;
  size_t free_bytes = 0, total_bytes = 0;
  const bool reports = be.device_memory(&free_bytes, &total_bytes);
  MemoryPlanInput in;
  in.cap = i < opt_.shard_memory_caps.size() ? opt_.shard_memory_caps[i] : opt_.memory_cap;
  in.in_use = reports ? total_bytes - free_bytes : 0;
  const size_t allocated_before = be.allocated_bytes();
  if (i == 0) {
    VV_ASSIGN_OR_RETURN(speech_, SpeechEmbedder::create(be, spec_, ckpt.weights(), opt_.encoder_segment,
                                                        opt_.encoder_pack_samples));
    in.encoders = be.allocated_bytes() - allocated_before;
    // On a device that reports its memory, what the encoders really took (allocation rounding,
    // modules loaded on first use) rather than the bytes asked for.
    if (reports && be.device_memory(&free_bytes, &total_bytes) && total_bytes - free_bytes > in.in_use) {
      in.encoders = std::max(in.encoders, total_bytes - free_bytes - in.in_use);
    }
  }
  const int64_t blocks = (opt_.kv_positions + opt_.block_size - 1) / opt_.block_size;
  DecoderOptions dopt;
  dopt.max_rows = opt_.max_rows;
  dopt.max_seqs = opt_.max_seqs;
  dopt.max_blocks_per_seq = static_cast<int>(blocks);
  dopt.layer_begin = layer_begin;
  dopt.layer_end = layer_end;
  in.decoder = decoder_bytes(ds, ckpt.weights().decoder, dopt.max_rows, dopt.max_seqs,
                             dopt.max_blocks_per_seq, layer_begin, layer_end, reports ? size_t{2} << 20 : 0);
  if (i > 0)
    in.decoder.workspace += static_cast<size_t>(opt_.max_rows) * ds.hidden_size * sizeof(float);  // hidden_in
  in.scratch = opt_.scratch_reserve >= 0 ? static_cast<size_t>(opt_.scratch_reserve)
               : reports                 ? (size_t{256} << 20) +
                               static_cast<size_t>(opt_.max_rows) *
                                   static_cast<size_t>(std::max(ds.intermediate_size, ds.hidden_size)) * 2
                         : 0;
  in.kv_per_position = KvCache::bytes_per_position(ds, opt_.kv_dtype, layer_end - layer_begin);
  // The padding rows' KV block (RunnerOptions::decode_pad) is allocated beside the pool.
  if (pad_ > 0) in.scratch += in.kv_per_position * static_cast<size_t>(opt_.block_size);
  in.kv_positions = opt_.kv_positions;
  in.min_kv_positions =
      opt_.min_kv_positions > 0 ? opt_.min_kv_positions : std::min<int64_t>(opt_.kv_positions, 2048);
  in.block_size = opt_.block_size;
  in.gpu_layers = opt_.gpu_layers;
  auto plan = plan_memory(in);
  if (!plan.is_ok()) {
    const std::string where = shards_.size() > 1 ? "layer shard " + std::to_string(i) + " on " : "";
    return Status(plan.status().code(), where + be.name() + ": " + plan.status().message());
  }
  s.plan = *plan;
  const int resident = s.plan.resident_layers;
  if (layer_begin + resident < layer_end) {
    s.stream = std::make_unique<LayerStream>(be, layer_begin + resident, layer_end);
    LayerStream* stream = s.stream.get();
    dopt.layer_loaded = [stream](int l, const std::vector<DeviceTensor*>& tensors) {
      return stream->take(l, tensors);
    };
  }
  VV_ASSIGN_OR_RETURN(s.decoder, Qwen2Decoder::create(be, spec_, ckpt.weights().decoder, dopt));
  if (s.stream) {
    VV_RETURN_IF_ERROR(s.stream->finish());
    LayerStream* stream = s.stream.get();
    s.decoder->set_layer_hook([stream](int l) { stream->before_layer(l); });
  }
  if (i > 0) s.hidden_in = alloc_f32(be, opt_.max_rows, ds.hidden_size);
  return Status::ok();
}

Result<SpeechRows> Runner::encode(const float* samples, int64_t n, const EncodeOptions& opt) {
  return speech_->embed(samples, n, opt);
}

int64_t Runner::padded_seqs(int64_t seqs) const {
  if (pad_ <= 0 || seqs < 1) return seqs;
  int64_t to = 1;
  while (to < seqs && to < 8) to *= 2;
  if (to < seqs) to = (seqs + pad_ - 1) / pad_ * pad_;
  // The last bucket stops at what the workspaces hold (max_seqs 100: 97..100 sequences run as 100).
  return std::max(seqs, std::min<int64_t>({to, opt_.max_seqs, opt_.max_rows}));
}

Result<StepOutput> Runner::execute(const StepPlan& plan) {
  const auto t_enter = std::chrono::steady_clock::now();
  const auto n = static_cast<int64_t>(plan.seqs.size());
  bool one_row = pad_ > 0;
  for (size_t i = 0; one_row && i < plan.seqs.size(); ++i) one_row = plan.seqs[i].ids.size() == 1;
  const int64_t to = one_row ? padded_seqs(n) : n;
  const StepPlan* run = &plan;
  if (to > n) {
    padded_.seqs.resize(static_cast<size_t>(n));  // keeps the first elements' storage for the copies
    std::copy(plan.seqs.begin(), plan.seqs.end(), padded_.seqs.begin());
    padded_.return_logits = plan.return_logits;
    padded_.logits_host = plan.logits_host;  // the padding rows ask for none
    SequenceRows pad;
    pad.ids = {spec_.audio_token_id == 0 ? 1 : 0};  // a text token: no speech row
    pad.start_pos = 0;
    pad.blocks = {pad_block_};
    pad.want_output = true;  // as the real rows: one step shape whatever the mix
    padded_.seqs.resize(static_cast<size_t>(to), pad);
    run = &padded_;
  }
  const double pad_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_enter).count();
  VV_ASSIGN_OR_RETURN(StepOutput out, execute_shards(*run));
  out.stage_seconds += pad_seconds;
  // The ids were downloaded (a sync): any device error of the step (or of the encoder launches
  // before it) has been recorded by now. Its results cannot be trusted.
  for (const Shard& s : shards_) {
    const std::string e = s.backend->device_error();
    if (!e.empty()) return internal_error("device " + s.backend->name() + ": " + e);
  }
  if (to > n) {
    out.next.resize(static_cast<size_t>(n));
    if (out.logits.size() > static_cast<size_t>(n)) out.logits.resize(static_cast<size_t>(n));
  }
  return out;
}

Result<StepOutput> Runner::execute_shards(const StepPlan& plan) {
  VV_ASSIGN_OR_RETURN(StepOutput out, shards_[0].decoder->forward(plan, shards_[0].kv->view()));
  if (shards_.size() == 1) return out;
  int64_t n = 0;
  for (const SequenceRows& s : plan.seqs) n += static_cast<int64_t>(s.ids.size());
  const size_t bytes =
      static_cast<size_t>(n) * static_cast<size_t>(spec_.decoder.hidden_size) * sizeof(float);
  for (size_t i = 1; i < shards_.size(); ++i) {
    // Only the residual stream crosses, through host memory (download waits for the shard).
    Shard& prev = shards_[i - 1];
    Shard& s = shards_[i];
    prev.backend->download(staging_.data(), prev.decoder->hidden_rows(n).data, bytes);
    s.backend->upload(s.hidden_in.buf.data(), staging_.data(), bytes);
    const Tensor h = s.hidden_in.t.row_slice(0, n);
    VV_ASSIGN_OR_RETURN(out, s.decoder->forward_from(plan, s.kv->view(), h, s.decoder->layer_begin()));
  }
  return out;
}

void Runner::set_capture(CaptureFn fn) {
  speech_->set_capture(fn);
  for (Shard& s : shards_) s.decoder->set_capture(fn);
}

namespace {

struct Active {
  const GreedyRequest* req = nullptr;
  std::vector<BlockId> blocks;
  int64_t pos = 0;          // rows already in the KV cache
  int64_t speech_used = 0;  // audio-token rows already placed
  std::vector<TokenId> out;
  bool done = false;
};

}  // namespace

Result<std::vector<std::vector<TokenId>>> Runner::generate_greedy(
    const std::vector<GreedyRequest>& requests) {
  std::vector<Active> seqs(requests.size());
  Status status = Status::ok();
  for (size_t i = 0; i < requests.size() && status.is_ok(); ++i) {
    seqs[i].req = &requests[i];
    const GreedyRequest& q = requests[i];
    if (q.prompt.empty()) status = invalid_argument("request " + std::to_string(i) + " has an empty prompt");
    const int64_t pads = std::count(q.prompt.begin(), q.prompt.end(), spec_.audio_token_id);
    const int64_t rows = q.speech ? q.speech->rows() : 0;
    if (status.is_ok() && pads != rows) {  // MODEL.md §7.4: exactly one speech row per pad
      status = invalid_argument("request " + std::to_string(i) + ": the prompt has " + std::to_string(pads) +
                                " audio tokens (" + std::to_string(spec_.audio_token_id) + ") but " +
                                std::to_string(rows) + " speech rows were given");
    }
    seqs[i].done = requests[i].max_new_tokens <= 0;
  }
  while (status.is_ok()) {
    StepPlan plan;
    std::vector<size_t> who;
    int64_t budget = opt_.max_rows;
    for (size_t i = 0; i < seqs.size() && budget > 0 && static_cast<int>(who.size()) < opt_.max_seqs; ++i) {
      Active& s = seqs[i];
      if (s.done) continue;
      const auto& prompt = s.req->prompt;
      SequenceRows rows;
      rows.start_pos = s.pos;
      rows.speech = s.req->speech;
      rows.speech_begin = s.speech_used;
      const int64_t plen = static_cast<int64_t>(prompt.size());
      if (s.pos < plen) {
        const int64_t n = std::min<int64_t>({opt_.prefill_chunk, plen - s.pos, budget});
        rows.ids.assign(prompt.begin() + s.pos, prompt.begin() + s.pos + n);
        rows.want_output = s.pos + n == plen;
      } else {
        rows.ids.push_back(s.out.back());
        rows.want_output = true;
      }
      // Blocks are taken as the sequence grows, not for its whole budget up front.
      status = kv().reserve(s.blocks, s.pos + static_cast<int64_t>(rows.ids.size()));
      if (!status.is_ok()) break;
      rows.blocks = s.blocks;
      budget -= static_cast<int64_t>(rows.ids.size());
      plan.seqs.push_back(std::move(rows));
      who.push_back(i);
    }
    if (!status.is_ok() || who.empty()) break;
    auto res = execute(plan);
    if (!res.is_ok()) {
      status = res.status();
      break;
    }
    for (size_t j = 0; j < who.size(); ++j) {
      Active& s = seqs[who[j]];
      const SequenceRows& rows = plan.seqs[j];
      s.pos += static_cast<int64_t>(rows.ids.size());
      s.speech_used += std::count(rows.ids.begin(), rows.ids.end(), spec_.audio_token_id);
      if (!rows.want_output) continue;
      const TokenId next = res->next[j];
      s.out.push_back(next);
      const auto& stop = s.req->stop;
      if (static_cast<int>(s.out.size()) >= s.req->max_new_tokens ||
          std::find(stop.begin(), stop.end(), next) != stop.end()) {
        s.done = true;
      }
    }
  }
  std::vector<std::vector<TokenId>> out;
  for (Active& s : seqs) {
    kv().release(s.blocks);
    out.push_back(std::move(s.out));
  }
  if (!status.is_ok()) return status;
  return out;
}

Result<std::vector<TokenId>> Runner::generate_greedy(const GreedyRequest& request) {
  VV_ASSIGN_OR_RETURN(auto all, generate_greedy(std::vector<GreedyRequest>{request}));
  return std::move(all[0]);
}

}  // namespace vv
