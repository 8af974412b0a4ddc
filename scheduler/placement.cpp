#include "scheduler/placement.h"

#include <algorithm>

namespace vv {

Result<std::unique_ptr<ReplicatedEngine>> ReplicatedEngine::create(
    std::vector<std::unique_ptr<EngineLoop>> replicas) {
  if (replicas.empty()) return invalid_argument("placement: no replica");
  for (const auto& r : replicas) {
    if (!r) return invalid_argument("placement: a replica is missing");
  }
  return std::unique_ptr<ReplicatedEngine>(new ReplicatedEngine(std::move(replicas)));
}

std::size_t ReplicatedEngine::pick() const {
  std::size_t best = 0;
  std::int64_t best_queue = 0, best_kv = 0;
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    const EngineLoad l = replicas_[i]->load();
    const std::int64_t queue = l.running + l.waiting;
    if (i == 0 || queue < best_queue || (queue == best_queue && l.kv_blocks_used < best_kv)) {
      best = i;
      best_queue = queue;
      best_kv = l.kv_blocks_used;
    }
  }
  return best;
}

Result<RequestId> ReplicatedEngine::submit(Request request, EventSink sink) {
  std::unique_lock<std::mutex> lk(mu_);
  const std::size_t r = pick();
  const RequestId ours = next_id_++;
  // Events carry our id; the mapping is dropped with the terminal event. The sink runs on the
  // replica's engine thread, so it takes the lock only briefly and never while calling out.
  auto wrapped = [this, ours, sink = std::move(sink)](RequestEvent&& e) {
    e.id = ours;
    if (e.terminal()) {
      std::lock_guard<std::mutex> g(mu_);
      where_.erase(ours);
    }
    sink(std::move(e));
  };
  where_[ours] = {r, 0};
  // The replica may emit (and finish) before submit returns: the mapping exists before, and is
  // completed after only if still present.
  lk.unlock();
  auto id = replicas_[r]->submit(std::move(request), std::move(wrapped));
  lk.lock();
  if (!id.is_ok()) {
    where_.erase(ours);
    return id.status();
  }
  auto it = where_.find(ours);
  if (it != where_.end()) it->second.second = *id;
  return ours;
}

void ReplicatedEngine::cancel(RequestId id) {
  std::pair<std::size_t, RequestId> at;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = where_.find(id);
    if (it == where_.end() || it->second.second == 0) return;
    at = it->second;
  }
  replicas_[at.first]->cancel(at.second);
}

EngineLoad ReplicatedEngine::load() const {
  EngineLoad sum;
  sum.ready = true;
  for (const auto& r : replicas_) {
    const EngineLoad l = r->load();
    sum.running += l.running;
    sum.waiting += l.waiting;
    sum.kv_blocks_used += l.kv_blocks_used;
    sum.kv_blocks_total += l.kv_blocks_total;
    sum.max_running += l.max_running;
    sum.max_waiting += l.max_waiting;
    sum.ready = sum.ready && l.ready;
  }
  return sum;
}

EngineStats ReplicatedEngine::stats() const {
  EngineStats sum;
  sum.load = load();
  for (const auto& r : replicas_) {
    const EngineStats st = r->stats();
    sum.paused = sum.paused || st.paused;
    sum.busy = sum.busy || st.busy;
    sum.last_step = std::max(sum.last_step, st.last_step);
    sum.steps += st.steps;
    sum.rows_last_step += st.rows_last_step;
    sum.seqs_last_step += st.seqs_last_step;
    sum.rows_total += st.rows_total;
    sum.decode_rows_total += st.decode_rows_total;
    sum.prefill_rows_total += st.prefill_rows_total;
    sum.prefix_hit_blocks += st.prefix_hit_blocks;
    sum.prefix_query_blocks += st.prefix_query_blocks;
    sum.preemptions += st.preemptions;
    sum.requests_done += st.requests_done;
    sum.requests_failed += st.requests_failed;
    sum.requests_cancelled += st.requests_cancelled;
    sum.step_seconds_last = std::max(sum.step_seconds_last, st.step_seconds_last);
    sum.repetition_recovered += st.repetition_recovered;
    sum.repetition_gave_up += st.repetition_gave_up;
  }
  return sum;
}

int ReplicatedEngine::placed_on(RequestId id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = where_.find(id);
  return it == where_.end() ? -1 : static_cast<int>(it->second.first);
}

}  // namespace vv
