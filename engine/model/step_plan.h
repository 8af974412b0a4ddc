// StepPlan: the rows one decoder step runs — a flat list of row groups, each a prefill chunk or a
// decode row of one sequence, with that sequence's KV block table — StepOutput, what comes back,
// and KvView, the paged KV memory they run against. Plain values built by the scheduler (or the
// Runner's single-request path) and read by Qwen2Decoder::forward on the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace vv {

using TokenId = int32_t;
using BlockId = int32_t;

// The rows of one sequence in this step: positions start_pos .. start_pos + ids.size() − 1.
struct SequenceRows {
  std::vector<TokenId> ids;        // one token per row; rows whose id is the model's audio token
                                   // (<|box_start|>) take the next speech row instead of an embedding
  int64_t start_pos = 0;           // absolute position of ids[0]; earlier positions are in the KV cache
  std::vector<BlockId> blocks;     // the sequence's block table: physical KV block of logical block i;
                                   // must cover start_pos + ids.size() positions
  const Tensor* speech = nullptr;  // F32 [F, H] on the backend: the sequence's speech rows
  int64_t speech_begin = 0;        // speech row that the chunk's first audio-token row takes
  bool want_output = true;         // return the next token (and logits if asked) of the last row
  bool want_logits = false;        // with want_output: also return that row's logits
  bool want_logprob = false;       // with want_output: also the log-softmax of the next (greedy) token,
                                   // computed on the device (Backend::argmax_logprob): no logits cross
};

struct StepPlan {
  std::vector<SequenceRows> seqs;
  bool return_logits = false;      // also download the logits row of each sequence that wants output
  // Where the rows of want_logits sequences go instead of StepOutput::logits: sequence i's row at
  // logits_host + i·V (the caller's memory, at least seqs.size()·V floats; Backend::allocate_host's
  // copies fastest: one copy for each run of consecutive rows). Not with return_logits' rows.
  float* logits_host = nullptr;
};

struct StepOutput {
  std::vector<TokenId> next;                // per seq: greedy argmax of its last row (lowest id on ties); −1 if not wanted
  std::vector<std::vector<float>> logits;   // per seq: [V] when wanted and asked for (but not into
                                            // StepPlan::logits_host), else empty
  std::vector<float> logprob;               // per seq: next's log-softmax where want_logprob, else 0
  // Host time of the step before its ids are downloaded (the last shard's decoder): staging the rows
  // (ids, positions, block tables uploaded) and recording the ops after that. A backend that defers
  // its ops (CUDA) launches them at the download, so the device waits for both.
  double stage_seconds = 0, record_seconds = 0;
};

// The paged KV memory of every decoder layer (owned by the runner's KvCache).
struct KvView {
  std::vector<KvLayer> layers;
  int block_size = 16;
  int64_t num_blocks = 0;
};

}  // namespace vv
