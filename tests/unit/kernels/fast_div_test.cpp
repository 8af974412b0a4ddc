// FastDiv (kernels/cuda/fast_div.h, the flash kernels' block-table lookups) against / and %:
// every dividend below 2^16 and the 4,096 below 2^31 for every divisor up to 1,024, then random
// dividends below 2^31 for divisors up to 2^31 - 1.
#include "kernels/cuda/fast_div.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace vv::test {
namespace {

using cuda::FastDiv;

TEST(FastDiv, EveryDividendBelow65536AndTheTopOfTheRangeForDivisorsUpTo1024) {
  for (uint32_t d = 1; d <= 1024; ++d) {
    const FastDiv f = FastDiv::of(d);
    int wrong = 0;
    for (uint32_t n = 0; n < (1u << 16) && wrong == 0; ++n) wrong += f.div(n) != n / d || f.mod(n) != n % d;
    for (uint32_t n = 0x80000000u - 4096; n < 0x80000000u && wrong == 0; ++n) {
      wrong += f.div(n) != n / d || f.mod(n) != n % d;
    }
    ASSERT_EQ(wrong, 0) << "divisor " << d;
  }
}

TEST(FastDiv, RandomDividendsAndDivisorsBelow2To31) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> dividend(0, 0x7FFFFFFFu), divisor(1, 0x7FFFFFFFu);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t n = dividend(rng), d = i % 2 ? divisor(rng) : divisor(rng) % 5000 + 1;
    const FastDiv f = FastDiv::of(d);
    ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    ASSERT_EQ(f.mod(n), n % d) << n << " % " << d;
  }
}

TEST(FastDiv, PowersOfTwoAndOne) {
  for (uint32_t l = 0; l < 31; ++l) {
    const FastDiv f = FastDiv::of(1u << l);
    for (uint32_t n : {0u, 1u, 12345u, 0x7FFFFFFFu, (1u << l) - 1, 1u << l}) {
      EXPECT_EQ(f.div(n), n >> l) << n << " / 2^" << l;
    }
  }
}

}  // namespace
}  // namespace vv::test
