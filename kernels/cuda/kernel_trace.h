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

// One block of the fused one-row SIMT decode attention, stamped by its thread 0 (VV_CUDA_ATTN_STAMPS=1 at
// the backend's creation, a probe): the global timer (ns) at the block's start and end, and the SM clock
// (cycles since the start) at each stage:
//   0 its loads of the old K and V rows issued, 1 its PDL wait over (the q/k/v GEMV finished),
//   2 q rotated in shared memory (and, in the split of the newest key, that key written to the cache),
//   3 the scores, 4 the softmax, 5 P·V summed over the warps, 6 its partial stored and counted (one
//   split: the output written), 7 the end (the split merge, for the block that counted last).
// The merging block's merge, in parts (mclk, cycles since the start like clk): 0 the fence after the count
// and the counter's reset, 1 the split weights and merged sums (in shared memory, after the barrier),
// 2 the partials summed (before the outputs' stores).
struct AttnStamp {
  uint64_t gt_start = 0, gt_end = 0;
  uint32_t clk[8] = {};
  uint32_t split = 0, kv_head = 0;
  uint32_t merged = 0;  // 1: this block merged the splits
  uint32_t mclk[3] = {};
};
// Every stamp recorded since the last take (at most the newest 32,768 blocks), then none. Empty where the
// probe is off or nothing ran.
std::vector<AttnStamp> attn_stamps_take();

}  // namespace vv::cuda
