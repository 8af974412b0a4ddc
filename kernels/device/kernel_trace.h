// Every GPU kernel's execution span as it ran, and a per-step report of them: a measuring aid for the
// benches (`cuda_decode_bench --kernel-trace`). Nsight Compute times kernels one at a time, which hides
// what graph replay and programmatic dependent launch (PDL) change; this shows a step as it ran, kernel by
// kernel, and what each kernel adds to the step's wall time. On CUDA builds the spans come from CUPTI
// (kernels/cuda/kernel_trace.h, loaded on first use); elsewhere the start fails with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/kernel_trace.h"  // plain C++: the span type, whatever the build

namespace vv {

// A kernel's name (demangled), start and end (ns), device, stream and graph node (0: not from a graph).
using KernelSpan = cuda::TracedKernel;

// Starts recording every kernel on every GPU (one recording at a time in a process). False, with the
// reason in *error, where it cannot (no CUDA in this build, CUPTI not loadable, another profiler attached).
bool kernel_trace_start(std::string* error);
// Stops the recording; every kernel since the start, by start time. *dropped: records the tracer lost.
std::vector<KernelSpan> kernel_trace_stop(uint64_t* dropped = nullptr);

// The spans (by start time) cut into steps wherever the GPU idled more than gap_ns between the latest end
// so far and the next start; only the steps with the most common kernel count are kept (warm-ups and
// captures differ).
struct TraceStep {
  std::vector<KernelSpan> kernels;  // by start time
};
std::vector<TraceStep> trace_steps(const std::vector<KernelSpan>& spans, uint64_t gap_ns);

// A report of such steps (lines start with "ktrace"). For each kernel position of a step, medians over the
// steps of: its duration; what it adds to the step (its end less the latest end before it in the step,
// 0 when it ends earlier); its start against that latest end (negative: it began under the kernels before
// it, as PDL and graph branches allow). Then the same summed by kernel name, in order of first appearance.
// per_kernel: the line of every position too (else only the sums by name).
std::string trace_report(const std::vector<TraceStep>& steps, const std::string& title, bool per_kernel);

// The fused one-row decode attention's stage stamps (VV_CUDA_ATTN_STAMPS=1 at the backend's creation; what
// each stage is: cuda::AttnStamp). attn_stamps_take: the records since the last take (none without CUDA or
// the probe).
using AttnStamp = cuda::AttnStamp;
std::vector<AttnStamp> attn_stamps_take();
// A report of such records (lines start with "astamp"): the SM clock from the records' own global-timer and
// cycle spans; the blocks cut into launches where a block starts more than gap_ns after the first block of
// the launch (only the launches of the most common block count are kept); then medians over the launches
// of the launch's time line from its first PDL release (its blocks' start spread, the releases' spread,
// the last block's arrival at the split counter, the merge, the launch's end), and medians over every
// block of each stage's duration.
std::string attn_stamps_report(const std::vector<AttnStamp>& stamps, uint64_t gap_ns);

}  // namespace vv
