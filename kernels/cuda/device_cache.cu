// The cache of freed device memory: see device_cache.h. One lock guards everything; no call waits on
// the device with it held except a trim (cudaEventSynchronize, cudaFree), which is rare by design.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/device_cache.h"

namespace vv::cuda {
namespace {

struct Idle {
  void* p = nullptr;
  std::vector<cudaEvent_t> fences;  // one a registered stream at the free; all done = free to reuse
};

struct Device {
  std::vector<cudaStream_t> streams;
  std::multimap<size_t, Idle> idle;  // by size
  std::vector<cudaEvent_t> spare;    // events to record fences with
  size_t idle_bytes = 0;
};

struct Cache {
  std::mutex mu;
  std::map<int, Device> devices;
  std::unordered_map<void*, std::pair<int, size_t>> live;  // block → (device, bytes)
};

// Never destroyed: Buffers may be freed during static destruction.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

// Makes `device` current for its scope (events are created and recorded on the streams' device).
struct DeviceScope {
  int prev = -1;
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    if (prev != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev) cudaSetDevice(prev);
  }
};

// With the cache's lock held. Events that report done go back to the spares.
bool fences_done(Device& d, Idle& b) {
  while (!b.fences.empty()) {
    const cudaError_t e = cudaEventQuery(b.fences.back());
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) cudaGetLastError();  // a failed device reports everywhere else too
    d.spare.push_back(b.fences.back());
    b.fences.pop_back();
  }
  return true;
}

// With the lock held: waits for each idle block's fences and frees it.
size_t trim_locked(int device, Device& d) {
  size_t freed = 0;
  if (d.idle.empty()) return 0;
  DeviceScope scope(device);
  for (auto& [bytes, b] : d.idle) {
    for (cudaEvent_t e : b.fences) {
      cudaEventSynchronize(e);
      d.spare.push_back(e);
    }
    cudaFree(b.p);
    freed += bytes;
  }
  d.idle.clear();
  d.idle_bytes = 0;
  return freed;
}

__global__ void spin_kernel(unsigned long long ns) {
  const unsigned long long start = clock64();
  // clock64 counts SM cycles: at most ≈ 2 GHz, so ns × 2 cycles is at least ns nanoseconds.
  while (clock64() - start < ns * 2ull) {
  }
}

}  // namespace

bool device_cache_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("VV_CUDA_ALLOC_CACHE");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

void cache_register_stream(int device, cudaStream_t stream) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto& s = c.devices[device].streams;
  if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
}

void cache_unregister_stream(cudaStream_t stream) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [device, d] : c.devices) {
    auto it = std::find(d.streams.begin(), d.streams.end(), stream);
    if (it == d.streams.end()) continue;
    d.streams.erase(it);
    if (d.streams.empty()) trim_locked(device, d);
    return;
  }
}

cudaError_t cache_malloc(int device, size_t bytes, void** p) {
  Cache& c = cache();
  if (device_cache_enabled()) {
    std::lock_guard<std::mutex> lock(c.mu);
    Device& d = c.devices[device];
    // The smallest size that fits; within a size the block freed last. Buffers are freed in the reverse
    // of their allocation (members, scopes), so newest-first gives a job that allocates as the job
    // before it did the same addresses, and its op sequence keeps its graph (the signature holds every
    // pointer). Oldest-first swapped two same-sized blocks at every job (session 35: the encoders'
    // graph was captured again every other encode).
    for (auto it = d.idle.lower_bound(bytes); it != d.idle.end() && cache_block_fits(it->first, bytes);) {
      const auto end = d.idle.upper_bound(it->first);
      for (auto jt = end; jt != it;) {
        --jt;
        if (!fences_done(d, jt->second)) continue;
        *p = jt->second.p;
        c.live[*p] = {device, jt->first};
        d.idle_bytes -= jt->first;
        d.idle.erase(jt);
        return cudaSuccess;
      }
      it = end;
    }
  }
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation && device_cache_enabled()) {
    cudaGetLastError();  // not sticky: clear it, give the idle blocks back and try again
    {
      std::lock_guard<std::mutex> lock(c.mu);
      trim_locked(device, c.devices[device]);
    }
    e = cudaMalloc(p, bytes);
  }
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(c.mu);
  c.live[*p] = {device, bytes};
  return cudaSuccess;
}

int cache_free(void* p) {
  Cache& c = cache();
  std::unique_lock<std::mutex> lock(c.mu);
  const auto it = c.live.find(p);
  if (it == c.live.end()) {
    lock.unlock();
    cudaFree(p);
    return -1;
  }
  const auto [device, bytes] = it->second;
  c.live.erase(it);
  Device& d = c.devices[device];
  // A stream being captured would take the event record into its graph: free the old way then.
  bool capturing = false;
  for (cudaStream_t s : d.streams) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone) capturing = true;
  }
  // No stream left on the device (its backends are gone): nothing would reuse the block soon.
  if (!device_cache_enabled() || capturing || d.streams.empty()) {
    lock.unlock();
    cudaFree(p);
    return device;
  }
  DeviceScope scope(device);
  Idle b;
  b.p = p;
  for (cudaStream_t s : d.streams) {
    cudaEvent_t e = nullptr;
    if (!d.spare.empty()) {
      e = d.spare.back();
      d.spare.pop_back();
    } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      e = nullptr;
    }
    if (e == nullptr || cudaEventRecord(e, s) != cudaSuccess) {
      // No fence for this stream: the block cannot be proven idle, so it goes back to the device.
      cudaGetLastError();
      if (e) d.spare.push_back(e);
      for (cudaEvent_t f : b.fences) d.spare.push_back(f);
      lock.unlock();
      cudaFree(p);
      return device;
    }
    b.fences.push_back(e);
  }
  d.idle.emplace(bytes, std::move(b));
  d.idle_bytes += bytes;
  return device;
}

size_t cache_idle_bytes(int device) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto it = c.devices.find(device);
  return it == c.devices.end() ? 0 : it->second.idle_bytes;
}

size_t cache_trim(int device) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto it = c.devices.find(device);
  return it == c.devices.end() ? 0 : trim_locked(device, it->second);
}

cudaError_t spin_stream_for_test(cudaStream_t stream, unsigned long long ns) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace vv::cuda
