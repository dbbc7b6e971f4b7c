// The CPU's weight rows: load_row (widening f16/bf16, dequantizing int8), the per-row int8
// quantization of activations, and the scale-and-bias after an int8 product, against exact
// decodings and double-precision references. CPU-only: the CUDA backend stores its weights in
// its compute precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernel_device.h"
#include "random_inputs.h"
#include "xf/dtype.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/convert.h"

namespace xf::cpu {
namespace {

using test::decode_binary_float;

void expect_same_value(float got, double expected, const std::string& what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else {
    EXPECT_EQ(static_cast<double>(got), expected) << what;
  }
}

TEST(LoadRow, F32CopiesTheRow) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 5, cols = 37;
  const std::vector<float> values = random.uniform(rows * cols, -3.0f, 3.0f);
  const WeightMatrix weights{DType::f32, values.data(), nullptr, rows, cols};
  std::vector<float> out(cols);
  for (int64_t r = 0; r < rows; ++r) {
    load_row(weights, r, out.data());
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(out[c], values[r * cols + c]);
  }
}

// All 65536 16-bit patterns of `dtype` as one [rows, 65536 / rows] matrix (normals, subnormals,
// zeros, inf, NaN), each row widened by load_row against the decoded value of its bits.
void expect_every_bit_pattern_widened(DType dtype, int64_t rows, int exponent_bits,
                                      int fraction_bits) {
  std::vector<uint16_t> bits(65536);
  for (uint32_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  const int64_t cols = 65536 / rows;
  const WeightMatrix weights{dtype, bits.data(), nullptr, rows, cols};
  std::vector<float> out(cols);
  for (int64_t r = 0; r < rows; ++r) {
    load_row(weights, r, out.data());
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t pattern = static_cast<uint32_t>(r * cols + c);
      expect_same_value(out[c], decode_binary_float(pattern, exponent_bits, fraction_bits),
                        std::string(dtype_name(dtype)) + " bits " + std::to_string(pattern));
    }
  }
}

TEST(LoadRow, F16WidensEveryBitPattern) {
  expect_every_bit_pattern_widened(DType::f16, 256, 5, 10);
}

TEST(LoadRow, Bf16WidensEveryBitPattern) {
  expect_every_bit_pattern_widened(DType::bf16, 512, 8, 7);
}

TEST(LoadRow, Int8DequantizesWithTheRowScale) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 4, cols = 300;
  std::vector<int8_t> values(rows * cols);
  for (int8_t& v : values) v = static_cast<int8_t>(random.integer(-127, 127));
  const std::vector<float> scales = random.uniform(rows, 1e-3f, 0.1f);
  const WeightMatrix weights{DType::int8, values.data(), scales.data(), rows, cols};
  std::vector<float> out(cols);
  for (int64_t r = 0; r < rows; ++r) {
    load_row(weights, r, out.data());
    for (int64_t c = 0; c < cols; ++c) {
      const double expected = static_cast<double>(values[r * cols + c]) * scales[r];
      EXPECT_NEAR(out[c], expected, std::fabs(expected) * 1e-7) << r << "," << c;
    }
  }
}

