#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace vv {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float clean(float x) { return std::isnan(x) ? kNegInf : x; }

// The passes over a whole vocabulary row are compiled twice on x86-64 GCC: for AVX2 + FMA
// (x86-64-v3) and the baseline, picked once at load (ifunc). The lanes are explicit and no a*b+c is
// contracted into an FMA (VV_NO_TRAPPING_MATH's fp-contract=off), so both clones give the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define VV_ROW_PASS __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VV_ROW_PASS
#endif

// max over a row, NaN ignored (it never wins `x > m`); written over 8 lanes so it vectorises.
VV_ROW_PASS float row_max(std::span<const float> logits) {
  const float* x = logits.data();
  const std::size_t n = logits.size();
  float lane[8];
  for (float& m : lane) m = kNegInf;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
  }
  float max = kNegInf;
  for (float m : lane) max = m > max ? m : max;
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

// e^x for x <= 0 (NaN and -inf give 0), branch-free so the compiler vectorises the loops that call
// it: Cody–Waite range reduction and a degree-6 polynomial, relative error ~2e-7 — far below what
// sampling weights need, and ~5x faster than libm's expf over a 152k-entry row.
#if defined(__GNUC__) && !defined(__clang__)
#define VV_NO_TRAPPING_MATH __attribute__((optimize("no-trapping-math", "fp-contract=off")))
#else
#define VV_NO_TRAPPING_MATH
#endif

VV_NO_TRAPPING_MATH inline float exp_nonpositive(float x) {
  x = x > -87.0f ? x : -87.0f;  // also maps NaN to -87 (the comparison is false)
  x = x < 0.0f ? x : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to nearest
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale;
  return x > -87.0f ? y : 0.0f;
}

// w[i] = exp((x[i] - max) * inv_t), or 0 below min_p. GCC if-converts (and so vectorises) the
// float selects only without trapping math; the results are the same either way.
VV_ROW_PASS VV_NO_TRAPPING_MATH void fill_weights(const float* __restrict x, float* __restrict w,
                                                  std::size_t n, float max, float inv_t, float min_p) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = exp_nonpositive((x[i] - max) * inv_t);
    w[i] = v >= min_p ? v : 0.0f;
  }
}

// sum of exp(x[i] - max) over a row (NaN and -inf count 0), in 8 float lanes that vectorise.
VV_ROW_PASS VV_NO_TRAPPING_MATH double sum_exp(const float* __restrict x, std::size_t n, float max) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += exp_nonpositive(x[i + k] - max);
  }
  double sum = 0.0;
  for (float l : lane) sum += l;
  for (; i < n; ++i) sum += exp_nonpositive(x[i] - max);
  return sum;
}

// Sum of the weights >= floor, in lanes that vectorise.
VV_ROW_PASS VV_NO_TRAPPING_MATH double sum_weights(const float* __restrict w, std::size_t n, float floor) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += w[i + k] >= floor ? w[i + k] : 0.0f;
  }
  double sum = 0.0;
  for (float l : lane) sum += l;
  for (; i < n; ++i) sum += w[i] >= floor ? w[i] : 0.0f;
  return sum;
}

// log(sum of exp(x[i])) over a row (NaN and -inf count 0; -inf when nothing counts) in one pass over
// memory: each block of kLseBlock values (in L1 after its max is taken) adds its sum relative to the
// running max, and the sum so far is rescaled when a block raises that max.
double log_sum_exp(std::span<const float> logits) {
  constexpr std::size_t kLseBlock = 2048;
  float max = kNegInf;
  double sum = 0.0;
  for (std::size_t b = 0; b < logits.size(); b += kLseBlock) {
    const std::span<const float> blk = logits.subspan(b, std::min(kLseBlock, logits.size() - b));
    const float bm = row_max(blk);
    if (bm == kNegInf) continue;
    if (bm > max) {
      if (max != kNegInf) sum *= std::exp(static_cast<double>(max) - static_cast<double>(bm));
      max = bm;
    }
    sum += sum_exp(blk.data(), blk.size(), max);
  }
  return max == kNegInf ? static_cast<double>(kNegInf) : static_cast<double>(max) + std::log(sum);
}

// Higher weight first; equal weights in id order, so every ordering is deterministic.
bool heavier(float wa, TokenId a, float wb, TokenId b) { return wa > wb || (wa == wb && a < b); }

}  // namespace

