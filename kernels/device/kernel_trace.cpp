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

}  // namespace vv
