// BatchTranscriber: runs a fixed set of transcription requests to completion on one Runner — the
// offline path of `vibevoice transcribe` (several files are decoded together, each a sequence of
// the same batched decoder steps). Encodes each clip, prefills in chunks, samples with the request's
// own Sampler, stops on stop ids / length / a repetition loop, and assembles the Transcript.
// Borrows the Runner and Tokenizer; one thread drives it (the Runner's engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/status.h"
#include "engine/audio/audio_preparer.h"
#include "engine/runner/runner.h"
#include "engine/sampling/sampling_params.h"
#include "engine/text/tokenizer.h"
#include "engine/transcript/transcript.h"

namespace vv {

struct TranscriptionRequest {
  std::string name;              // shown in progress and errors (the file name)
  audio::PreparedAudio audio;    // normalised, padded 24 kHz samples
  std::string context;           // "extra info" (compose_context); empty for none
  SamplingParams sampling;
  EncodeOptions encode;          // segment length, acoustic sampling mode
  bool add_generation_prompt = false;
};

struct TranscriptionResult {
  std::vector<TokenId> prompt_ids;
  std::vector<TokenId> generated_ids;  // every generated id, stop id included
  std::string raw_text;                // generated text, special tokens kept
  Transcript transcript;
  double encode_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
};

struct TranscriptionProgress {
  enum class Phase { kEncoding, kPrefill, kDecoding, kDone };
  Phase phase = Phase::kEncoding;
  size_t request = 0;          // index of the request this is about
  int64_t done = 0, total = 0;  // frames encoded / prompt rows prefilled / tokens generated (total = cap)
  double tokens_per_second = 0;  // decode rate over all requests so far
};
using ProgressFn = std::function<void(const TranscriptionProgress&)>;

class BatchTranscriber {
 public:
  BatchTranscriber(Runner& runner, const Tokenizer& tokenizer) : runner_(runner), tokenizer_(tokenizer) {}
  // Runs every request; the results are in request order. Fails as a whole only on a device or
  // capacity error (naming the request); a malformed model answer is a Transcript with the
  // fallback segment, never an error.
  Result<std::vector<TranscriptionResult>> run(const std::vector<TranscriptionRequest>& requests,
                                               const ProgressFn& progress = {});

 private:
  Runner& runner_;
  const Tokenizer& tokenizer_;
};

}  // namespace vv