float token_logprob(std::span<const float> logits, TokenId id) {
  if (id < 0 || static_cast<std::size_t>(id) >= logits.size()) return kNegInf;
  const double log_z = log_sum_exp(logits);
  if (log_z == static_cast<double>(kNegInf)) return kNegInf;
  const double lp = static_cast<double>(clean(logits[id])) - log_z;
  return static_cast<float>(std::min(lp, 0.0));
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

std::vector<TokenLogprobEntry> top_logprobs(std::span<const float> logits, std::size_t n) {
  std::vector<TokenLogprobEntry> out;
  n = std::min(n, logits.size());
  if (n == 0) return out;
  std::vector<TokenLogprobEntry> all;
  all.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) all.push_back({static_cast<TokenId>(i), clean(logits[i])});
  auto by_logit = [](const TokenLogprobEntry& a, const TokenLogprobEntry& b) {
    return heavier(a.logprob, a.id, b.logprob, b.id);
  };
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), by_logit);
  if (all[0].logprob == kNegInf) return out;
  const double log_z = log_sum_exp(logits);  // token_logprob's, so a token's entries agree
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back({all[i].id, static_cast<float>(std::min(0.0, all[i].logprob - log_z))});
  }
  return out;
}

SampledToken Sampler::sample(std::span<const float> logits) {
  SampledToken out;
  if (logits.empty()) return out;
  const std::span<const float> row = adjusts_logits() ? adjusted(logits) : logits;
  const bool greedy = !(params_.temperature > 0.0f) || params_.top_k == 1;
  out.id = greedy ? pick_greedy(row) : pick_random(row);
  if (params_.logprobs) out.logprob = token_logprob(logits, out.id);
  if (params_.top_logprobs > 0) out.top_logprobs = top_logprobs(logits, static_cast<std::size_t>(params_.top_logprobs));
  observe(out.id);
  return out;
}

void Sampler::observe_prompt(std::span<const TokenId> prompt) {
  if (params_.repetition_penalty == 1.0f) return;
  prompt_ids_.insert(prompt.begin(), prompt.end());
}

void Sampler::observe(TokenId id) {
  if (params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
      params_.frequency_penalty == 0.0f) {
    return;
  }
  ++generated_counts_[id];
}

bool Sampler::adjusts_logits() const {
  return !params_.logit_bias.empty() || params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

std::span<const float> Sampler::adjusted(std::span<const float> logits) {
  adjusted_.assign(logits.begin(), logits.end());
  const auto in_row = [&](TokenId id) { return id >= 0 && static_cast<std::size_t>(id) < adjusted_.size(); };
  for (const auto& [id, bias] : params_.logit_bias) {
    if (in_row(id)) adjusted_[static_cast<std::size_t>(id)] += bias;
  }
  const float rp = params_.repetition_penalty;
  auto penalise = [&](TokenId id) {
    float& l = adjusted_[static_cast<std::size_t>(id)];
    l = l > 0.0f ? l / rp : l * rp;
  };
  if (rp != 1.0f) {
    for (TokenId id : prompt_ids_) {
      if (in_row(id)) penalise(id);
    }
    for (const auto& [id, count] : generated_counts_) {
      if (in_row(id) && !prompt_ids_.count(id)) penalise(id);
    }
  }
  for (const auto& [id, count] : generated_counts_) {
    if (!in_row(id)) continue;
    adjusted_[static_cast<std::size_t>(id)] -=
        params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
  }
  return adjusted_;
}

TokenId Sampler::pick_greedy(std::span<const float> logits) const {
  // Two passes: a vectorised max, then the first index holding it — the lowest id among ties.
  const float max = row_max(logits);
  if (max == kNegInf) return 0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (logits[j] == max) return static_cast<TokenId>(j);
  }
  return 0;
}

