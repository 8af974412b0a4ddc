#include "scheduler/batch_transcriber.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "engine/sampling/repetition_detector.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_condition.h"
#include "engine/text/incremental_decoder.h"
#include "engine/text/prompt_builder.h"
#include "engine/transcript/transcript_assembler.h"

namespace vv {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The decode state of one request.
struct Active {
  const TranscriptionRequest* req = nullptr;
  TranscriptionResult* out = nullptr;
  SpeechRows speech;
  std::vector<BlockId> blocks;
  int64_t pos = 0;          // rows already in the KV cache
  int64_t speech_used = 0;  // speech rows consumed by prefill so far
  bool done = false;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StopCondition> stop;
  std::unique_ptr<RepetitionDetector> repetition;
  std::unique_ptr<IncrementalDecoder> text;
  std::unique_ptr<TranscriptAssembler> assembler;
  std::vector<TranscriptEvent> events;  // scratch

  bool needs_logits() const { return req->sampling.temperature > 0 || req->sampling.logprobs; }
};

void finish(Active& s, FinishReason reason) {
  s.done = true;
  std::string tail = s.text->flush();
  if (!tail.empty()) s.assembler->feed(tail, s.events);
  s.assembler->finish(s.events);
  s.out->transcript = s.assembler->transcript();
  s.out->transcript.finish_reason = reason;
  s.out->raw_text += tail;
}

}  // namespace

