#include "kernels/device/kernel_trace.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace vv {

bool kernel_trace_start(std::string* error) {
#if VV_HAVE_CUDA
  return cuda::cupti_trace_start(error);
#else
  if (error) *error = "this build has no CUDA backend";
  return false;
#endif
}

std::vector<KernelSpan> kernel_trace_stop(uint64_t* dropped) {
  std::vector<KernelSpan> out;
  if (dropped) *dropped = 0;
#if VV_HAVE_CUDA
  out = cuda::cupti_trace_stop(dropped);
#endif
  std::sort(out.begin(), out.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::vector<AttnStamp> attn_stamps_take() {
#if VV_HAVE_CUDA
  return cuda::attn_stamps_take();
#else
  return {};
#endif
}

std::vector<TraceStep> trace_steps(const std::vector<KernelSpan>& spans, uint64_t gap_ns) {
  std::vector<TraceStep> steps;
  uint64_t last_end = 0;  // the latest end in the current step
  for (const KernelSpan& s : spans) {
    if (steps.empty() || s.start_ns > last_end + gap_ns) {
      steps.emplace_back();
      last_end = s.end_ns;
    }
    steps.back().kernels.push_back(s);
    last_end = std::max(last_end, s.end_ns);
  }
  std::map<size_t, size_t> counts;  // kernels a step -> steps
  for (const TraceStep& t : steps) ++counts[t.kernels.size()];
  size_t mode = 0, best = 0;
  for (const auto& [n, c] : counts)
    if (c > best || (c == best && n > mode)) mode = n, best = c;
  std::vector<TraceStep> kept;
  for (TraceStep& t : steps)
    if (t.kernels.size() == mode) kept.push_back(std::move(t));
  return kept;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The name without its namespaces' noise and its arguments, cut to `width` characters.
std::string short_name(const std::string& full, size_t width) {
  std::string s = full;
  for (const std::string& drop : {std::string("(anonymous namespace)::"), std::string("vv::cuda::"),
                                  std::string("dec::"), std::string("void ")})
    for (size_t p; (p = s.find(drop)) != std::string::npos;) s.erase(p, drop.size());
  // the parameter list: the last '(' at template depth 0
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      s.resize(i);
      break;
    }
  }
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

}  // namespace

std::string trace_report(const std::vector<TraceStep>& steps, const std::string& title, bool per_kernel) {
  std::string out;
  char line[512];
  if (steps.empty()) return "ktrace " + title + ": no steps recorded\n";
  const size_t n = steps.front().kernels.size();
  std::vector<std::vector<double>> dur(n), adds(n), start(n);
  std::vector<double> span, busy;
  for (const TraceStep& t : steps) {
    uint64_t last_end = t.kernels.front().start_ns;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      const KernelSpan& k = t.kernels[i];
      dur[i].push_back((k.end_ns - k.start_ns) * 1e-3);
      start[i].push_back((static_cast<double>(k.start_ns) - static_cast<double>(last_end)) * 1e-3);
      adds[i].push_back(k.end_ns > last_end ? (k.end_ns - last_end) * 1e-3 : 0.0);
      sum += (k.end_ns - k.start_ns) * 1e-3;
      last_end = std::max(last_end, k.end_ns);
    }
    span.push_back((last_end - t.kernels.front().start_ns) * 1e-3);
    busy.push_back(sum);
  }
  std::snprintf(
      line, sizeof line,
      "ktrace %s: %zu steps of %zu kernels; a step (medians): %.1f us from the first start to the last "
      "end, kernels' own time summed %.1f us\n",
      title.c_str(), steps.size(), n, median(span), median(busy));
  out += line;
  // Names in order of first appearance; each position's figures.
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> at;
  for (size_t i = 0; i < n; ++i) {
    const std::string& nm = steps.front().kernels[i].name;
    if (!at.count(nm)) order.push_back(nm);
    at[nm].push_back(i);
  }
  if (per_kernel) {
    out +=
        "ktrace   pos    adds_us     dur_us   start_us  kernel (start: against the latest end before it)\n";
    for (size_t i = 0; i < n; ++i) {
      std::snprintf(line, sizeof line, "ktrace %5zu %10.2f %10.2f %10.2f  %s\n", i, median(adds[i]),
                    median(dur[i]), median(start[i]), short_name(steps.front().kernels[i].name, 110).c_str());
      out += line;
    }
  }
  out +=
      "ktrace by kernel: a step's launches, the medians of their adds and durations summed (us), the mean "
      "start (us)\n";
  double total_adds = 0;
  for (const std::string& nm : order) {
    double a = 0, d = 0, s = 0;
    for (size_t i : at[nm]) {
      a += median(adds[i]);
      d += median(dur[i]);
      s += median(start[i]);
    }
    total_adds += a;
    std::snprintf(line, sizeof line, "ktrace %5zu x  adds %9.1f  dur %9.1f  start %7.2f  %s\n", at[nm].size(),
                  a, d, s / static_cast<double>(at[nm].size()), short_name(nm, 140).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line,
                "ktrace adds summed %.1f us (the step's span but for the sums of medians)\n", total_adds);
  out += line;
  return out;
}

std::string attn_stamps_report(const std::vector<AttnStamp>& stamps, uint64_t gap_ns) {
  std::vector<AttnStamp> v;
  double ns = 0, cyc = 0;
  for (const AttnStamp& a : stamps) {
    if (a.gt_end < a.gt_start || a.clk[7] == 0) continue;  // unwritten
    v.push_back(a);
    ns += static_cast<double>(a.gt_end - a.gt_start);
    cyc += a.clk[7];
  }
  if (v.empty() || ns <= 0) return "astamp: no stamps recorded\n";
  const double ghz = cyc / ns;  // cycles a ns
  std::sort(v.begin(), v.end(),
            [](const AttnStamp& a, const AttnStamp& b) { return a.gt_start < b.gt_start; });
  std::vector<std::vector<AttnStamp>> launches;
  for (const AttnStamp& a : v) {
    if (launches.empty() || a.gt_start > launches.back().front().gt_start + gap_ns) launches.emplace_back();
    launches.back().push_back(a);
  }
  std::map<size_t, size_t> counts;
  for (const auto& l : launches) ++counts[l.size()];
  size_t mode = 0, best = 0;
  for (const auto& [n, c] : counts)
    if (c > best || (c == best && n > mode)) mode = n, best = c;
  // A block's stage i time (ns, on the global timer's axis).
  auto at = [&](const AttnStamp& a, int i) { return static_cast<double>(a.gt_start) + a.clk[i] / ghz; };
  std::vector<double> starts, releases, first_arrival, last_arrival, merge_start, end, merge_len;
  std::vector<std::vector<double>> stage(8), mstage(4);
  size_t kept = 0, merged_blocks = 0;
  for (const auto& l : launches) {
    if (l.size() != mode) continue;
    ++kept;
    double s0 = 1e300, s1 = -1e300, w0 = 1e300, w1 = -1e300, a0 = 1e300, a1 = -1e300, e = -1e300, m0 = -1,
           me = -1;
    for (const AttnStamp& a : l) {
      s0 = std::min(s0, static_cast<double>(a.gt_start));
      s1 = std::max(s1, static_cast<double>(a.gt_start));
      w0 = std::min(w0, at(a, 1));
      w1 = std::max(w1, at(a, 1));
      a0 = std::min(a0, at(a, 6));
      a1 = std::max(a1, at(a, 6));
      e = std::max(e, static_cast<double>(a.gt_end));
      if (a.merged) {
        m0 = at(a, 6);
        me = at(a, 7);
        ++merged_blocks;
      }
      stage[0].push_back(a.clk[0] / ghz * 1e-3);
      for (int i = 1; i < 7; ++i)
        stage[i].push_back((static_cast<double>(a.clk[i]) - a.clk[i - 1]) / ghz * 1e-3);
      if (a.merged) {
        stage[7].push_back((static_cast<double>(a.clk[7]) - a.clk[6]) / ghz * 1e-3);
        if (a.mclk[0] && a.mclk[1] && a.mclk[2]) {  // parts (not stamped by a kernel without them)
          const double m[5] = {static_cast<double>(a.clk[6]), static_cast<double>(a.mclk[0]),
                               static_cast<double>(a.mclk[1]), static_cast<double>(a.mclk[2]),
                               static_cast<double>(a.clk[7])};
          for (int i = 0; i < 4; ++i) mstage[i].push_back((m[i + 1] - m[i]) / ghz * 1e-3);
        }
      }
    }
    // Against the first release (the q/k/v GEMV's end as the blocks see it), us
    starts.push_back((s1 - s0) * 1e-3);
    releases.push_back((w1 - w0) * 1e-3);
    first_arrival.push_back((a0 - w0) * 1e-3);
    last_arrival.push_back((a1 - w0) * 1e-3);
    if (m0 >= 0) {
      merge_start.push_back((m0 - w0) * 1e-3);
      merge_len.push_back((me - m0) * 1e-3);
    }
    end.push_back((e - w0) * 1e-3);
  }
  std::string out;
  char line[512];
  std::snprintf(
      line, sizeof line,
      "astamp %zu blocks stamped, %zu launches of %zu blocks kept (of %zu); SM clock from the stamps %.3f "
      "GHz; %zu merging blocks\n",
      v.size(), kept, mode, launches.size(), ghz, merged_blocks);
  out += line;
  std::snprintf(
      line, sizeof line,
      "astamp a launch (medians, us; 0 = its first block's PDL release): blocks started within %.2f, "
      "released within %.2f; first block counted in at %.2f, last at %.2f; merge from %.2f for %.2f; "
      "last block ended at %.2f\n",
      median(starts), median(releases), median(first_arrival), median(last_arrival), median(merge_start),
      median(merge_len), median(end));
  out += line;
  static const char* names[8] = {"loads issued (from the block's start)",
                                 "PDL wait",
                                 "q rotated (+ the new key written)",
                                 "scores",
                                 "softmax",
                                 "P.V and the warps' sum",
                                 "partial stored and counted",
                                 "merge (merging blocks)"};
  auto p90 = [](std::vector<double> s) {
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[std::min(s.size() - 1, s.size() * 9 / 10)];
  };
  for (int i = 0; i < 8; ++i) {
    std::snprintf(line, sizeof line, "astamp stage %d  median %8.3f us  p90 %8.3f us  %s\n", i,
                  median(stage[i]), p90(stage[i]), names[i]);
    out += line;
  }
  static const char* mnames[4] = {"fence after the count, counter reset", "split weights and sums",
                                  "partials summed", "outputs stored, end"};
  for (int i = 0; i < 4 && !mstage[0].empty(); ++i) {
    std::snprintf(line, sizeof line, "astamp merge %d  median %8.3f us  p90 %8.3f us  %s\n", i,
                  median(mstage[i]), p90(mstage[i]), mnames[i]);
    out += line;
  }
  return out;
}

}  // namespace vv
