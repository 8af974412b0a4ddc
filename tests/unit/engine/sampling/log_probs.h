// Logits whose softmax is the given distribution: log(p) per token.
#pragma once
#include <cmath>
#include <vector>

namespace vv::test {

inline std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

}  // namespace vv::test
