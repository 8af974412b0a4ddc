#include "scheduler/scheduler.h"

#include <algorithm>
#include <unordered_set>

namespace vv {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), kv_(config.num_blocks, config.block_size) {}

void Scheduler::insert_waiting(const Sequence& s) {
  // Higher priority first, FIFO within a priority.
  auto it = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](RequestId w) { return seq(w).priority < s.priority; });
  waiting_.insert(it, s.id);
}

void Scheduler::add(Sequence s) {
  s.state = Sequence::State::kWaiting;
  s.order = next_order_++;
  s.computed = 0;
  s.prompt_len = static_cast<std::int64_t>(s.tokens.size());
  // At least the last prompt row is always computed: it gives the first token.
  s.shareable = std::clamp<std::int64_t>(s.shareable, 0, std::max<std::int64_t>(0, s.prompt_len - 1));
  const RequestId id = s.id;
  auto owned = std::make_unique<Sequence>(std::move(s));
  const Sequence& ref = *owned;
  seqs_[id] = std::move(owned);
  insert_waiting(ref);
}

const Sequence* Scheduler::find(RequestId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::finish(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  kv_.release(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  seqs_.erase(it);
}

bool Scheduler::abort(RequestId id) {
  if (!seqs_.count(id)) return false;
  finish(id);
  return true;
}

void Scheduler::append_token(RequestId id, TokenId token) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second->tokens.push_back(token);
}

void Scheduler::truncate(RequestId id, std::int64_t tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Sequence& q = *it->second;
  tokens = std::max(tokens, q.prompt_len);
  if (tokens >= static_cast<std::int64_t>(q.tokens.size())) return;
  q.tokens.resize(static_cast<std::size_t>(tokens));
  q.computed = std::min(q.computed, tokens - 1);
}

void Scheduler::set_computable(RequestId id, std::int64_t positions) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) it->second->computable = positions;
}

void Scheduler::preempt(RequestId id, SchedulerStep& step) {
  Sequence& s = seq(id);
  kv_.release(id);
  s.computed = 0;
  s.state = Sequence::State::kWaiting;
  ++s.preemptions;
  ++preemptions_;
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.push_front(id);  // resumes before anything that arrived later (API.md §13.1)
  step.preempted.push_back(id);
}

bool Scheduler::try_admit(Sequence& s, SchedulerStep& step) {
  const auto n = static_cast<std::int64_t>(s.tokens.size());
  const int bs = config_.block_size;
  if ((n + bs - 1) / bs > config_.num_blocks) {
    // Even alone in the pool the sequence would not fit: fail it rather than truncate.
    waiting_.pop_front();
    step.failed.push_back(s.id);
    seqs_.erase(s.id);
    return true;
  }
  s.computed = config_.prefix_sharing && s.shareable > 0 ? kv_.match_prefix(s.id, s.tokens, s.shareable) : 0;
  // The whole prompt (and what was generated before a preemption) is allocated now, so prefill
  // never runs dry; decode rows grow one block at a time. One block per running sequence is kept
  // free so that admitting does not at once preempt a running one.
  const std::int64_t reserve = static_cast<std::int64_t>(running_.size());
  if (kv_.blocks_needed(s.id, n) + reserve > kv_.pool().free_blocks() || !kv_.grow(s.id, n)) {
    kv_.release(s.id);
    s.computed = 0;
    return false;
  }
  s.state = Sequence::State::kRunning;
  waiting_.pop_front();
  running_.push_back(s.id);
  step.admitted.push_back(s.id);
  return true;
}

SchedulerStep Scheduler::schedule() {
  SchedulerStep step;
  std::int64_t budget = config_.token_budget;
  std::unordered_set<RequestId> scheduled;

  // Decode rows first: every running sequence with exactly its last token left to compute.
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = seq(running_[i]);
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    if (s.limit() != n || n - s.computed != 1) continue;
    bool ok = true;
    while (!kv_.grow(s.id, n)) {
      if (running_.size() - 1 > i) {
        preempt(running_.back(), step);  // the newest, not yet scheduled in this step
        continue;
      }
      ok = false;
      if (i == 0) {
        // Alone and still no block: the pool is too small for this sequence.
        step.failed.push_back(s.id);
        finish(s.id);
      } else {
        preempt(s.id, step);
      }
      break;
    }
    if (!ok) break;  // s was the newest: nothing after it is left
    step.chunks.push_back({s.id, s.computed, 1, true});
    scheduled.insert(s.id);
    --budget;
  }

  // Then prompt chunks (first prefill, or recompute after a preemption) of running sequences.
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = seq(running_[i]);
    if (scheduled.count(s.id)) continue;
    const std::int64_t left = s.limit() - s.computed;
    if (left <= 0) continue;
    const std::int64_t count = std::min<std::int64_t>({config_.prefill_chunk, left, budget});
    if (!kv_.grow(s.id, s.computed + count)) continue;  // allocated at admission; defensive
    step.chunks.push_back(
        {s.id, s.computed, count, s.computed + count == static_cast<std::int64_t>(s.tokens.size())});
    scheduled.insert(s.id);
    budget -= count;
  }

  // Then admission, FIFO (by priority), while blocks and the budget allow.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < config_.max_running) {
    Sequence& s = seq(waiting_.front());
    const std::size_t before = step.failed.size();
    if (!try_admit(s, step)) break;
    if (step.failed.size() != before) continue;
    const std::int64_t left = s.limit() - s.computed;
    if (left <= 0) continue;
    const std::int64_t count = std::min<std::int64_t>({config_.prefill_chunk, left, budget});
    step.chunks.push_back(
        {s.id, s.computed, count, s.computed + count == static_cast<std::int64_t>(s.tokens.size())});
    budget -= count;
  }
  return step;
}

void Scheduler::complete(const SchedulerStep& step) {
  for (const ScheduledChunk& c : step.chunks) {
    auto it = seqs_.find(c.id);
    if (it == seqs_.end()) continue;  // aborted since
    Sequence& s = *it->second;
    if (s.computed != c.start) continue;  // preempted and re-admitted since; nothing to advance
    s.computed += c.count;
    if (config_.prefix_sharing && s.shareable > 0) kv_.commit(s.id, s.tokens, s.computed, s.shareable);
  }
}

}  // namespace vv
