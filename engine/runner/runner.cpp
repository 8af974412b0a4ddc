#include "engine/runner/runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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

}  // namespace

Result<std::unique_ptr<Runner>> Runner::create(std::unique_ptr<Backend> backend, const Checkpoint& ckpt,
                                               const RunnerOptions& opt) {
  if (!backend) return invalid_argument("runner: no backend");
  if (opt.block_size < 1 || opt.kv_positions < 1 || opt.prefill_chunk < 1) {
    return invalid_argument("runner: block_size, kv_positions and prefill_chunk must be positive");
  }
  std::unique_ptr<Runner> r(new Runner());
  r->backend_ = std::move(backend);
  r->spec_ = ckpt.spec();
  r->opt_ = opt;
  Backend& be = *r->backend_;
  // Restores the previous upload hook however this function returns.
  struct HookGuard {
    UploadedFn old;
    ~HookGuard() { set_upload_hook(std::move(old)); }
  } guard{set_upload_hook(opt.consume_weights ? UploadedFn(drop_host_pages) : UploadedFn())};
  VV_ASSIGN_OR_RETURN(r->speech_, SpeechEmbedder::create(be, r->spec_, ckpt.weights(), opt.encoder_segment));
  const int64_t blocks = (opt.kv_positions + opt.block_size - 1) / opt.block_size;
  DecoderOptions dopt;
  dopt.max_rows = opt.max_rows;
  dopt.max_seqs = opt.max_seqs;
  dopt.max_blocks_per_seq = static_cast<int>(blocks);
  VV_ASSIGN_OR_RETURN(r->decoder_, Qwen2Decoder::create(be, r->spec_, ckpt.weights().decoder, dopt));
  VV_ASSIGN_OR_RETURN(r->kv_, KvCache::create(be, r->spec_.decoder, blocks, opt.block_size, opt.kv_dtype));
  return r;
}

Result<SpeechRows> Runner::encode(const float* samples, int64_t n, const EncodeOptions& opt) {
  return speech_->embed(samples, n, opt);
}

Result<StepOutput> Runner::execute(const StepPlan& plan) { return decoder_->forward(plan, kv_->view()); }

void Runner::set_capture(CaptureFn fn) {
  speech_->set_capture(fn);
  decoder_->set_capture(std::move(fn));
}

namespace {

struct Active {
  const GreedyRequest* req = nullptr;
  std::vector<BlockId> blocks;
  int64_t pos = 0;           // rows already in the KV cache
  int64_t speech_used = 0;   // audio-token rows already placed
  std::vector<TokenId> out;
  bool done = false;
};

}  // namespace

Result<std::vector<std::vector<TokenId>>> Runner::generate_greedy(const std::vector<GreedyRequest>& requests) {
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
      status = kv_->reserve(s.blocks, s.pos + static_cast<int64_t>(rows.ids.size()));
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
    kv_->release(s.blocks);
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
