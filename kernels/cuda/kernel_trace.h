// Every kernel's execution span as the GPU ran it, through CUPTI's activity API (the concurrent-kernel
// records: kernels inside CUDA graphs and kernels that a programmatic dependent launch overlaps keep their
// own start and end). The collector behind vv::kernel_trace_start (kernels/device/kernel_trace.h, where the
// report is). CUPTI is loaded with dlopen on the first start, so nothing links it and a binary without it
// still runs. No CUDA types here: every build includes this header (for TracedKernel); only CUDA builds
// define its functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vv::cuda {

struct TracedKernel {
  std::string name;  // demangled
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0;
  uint64_t graph_node = 0;  // 0: not launched from a graph
};

// Starts recording (all devices; one recording at a time in a process). False, with the reason in *error,
// where CUPTI cannot be loaded or refuses (another profiler attached, no CUPTI 13 headers at build time).
bool cupti_trace_start(std::string* error);
// Stops the recording, flushes CUPTI's buffers and returns every kernel since the start (unordered).
// Records CUPTI dropped (full buffers) are counted in *dropped.
std::vector<TracedKernel> cupti_trace_stop(uint64_t* dropped);

}  // namespace vv::cuda
