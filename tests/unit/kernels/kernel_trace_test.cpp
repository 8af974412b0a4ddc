// The kernel trace's step cutting and report (kernels/device/kernel_trace.h) on made-up spans: steps cut
// at GPU idle gaps, the odd-sized ones dropped, and each kernel's duration, what it adds to the step and
// its start against the latest end before it (PDL overlap negative), by position and summed by name.
#include "kernels/device/kernel_trace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vv::test {
namespace {

KernelSpan span(const std::string& name, uint64_t start_us, uint64_t end_us) {
  KernelSpan s;
  s.name = name;
  s.start_ns = start_us * 1000;
  s.end_ns = end_us * 1000;
  return s;
}

// Three steps of (gemv, attention under the gemv's tail, o ending before the attention, argmax), one
// warm-up step of two kernels before them; 50 us of idle GPU between steps.
std::vector<KernelSpan> spans() {
  const std::string gemv =
      "void vv::cuda::(anonymous namespace)::decode_gemv_kernel<__nv_bfloat16, 2>(vv::cuda::G)";
  const std::string attn = "void vv::cuda::dec::decode_attn_kernel<float, true>(vv::cuda::DecodeAttnArgs)";
  std::vector<KernelSpan> s = {span(gemv, 0, 5), span("argmax", 6, 7)};  // warm-up: two kernels
  for (uint64_t t0 : {100u, 200u, 300u}) {
    const uint64_t j = t0 == 200 ? 2 : 0;                   // the second step's gemv runs 2 us longer
    s.push_back(span(gemv, t0, t0 + 10 + j));               // adds 10 (+2), starts 0
    s.push_back(span(attn, t0 + 8 + j, t0 + 30 + j));       // starts 2 us under the gemv, adds 20
    s.push_back(span("o_gemv", t0 + 12 + j, t0 + 25 + j));  // ends before the attention: adds 0, starts -18
    s.push_back(span("argmax", t0 + 31 + j, t0 + 35 + j));  // starts 1 us after, adds 5
  }
  return s;
}

TEST(KernelTrace, StepsAreCutAtIdleGapsAndOddStepsDropped) {
  const std::vector<TraceStep> steps = trace_steps(spans(), 8000);
  ASSERT_EQ(steps.size(), 3u);
  for (const TraceStep& t : steps) {
    ASSERT_EQ(t.kernels.size(), 4u);
    EXPECT_EQ(t.kernels[3].name, "argmax");
  }
  EXPECT_EQ(steps[1].kernels[0].start_ns, 200000u);
  // A gap wider than every idle time: one step of all 14 kernels.
  const std::vector<TraceStep> one = trace_steps(spans(), 100000);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].kernels.size(), 14u);
  EXPECT_TRUE(trace_steps({}, 8000).empty());
}