Result<std::vector<TranscriptionResult>> BatchTranscriber::run(const std::vector<TranscriptionRequest>& requests,
                                                               const ProgressFn& progress) {
  std::vector<TranscriptionResult> results(requests.size());
  std::vector<Active> seqs(requests.size());
  const ModelSpec& spec = runner_.spec();
  KvCache& kv = runner_.kv();

  // Encode every clip and build its prompt.
  for (size_t i = 0; i < requests.size(); ++i) {
    const TranscriptionRequest& req = requests[i];
    Active& s = seqs[i];
    s.req = &req;
    s.out = &results[i];
    VV_RETURN_IF_ERROR(validate(req.sampling));
    if (progress) progress({TranscriptionProgress::Phase::kEncoding, i, 0, req.audio.frames, 0});
    const auto t0 = Clock::now();
    auto speech = runner_.encode(req.audio.input_values.data(), static_cast<int64_t>(req.audio.input_values.size()),
                                 req.encode);
    if (!speech.is_ok()) return Status(speech.status().code(), req.name + ": " + speech.status().message());
    s.speech = std::move(speech).value();
    s.out->encode_seconds = seconds_since(t0);
    if (progress) progress({TranscriptionProgress::Phase::kEncoding, i, s.speech.frames(), req.audio.frames, 0});
    auto prompt = build_asr_prompt(tokenizer_, s.speech.frames(), req.audio.samples, req.context,
                                   req.add_generation_prompt);
    if (!prompt.is_ok()) return Status(prompt.status().code(), req.name + ": " + prompt.status().message());
    s.out->prompt_ids = std::move(prompt->ids);
    const int64_t limit = spec.decoder.max_position_embeddings;
    if (limit > 0 && static_cast<int64_t>(s.out->prompt_ids.size()) >= limit) {
      return out_of_range(req.name + ": the prompt has " + std::to_string(s.out->prompt_ids.size()) +
                          " tokens; the decoder's context is " + std::to_string(limit));
    }
    s.sampler = std::make_unique<Sampler>(req.sampling);
    s.stop = std::make_unique<StopCondition>(req.sampling);
    s.repetition = std::make_unique<RepetitionDetector>();
    s.text = std::make_unique<IncrementalDecoder>(tokenizer_);
    s.assembler = std::make_unique<TranscriptAssembler>(static_cast<double>(req.audio.samples) / spec.sample_rate);
  }

  const RunnerOptions& opt = runner_.options();
  Status status = Status::ok();
  int64_t generated_total = 0;
  double decode_time = 0;
  while (status.is_ok()) {
    StepPlan plan;
    std::vector<size_t> who;
    int64_t budget = opt.max_rows;
    bool any_prefill = false;
    for (size_t i = 0; i < seqs.size() && budget > 0 && static_cast<int>(who.size()) < opt.max_seqs; ++i) {
      Active& s = seqs[i];
      if (s.done) continue;
      const auto& prompt = s.out->prompt_ids;
      const int64_t plen = static_cast<int64_t>(prompt.size());
      SequenceRows rows;
      rows.start_pos = s.pos;
      rows.speech = &s.speech.rows.t;
      rows.speech_begin = s.speech_used;
      if (s.pos < plen) {
        const int64_t n = std::min<int64_t>({opt.prefill_chunk, plen - s.pos, budget});
        rows.ids.assign(prompt.begin() + s.pos, prompt.begin() + s.pos + n);
        rows.want_output = s.pos + n == plen;
        any_prefill = true;
      } else {
        rows.ids.push_back(s.out->generated_ids.back());
      }
      const int64_t limit = spec.decoder.max_position_embeddings;
      if (limit > 0 && s.pos + static_cast<int64_t>(rows.ids.size()) > limit) {
        finish(s, FinishReason::kLength);
        continue;
      }
      Status reserved = kv.reserve(s.blocks, s.pos + static_cast<int64_t>(rows.ids.size()));
      if (!reserved.is_ok()) {
        status = Status(reserved.code(), s.req->name + ": the KV cache is full (" + std::to_string(kv.num_blocks()) +
                                             " blocks of " + std::to_string(kv.block_size()) +
                                             " positions); raise --kv-positions");
        break;
      }
      rows.blocks = s.blocks;
      budget -= static_cast<int64_t>(rows.ids.size());
      rows.want_logits = rows.want_output && s.needs_logits();
      plan.seqs.push_back(std::move(rows));
      who.push_back(i);
    }
    if (!status.is_ok() || who.empty()) break;

    const auto t0 = Clock::now();
    auto res = runner_.execute(plan);
    if (!res.is_ok()) {
      status = res.status();
      break;
    }
    const double step_seconds = seconds_since(t0);
    if (!any_prefill) decode_time += step_seconds;

    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      Active& s = seqs[i];
      const SequenceRows& rows = plan.seqs[j];
      s.pos += static_cast<int64_t>(rows.ids.size());
      s.speech_used += std::count(rows.ids.begin(), rows.ids.end(), spec.audio_token_id);
      (rows.ids.size() > 1 || s.out->generated_ids.empty() ? s.out->prefill_seconds : s.out->decode_seconds) +=
          step_seconds;
      if (!rows.want_output) {
        if (progress) {
          progress({TranscriptionProgress::Phase::kPrefill, i, s.pos,
                    static_cast<int64_t>(s.out->prompt_ids.size()), 0});
        }
        continue;
      }
      TokenId next = res->next[j];
      if (s.needs_logits() && j < res->logits.size() && !res->logits[j].empty()) {
        next = s.sampler->sample(res->logits[j]).id;
      }
      s.out->generated_ids.push_back(next);
      ++generated_total;
      const FinishReason reason = s.stop->append(next);
      if (!s.stop->is_stop_id(next)) {
        std::string piece = s.text->push(next);
        s.out->raw_text += piece;
        s.assembler->feed(piece, s.events);
      } else {
        s.out->raw_text += std::string(tokenizer_.token_bytes(next));
      }
      if (reason != FinishReason::kNone) {
        finish(s, reason);
      } else if (!s.req->sampling.ignore_eos && s.repetition->append(next)) {
        finish(s, FinishReason::kRepetition);
      }
      if (progress) {
        progress({s.done ? TranscriptionProgress::Phase::kDone : TranscriptionProgress::Phase::kDecoding, i,
                  static_cast<int64_t>(s.out->generated_ids.size()), s.req->sampling.max_new_tokens,
                  decode_time > 0 ? static_cast<double>(generated_total) / decode_time : 0});
      }
    }
  }
  for (Active& s : seqs) kv.release(s.blocks);
  if (!status.is_ok()) return status;
  return results;
}

}  // namespace vv
