#include "kernels/cuda/kernel_trace.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "kernels/cuda/dl_library.h"

#if __has_include(<cupti.h>)
#include <cupti.h>
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
#define VV_KERNEL_TRACE 1
#endif
#endif

namespace vv::cuda {
namespace {

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

#ifdef VV_KERNEL_TRACE

struct Cupti {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string error;
};

const Cupti& cupti() {
  static const Cupti c = [] {
    Cupti r;
    const std::string major = std::to_string(CUPTI_API_VERSION / 10000);
    std::vector<std::string> names = {"libcupti.so." + major, "libcupti.so"};
#ifdef VV_CUPTI_LIBRARY_DIR
    names.push_back(std::string(VV_CUPTI_LIBRARY_DIR) + "/libcupti.so." + major);
#endif
#ifdef VV_CUDA_LIBRARY_DIR
    for (const char* sub : {"/", "/../extras/CUPTI/lib64/", "/../../extras/CUPTI/lib64/"})
      names.push_back(std::string(VV_CUDA_LIBRARY_DIR) + sub + "libcupti.so." + major);
#endif
    void* lib = dl_open_first(names, "libcupti.so." + major, &r.error);
    if (!lib) return r;
    auto bind = [&](const char* name, auto& fn) { dl_bind(lib, name, fn, "CUPTI", r.error); };
    bind("cuptiActivityEnable", r.enable);
    bind("cuptiActivityDisable", r.disable);
    bind("cuptiActivityRegisterCallbacks", r.register_callbacks);
    bind("cuptiActivityFlushAll", r.flush_all);
    bind("cuptiActivityGetNextRecord", r.next_record);
    bind("cuptiActivityGetNumDroppedRecords", r.dropped);
    bind("cuptiGetResultString", r.result_string);
    return r;  // the library stays loaded for the life of the process
  }();
  return c;
}

std::string result_text(CUptiResult res) {
  const char* s = nullptr;
  if (cupti().result_string) cupti().result_string(res, &s);
  return s ? s : "CUPTI error " + std::to_string(static_cast<int>(res));
}

constexpr size_t kBufferBytes = 8u << 20;

struct Recording {
  std::mutex m;
  std::vector<TracedKernel> spans;
  uint64_t dropped = 0;
  bool on = false;
};
Recording& recording() {
  static Recording r;
  return r;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t /*size*/,
                               size_t valid) {
  Recording& rec = recording();
  std::vector<TracedKernel> got;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    TracedKernel s;
    s.name = demangle(k->name);
    s.start_ns = k->start;
    s.end_ns = k->end;
    s.device = k->deviceId;
    s.stream = k->streamId;
    s.graph_node = k->graphNodeId;
    got.push_back(std::move(s));
  }
  size_t dropped = 0;
  if (cupti().dropped) cupti().dropped(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(rec.m);
  rec.dropped += dropped;
  for (TracedKernel& s : got) rec.spans.push_back(std::move(s));
}

#endif  // VV_KERNEL_TRACE

}  // namespace

bool cupti_trace_start(std::string* error) {
#ifdef VV_KERNEL_TRACE
  const Cupti& c = cupti();
  if (!c.error.empty()) {
    if (error) *error = c.error;
    return false;
  }
  Recording& rec = recording();
  {
    std::lock_guard<std::mutex> lock(rec.m);
    if (rec.on) {
      if (error) *error = "a kernel trace is already recording";
      return false;
    }
    rec.spans.clear();
    rec.dropped = 0;
  }
  static const CUptiResult registered = c.register_callbacks(buffer_requested, buffer_completed);
  if (registered != CUPTI_SUCCESS) {
    if (error) *error = "cuptiActivityRegisterCallbacks: " + result_text(registered);
    return false;
  }
  if (const CUptiResult r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS) {
    if (error) *error = "cuptiActivityEnable(CONCURRENT_KERNEL): " + result_text(r);
    return false;
  }
  std::lock_guard<std::mutex> lock(rec.m);
  rec.on = true;
  return true;
#else
  if (error) *error = "built without CUPTI 13 headers (cupti.h)";
  return false;
#endif
}

std::vector<TracedKernel> cupti_trace_stop(uint64_t* dropped) {
  std::vector<TracedKernel> out;
  uint64_t lost = 0;
#ifdef VV_KERNEL_TRACE
  Recording& rec = recording();
  bool on = false;
  {
    std::lock_guard<std::mutex> lock(rec.m);
    on = rec.on;
  }
  if (on) {
    cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(rec.m);
    rec.on = false;
    out.swap(rec.spans);
    lost = rec.dropped;
  }
#endif
  if (dropped) *dropped = lost;
  return out;
}

}  // namespace vv::cuda
