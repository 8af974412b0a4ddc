// Placement: several engines behind one EngineClient. ReplicatedEngine holds one EngineLoop per
// device (each with its own Runner, KV pool and engine thread) and places every request, once, at
// submit on the replica with the least load (running + waiting, then fewer KV blocks used); cancel
// goes to the replica that holds the request. On the CPU two Runners act as two "devices"; the
// multi-GPU form is the same with one Runner per GPU. Layer shards (one Runner spanning devices)
// sit below this interface, inside a Runner. Thread-safe; owns its loops, borrows their Runners.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler/engine_loop.h"

namespace vv {

class ReplicatedEngine : public EngineClient {
 public:
  // At least one loop. Request ids seen by callers are the ReplicatedEngine's own.
  static Result<std::unique_ptr<ReplicatedEngine>> create(std::vector<std::unique_ptr<EngineLoop>> replicas);

  Result<RequestId> submit(Request request, EventSink sink) override;
  void cancel(RequestId id) override;
  // Sums over the replicas; ready when every replica is.
  EngineLoad load() const override;
  // The replicas' counters summed (their loads as load() sums them).
  EngineStats stats() const override;

  std::size_t size() const { return replicas_.size(); }
  EngineLoop& replica(std::size_t i) { return *replicas_[i]; }
  // Which replica a request was placed on (for tests and logs); -1 once it is finished or unknown.
  int placed_on(RequestId id) const;

 private:
  explicit ReplicatedEngine(std::vector<std::unique_ptr<EngineLoop>> replicas)
      : replicas_(std::move(replicas)) {}
  std::size_t pick() const;

  std::vector<std::unique_ptr<EngineLoop>> replicas_;
  mutable std::mutex mu_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, std::pair<std::size_t, RequestId>> where_;  // ours → (replica, its id)
};

}  // namespace vv
