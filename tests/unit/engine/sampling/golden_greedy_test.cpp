// Sampler against the golden reference: greedy on the reference's last-prompt logits picks the
// reference's first generated token, and greedy on each step's recorded top-5 picks that step's token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "tests/support/test_paths.h"

namespace vv {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The numbers of the JSON array that follows `"key":` at or after `from` (flat arrays only).
std::vector<double> number_array(const std::string& json, const std::string& key, std::size_t from = 0,
                                 std::size_t* end_out = nullptr) {
  std::vector<double> out;
  std::size_t p = json.find("\"" + key + "\"", from);
  if (p == std::string::npos) return out;
  p = json.find('[', p);
  const std::size_t e = json.find(']', p);
  std::stringstream ss(json.substr(p + 1, e - p - 1));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stod(item));
  if (end_out) *end_out = e;
  return out;
}

float bf16_to_float(std::uint16_t v) {
  const std::uint32_t bits = std::uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1F;
  const std::uint32_t mant = h & 0x3FF;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(mant), -24);
  std::uint32_t bits = exp == 31 ? sign | 0x7F800000u | (mant << 13) : sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One tensor of a safetensors file as floats (F32, BF16 or F16), read by hand for the test.
std::vector<float> safetensors_tensor(const std::string& path, const std::string& name) {
  const std::string file = read_file(path);
  if (file.size() < 8) return {};
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const std::string header = file.substr(8, n);
  const std::size_t at = header.find("\"" + name + "\"");
  if (at == std::string::npos) return {};
  const std::size_t dt = header.find("\"dtype\"", at);
  const std::size_t q1 = header.find('"', header.find(':', dt) + 1);
  const std::string dtype = header.substr(q1 + 1, header.find('"', q1 + 1) - q1 - 1);
  const std::vector<double> offs = number_array(header, "data_offsets", at);
  const std::size_t begin = 8 + n + static_cast<std::size_t>(offs[0]);
  const std::size_t bytes = static_cast<std::size_t>(offs[1] - offs[0]);
  std::vector<float> out;
  if (dtype == "F32") {
    out.resize(bytes / 4);
    std::memcpy(out.data(), file.data() + begin, bytes);
  } else if (dtype == "BF16" || dtype == "F16") {
    for (std::size_t i = 0; i < bytes / 2; ++i) {
      std::uint16_t v;
      std::memcpy(&v, file.data() + begin + 2 * i, 2);
      out.push_back(dtype == "BF16" ? bf16_to_float(v) : f16_to_float(v));
    }
  }
  return out;
}

TEST(GoldenGreedy, ArgmaxOfLastPromptLogitsIsTheFirstGeneratedToken) {
  const auto cases = test::golden_cases();
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string dir = test::golden_dir() + "/cases/" + c;
    const std::string json = read_file(dir + "/golden.json");
    const std::vector<double> generated = number_array(json, "generated_ids");
    ASSERT_FALSE(generated.empty()) << c;
    const std::vector<float> logits = safetensors_tensor(dir + "/golden.safetensors", "logits.last");
    ASSERT_FALSE(logits.empty()) << c << ": logits.last missing";
    SamplingParams p;
    p.logprobs = true;
    Sampler s(p);
    const SampledToken t = s.sample(logits);
    EXPECT_EQ(t.id, static_cast<TokenId>(generated[0])) << c;
    // logprob = log-softmax in double precision.
    double mx = -std::numeric_limits<double>::infinity();
    for (float x : logits) mx = std::max(mx, double(x));
    double z = 0;
    for (float x : logits) z += std::exp(double(x) - mx);
    EXPECT_NEAR(t.logprob, double(logits[t.id]) - mx - std::log(z), 1e-4) << c;
  }
}

TEST(GoldenGreedy, EachStepsTopFivePicksThatStepsToken) {
  for (const auto& c : test::golden_cases()) {
    const std::string json = read_file(test::golden_dir() + "/cases/" + c + "/golden.json");
    const std::vector<double> generated = number_array(json, "generated_ids");
    std::size_t pos = json.find("\"greedy_topk\"");
    ASSERT_NE(pos, std::string::npos) << c;
    Sampler s(SamplingParams{});
    for (std::size_t step = 0; step < generated.size(); ++step) {
      std::size_t end = 0;
      const std::vector<double> ids = number_array(json, "ids", pos, &end);
      const std::vector<double> values = number_array(json, "logits", end, &end);
      ASSERT_EQ(ids.size(), values.size()) << c << " step " << step;
      pos = end;
      // A logits row where only the recorded top-5 are finite.
      double max_id = 0;
      for (double id : ids) max_id = std::max(max_id, id);
      std::vector<float> row(static_cast<std::size_t>(max_id) + 1, -std::numeric_limits<float>::infinity());
      for (std::size_t i = 0; i < ids.size(); ++i) row[static_cast<std::size_t>(ids[i])] = static_cast<float>(values[i]);
      EXPECT_EQ(s.sample(row).id, static_cast<TokenId>(generated[step])) << c << " step " << step;
    }
  }
}

}  // namespace
}  // namespace vv
