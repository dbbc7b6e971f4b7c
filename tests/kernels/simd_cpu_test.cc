// The CPU kernels' inline helpers (kernels_cpu/src/simd_cpu.h), where one stands in for another:
// exp_non_positive (softmax and attention) must give exp_vectorizable's bits on every input it
// is given, x <= 0 and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "simd_cpu.h"

namespace xf::cpu {
namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

TEST(SimdHelpers, ExpNonPositiveIsExpVectorizableBitForBit) {
  // Every 97th bit pattern of the negative floats (-0 to -inf and the negative NaNs), and the
  // region where the clamp and the underflow lie, value by value.
  int64_t checked = 0;
  for (uint64_t b = 0x80000000u; b <= 0xffffffffu; b += 97) {
    float x;
    const uint32_t bits = static_cast<uint32_t>(b);
    std::memcpy(&x, &bits, sizeof x);
    const float want = detail::exp_vectorizable(x), got = detail::exp_non_positive(x);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << x;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(want)) << x;
    }
    ++checked;
  }
  for (float x = -100.0f; x <= 0.0f; x = std::nextafter(x, 1.0f) + 0.0001f) {
    ASSERT_EQ(bits_of(detail::exp_non_positive(x)), bits_of(detail::exp_vectorizable(x))) << x;
  }
  EXPECT_EQ(detail::exp_non_positive(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_non_positive(-88.0f), 0.0f);
  EXPECT_GT(checked, 20000000);
}

}  // namespace
}  // namespace xf::cpu