TEST(KernelTrace, ReportGivesEachKernelsAddsDurationAndStart) {
  const std::string r = trace_report(trace_steps(spans(), 8000), "b1", true);
  // The step: 35 us from the first start to the last end (medians), 10 + 22 + 13 + 4 kernels' own time.
  EXPECT_NE(r.find("ktrace b1: 3 steps of 4 kernels"), std::string::npos) << r;
  EXPECT_NE(r.find("35.0 us from the first start to the last end, kernels' own time summed 49.0 us"),
            std::string::npos)
      << r;
  // Per position: adds, duration, start (medians), the short name.
  EXPECT_NE(r.find("ktrace     0      10.00      10.00       0.00  decode_gemv_kernel<__nv_bfloat16, 2>\n"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("ktrace     1      20.00      22.00      -2.00  decode_attn_kernel<float, true>\n"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("ktrace     2       0.00      13.00     -18.00  o_gemv\n"), std::string::npos) << r;
  EXPECT_NE(r.find("ktrace     3       5.00       4.00       1.00  argmax\n"), std::string::npos) << r;
  // By name, and the adds summed to the step's span.
  EXPECT_NE(
      r.find("ktrace     1 x  adds      20.0  dur      22.0  start   -2.00  decode_attn_kernel<float, true>"),
      std::string::npos)
      << r;
  EXPECT_NE(r.find("ktrace adds summed 35.0 us"), std::string::npos) << r;
  // Without per_kernel: only the sums by name.
  const std::string sums = trace_report(trace_steps(spans(), 8000), "b1", false);
  EXPECT_EQ(sums.find("ktrace     0 "), std::string::npos) << sums;
  EXPECT_NE(sums.find("x  adds"), std::string::npos) << sums;
  EXPECT_NE(trace_report({}, "none", true).find("no steps"), std::string::npos);
}

// The attention's stage stamps (VV_CUDA_ATTN_STAMPS) on made-up records at a 2 GHz clock: three launches
// 200 us apart of 4 blocks (2 kv heads x 2 splits; the last block starts 0.2 us late and merges), one stray
// block (a launch of 1, dropped) and one unwritten record (ignored).
TEST(KernelTrace, AttentionStampsReportTheLaunchTimeLineAndEachStage) {
  std::vector<AttnStamp> st;
  for (uint64_t t0 : {100'000u, 300'000u, 500'000u}) {
    for (uint32_t b = 0; b < 4; ++b) {
      AttnStamp a;
      a.gt_start = t0 + (b == 3 ? 200 : 0);
      const uint32_t clk[8] = {2000, 10000, 12000, 14000, 15000, 16000, 18000, b == 3 ? 22000u : 18000u};
      for (int i = 0; i < 8; ++i) a.clk[i] = clk[i];
      a.gt_end = a.gt_start + a.clk[7] / 2;
      a.split = b % 2;
      a.kv_head = b / 2;
      a.merged = b == 3;
      if (a.merged && t0 != 100'000u) {  // the merge's parts, but for the first launch's merging block
        a.mclk[0] = 18400;
        a.mclk[1] = 19000;
        a.mclk[2] = 21000;
      }
      st.push_back(a);
    }
  }
  AttnStamp stray = st.front();
  stray.gt_start = 1'000'000;
  stray.gt_end = stray.gt_start + 9000;
  st.push_back(stray);
  st.push_back(AttnStamp{});  // never written
  const std::string r = attn_stamps_report(st, 50'000);
  EXPECT_NE(r.find("astamp 13 blocks stamped, 3 launches of 4 blocks kept (of 4); SM clock from the stamps "
                   "2.000 GHz; 3 merging blocks"),
            std::string::npos)
      << r;
  // Against the first release (start + 5 us): starts and releases 0.2 us apart, the counter reached 4 us
  // after the first release and 4.2 after it by the late block, which merges for 2 us and ends at 6.2.
  EXPECT_NE(
      r.find("blocks started within 0.20, released within 0.20; first block counted in at 4.00, last at "
             "4.20; merge from 4.20 for 2.00; last block ended at 6.20"),
      std::string::npos)
      << r;
  for (const char* stage :
       {"stage 0  median    1.000 us", "stage 1  median    4.000 us", "stage 2  median    1.000 us",
        "stage 4  median    0.500 us", "stage 6  median    1.000 us", "stage 7  median    2.000 us"})
    EXPECT_NE(r.find(stage), std::string::npos) << stage << "\n" << r;
  // The merge's parts from the two merging blocks that stamped them: 0.2, 0.3, 1.0 and 0.5 us.
  for (const char* part : {"merge 0  median    0.200 us", "merge 1  median    0.300 us",
                           "merge 2  median    1.000 us", "merge 3  median    0.500 us"})
    EXPECT_NE(r.find(part), std::string::npos) << part << "\n" << r;
  // A kernel without the parts prints none.
  for (AttnStamp& a : st) a.mclk[0] = a.mclk[1] = a.mclk[2] = 0;
  EXPECT_EQ(attn_stamps_report(st, 50'000).find("astamp merge"), std::string::npos);
  EXPECT_NE(attn_stamps_report({}, 50'000).find("no stamps"), std::string::npos);
}

// Where a trace cannot be taken (no CUDA in the build, no GPU or driver, CUPTI absent), the start says why
// and a stop returns nothing; where it can, a stop without kernels returns none.
TEST(KernelTrace, StartSaysWhyItCannotTrace) {
  std::string why;
  if (kernel_trace_start(&why)) {
    uint64_t dropped = 1;
    EXPECT_TRUE(kernel_trace_stop(&dropped).empty());
    EXPECT_EQ(dropped, 0u);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(kernel_trace_stop().empty());
  }
}

}  // namespace
}  // namespace vv::test