TokenId Sampler::pick_random(std::span<const float> logits) {
  auto by_weight = [](const Candidate& a, const Candidate& b) {
    return heavier(a.weight, a.id, b.weight, b.id);
  };
  const float max = row_max(logits);
  if (max == kNegInf) return 0;
  const float inv_t = 1.0f / params_.temperature;
  candidates_.clear();
  const std::size_t k = params_.top_k > 0 ? static_cast<std::size_t>(params_.top_k) : 0;
  if (k > 0 && k < logits.size()) {
    for (std::size_t i = 0; i < logits.size(); ++i) {
      candidates_.push_back({clean(logits[i]), static_cast<TokenId>(i)});
    }
    std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1), candidates_.end(), by_weight);
    candidates_.resize(k);
    for (auto& c : candidates_) c.weight = exp_nonpositive((c.weight - max) * inv_t);
    // min_p relative to the top token (weight 1): drop the rest.
    std::erase_if(candidates_, [&](const Candidate& c) { return !(c.weight > 0.0f) || c.weight < params_.min_p; });
  } else {
    weights_.resize(logits.size());
    fill_weights(logits.data(), weights_.data(), logits.size(), max, inv_t, params_.min_p);
    const float* w = weights_.data();
    if (params_.top_p >= 1.0f) return draw(weights_);
    // The nucleus is a prefix of the tokens by weight. When the tokens at or above a small
    // threshold already hold the nucleus mass, the nucleus lies among them, so only they become
    // candidates (exact; a trained model's peaked rows keep a few dozen of 152k).
    constexpr float kThreshold = 1e-4f;
    const double total_all = sum_weights(w, logits.size(), 0.0f);
    const float floor = sum_weights(w, logits.size(), kThreshold) >= params_.top_p * total_all ? kThreshold : 0.0f;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (w[i] > 0.0f && w[i] >= floor) candidates_.push_back({w[i], static_cast<TokenId>(i)});
    }
    cut_nucleus(total_all);
    double kept = 0.0;
    for (const auto& c : candidates_) kept += c.weight;
    return draw_candidates(kept);
  }
  double total = 0.0;
  for (const auto& c : candidates_) total += c.weight;
  if (params_.top_p < 1.0f) {
    cut_nucleus(total);
    total = 0.0;
    for (const auto& c : candidates_) total += c.weight;
  }
  return draw_candidates(total);
}

TokenId Sampler::draw_candidates(double total) {
  if (candidates_.empty()) return 0;
  const double u = rng_.uniform() * total;
  double acc = 0.0;
  for (const auto& c : candidates_) {
    acc += c.weight;
    if (u < acc) return c.id;
  }
  return candidates_.back().id;
}

TokenId Sampler::draw(const std::vector<float>& weights) {
  // Block sums (vectorised) locate the block holding the draw; only that block is scanned.
  constexpr std::size_t kBlock = 1024;
  const std::size_t n = weights.size();
  block_sums_.clear();
  double total = 0.0;
  for (std::size_t b = 0; b < n; b += kBlock) {
    const double s = sum_weights(weights.data() + b, std::min(kBlock, n - b), 0.0f);
    block_sums_.push_back(s);
    total += s;
  }
  double u = rng_.uniform() * total;
  std::size_t b = 0;
  while (b + 1 < block_sums_.size() && u >= block_sums_[b]) u -= block_sums_[b++];
  double acc = 0.0;
  TokenId last = 0;
  for (std::size_t j = b * kBlock; j < n; ++j) {
    if (weights[j] <= 0.0f) continue;
    acc += weights[j];
    last = static_cast<TokenId>(j);
    if (u < acc) return last;
  }
  return last;
}

void Sampler::cut_nucleus(double total) {
  auto by_weight = [](const Candidate& a, const Candidate& b) {
    return heavier(a.weight, a.id, b.weight, b.id);
  };
  const double target = static_cast<double>(params_.top_p) * total;
  // The nucleus is a prefix of the sorted order: partition out the heaviest m candidates, growing m
  // until they hold the target mass, and sort only those (a vocabulary-wide sort costs ~10 ms).
  std::size_t m = std::min<std::size_t>(64, candidates_.size());
  for (;;) {
    std::nth_element(candidates_.begin(), candidates_.begin() + (m - 1), candidates_.end(), by_weight);
    double mass = 0.0;
    for (std::size_t i = 0; i < m; ++i) mass += candidates_[i].weight;
    if (mass >= target || m == candidates_.size()) break;
    m = std::min(m * 4, candidates_.size());
  }
  std::sort(candidates_.begin(), candidates_.begin() + m, by_weight);
  double acc = 0.0;
  std::size_t keep = 0;
  while (keep < m) {
    acc += candidates_[keep].weight;
    ++keep;
    if (acc >= target) break;
  }
  candidates_.resize(std::max<std::size_t>(keep, 1));
}

}  // namespace vv
