// Scheduler: continuous batching policy over one KV pool, in the style of nano-vllm / vLLM v1. Each
// step says how many tokens each running sequence computes — one decode row for every running
// sequence that is generating, then chunked prefill within a token budget, then admission of
// waiting sequences while their whole prompt fits in free blocks. When a decode row cannot get a
// block, the newest running sequence is preempted (blocks freed, re-queued at the head, recomputed
// later from its prompt and the tokens generated so far); a sequence that cannot fit even alone
// fails (never a silently truncated output). Never touches a tensor; owned by the EngineLoop (or a
// test) and called from one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/kv_manager.h"
#include "scheduler/request.h"

namespace vv {

struct SchedulerConfig {
  std::int64_t num_blocks = 512;  // the KV pool (the Runner's KvCache::num_blocks)
  int block_size = 16;
  int max_running = 64;     // sequences in the batch (<= the runner's max_seqs)
  int token_budget = 512;   // rows per step (the runner's max_rows); >= max_running
  int prefill_chunk = 256;  // prompt rows one sequence contributes to a step
  bool prefix_sharing = true;
};

// What the scheduler knows of one request.
struct Sequence {
  enum class State : std::uint8_t { kWaiting, kRunning, kFinished };
  RequestId id = 0;
  int priority = 0;
  std::vector<TokenId> tokens;  // prompt, then every generated token
  std::int64_t prompt_len = 0;
  std::int64_t shareable = 0;    // tokens[0, shareable) may share KV blocks with other requests
  std::int64_t computable = -1;  // positions that may be computed now (-1 = all): the rows
                                 // after it wait for the encoder
  std::int64_t computed = 0;     // positions in the KV cache
  State state = State::kWaiting;
  std::uint64_t order = 0;  // arrival order (FIFO within a priority)
  int preemptions = 0;

  std::int64_t limit() const {
    const auto n = static_cast<std::int64_t>(tokens.size());
    return computable < 0 ? n : std::min(computable, n);
  }
  std::int64_t generated() const { return static_cast<std::int64_t>(tokens.size()) - prompt_len; }
};

// One sequence's rows in a step: positions [start, start + count).
struct ScheduledChunk {
  RequestId id = 0;
  std::int64_t start = 0;
  std::int64_t count = 0;
  bool want_output = false;  // the chunk reaches the last token: a next token comes back
};

struct SchedulerStep {
  std::vector<ScheduledChunk> chunks;
  std::vector<RequestId> admitted;   // moved from waiting to running in this step (first time or resumed)
  std::vector<RequestId> preempted;  // blocks freed, back to waiting; recomputed later
  std::vector<RequestId> failed;     // cannot fit in the pool even alone: finished, blocks freed
  std::int64_t rows() const {
    std::int64_t n = 0;
    for (const auto& c : chunks) n += c.count;
    return n;
  }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a sequence (tokens = its prompt). Its id must be new.
  void add(Sequence seq);
  // Forgets a waiting or running sequence and frees its blocks now. False if unknown.
  bool abort(RequestId id);
  // Decides this step. The chunks' KV blocks are already in the tables (kv().table(id)).
  SchedulerStep schedule();
  // The runner computed the step: advances each chunk's sequence and registers shareable blocks.
  void complete(const SchedulerStep& step);
  // A sampled token for a sequence whose chunk wanted output.
  void append_token(RequestId id, TokenId token);
  // The sequence is done (stop, length, error): frees its blocks and forgets it.
  void finish(RequestId id);
  // Drops the generated tokens past the first `tokens` (a repetition loop cut back): the next step
  // recomputes the last kept token's row. Its KV blocks stay (they are rewritten as it grows).
  void truncate(RequestId id, std::int64_t tokens);
  // More of the prompt may be computed now (the encoder produced its rows); -1 = all.
  void set_computable(RequestId id, std::int64_t positions);

  const Sequence* find(RequestId id) const;
  const std::deque<RequestId>& waiting() const { return waiting_; }
  const std::vector<RequestId>& running() const { return running_; }
  const KvManager& kv() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  std::int64_t preemptions() const { return preemptions_; }

 private:
  Sequence& seq(RequestId id) { return *seqs_.at(id); }
  void preempt(RequestId id, SchedulerStep& step);
  bool try_admit(Sequence& s, SchedulerStep& step);
  void insert_waiting(const Sequence& s);

  SchedulerConfig config_;
  KvManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> seqs_;
  std::deque<RequestId> waiting_;   // next to admit first
  std::vector<RequestId> running_;  // in admission order (newest last)
  std::uint64_t next_order_ = 0;
  std::int64_t preemptions_ = 0;
};

}  // namespace vv