TEST(QuantizeInt8PerRow, EachRowRoundsToNearestWithItsOwnAbsmaxScale) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 13}, {5, 1}, {64, 512}}) {  // 64 x 512: parallel
    std::vector<float> x = random.uniform(rows * cols, -4.0f, 4.0f);
    for (int64_t c = 0; c < cols; ++c) x[c] *= 100.0f;  // a row much larger than the others
    std::vector<int8_t> quantized(rows * cols);
    std::vector<float> scales(rows);
    quantize_int8_per_row(x.data(), rows, cols, quantized.data(), scales.data(), 2);
    for (int64_t r = 0; r < rows; ++r) {
      double absmax = 0.0;
      for (int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(static_cast<double>(x[r * cols + c])));
      EXPECT_NEAR(scales[r], absmax / 127.0, absmax / 127.0 * 1e-7) << "row " << r;
      for (int64_t c = 0; c < cols; ++c) {
        const double exact = x[r * cols + c] / static_cast<double>(scales[r]);
        // Nearest integer, with slack only for x / scale rounding in float at exact halves.
        ASSERT_LE(std::fabs(quantized[r * cols + c] - exact), 0.5 + 1e-5) << r << "," << c;
        ASSERT_LE(std::abs(static_cast<int>(quantized[r * cols + c])), 127);
      }
    }
    // The same rule as the format's per-row quantizer, and each row alone gives the same.
    std::vector<int8_t> by_format(rows * cols);
    std::vector<float> format_scales(rows);
    quantize_rows_int8(x.data(), rows, cols, by_format.data(), format_scales.data());
    EXPECT_EQ(format_scales, scales);
    EXPECT_EQ(by_format, quantized);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int8_t> alone(cols);
      float scale = 0.0f;
      quantize_int8_per_row(x.data() + r * cols, 1, cols, alone.data(), &scale, 1);
      EXPECT_EQ(scale, scales[r]);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), quantized.begin() + r * cols)) << "row " << r;
    }
  }
}

// The 7-bit x of plain AVX2's int8 products (int8_x_max_level() 63): the same rule to 63.
TEST(QuantizeInt8PerRow, SmallerMaxLevelScalesToIt) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 3, cols = 40;
  const std::vector<float> x = random.uniform(rows * cols, -4.0f, 4.0f);
  std::vector<int8_t> quantized(rows * cols);
  std::vector<float> scales(rows);
  quantize_int8_per_row(x.data(), rows, cols, quantized.data(), scales.data(), 1, 63);
  bool reaches_63 = false;
  for (int64_t r = 0; r < rows; ++r) {
    double absmax = 0.0;
    for (int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(static_cast<double>(x[r * cols + c])));
    EXPECT_NEAR(scales[r], absmax / 63.0, absmax / 63.0 * 1e-7) << "row " << r;
    for (int64_t c = 0; c < cols; ++c) {
      const int q = quantized[r * cols + c];
      ASSERT_LE(std::fabs(q - x[r * cols + c] / static_cast<double>(scales[r])), 0.5 + 1e-5);
      ASSERT_LE(std::abs(q), 63);
      reaches_63 = reaches_63 || std::abs(q) == 63;
    }
  }
  EXPECT_TRUE(reaches_63);
  for (int bad : {0, 128}) {
    EXPECT_THROW(quantize_int8_per_row(x.data(), rows, cols, quantized.data(), scales.data(), 1, bad), Error);
  }
}

TEST(QuantizeInt8PerRow, ZeroRowsGetScaleOne) {
  std::vector<float> x(50, 0.0f);
  x[30] = 2.0f;  // row 1 of [2, 25]
  std::vector<int8_t> quantized(50, 7);
  float scales[2];
  quantize_int8_per_row(x.data(), 2, 25, quantized.data(), scales, 2);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 2.0f / 127.0f);
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(quantized[i], 0);
  EXPECT_EQ(quantized[30], 127);
}

TEST(ScaleRowsAddBias, ScalesEachRowAndAddsTheBias) {
  std::vector<float> y = {1, 2, 3, 4, 5, 6};
  const float scales[2] = {2.0f, -1.0f};
  const float bias[3] = {0.5f, 0.0f, -0.5f};
  scale_rows_add_bias(y.data(), 2, 3, scales, bias, 2);
  EXPECT_EQ(y, (std::vector<float>{2.5f, 4.0f, 5.5f, -3.5f, -5.0f, -6.5f}));
  scale_rows_add_bias(y.data(), 2, 3, scales, nullptr, 1);
  EXPECT_EQ(y, (std::vector<float>{5.0f, 8.0f, 11.0f, 3.5f, 5.0f, 6.5f}));
}

}  // namespace
}  // namespace xf::cpu
