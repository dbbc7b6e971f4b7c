// Row kernels (load_row, quantization, embed, LayerNorm, bias/residual, ReLU, gather) against
// double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "random_inputs.h"
#include "xf/dtype.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"

namespace xf::cpu {
namespace {

// Value of an IEEE-style binary float with the given field widths, decoded from its bits with
// ldexp (independent of the bit tricks in format/ and kernels_cpu/).
double decode_binary_float(uint32_t bits, int exponent_bits, int mantissa_bits) {
  const uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  const uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const bool negative = (bits >> (mantissa_bits + exponent_bits)) & 1u;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  double value;
  if (exponent == (1u << exponent_bits) - 1) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -mantissa_bits),
                       static_cast<int>(exponent) - bias);
  }
  return negative ? -value : value;
}

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

// out[i, c] = scale * table[id, c] + PE(position, c), in double.
std::vector<double> reference_embed(const std::vector<double>& table, int64_t dim,
                                    const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& positions, double scale) {
  std::vector<double> out(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t pair = c / 2;
      const double angle = positions[i] / std::pow(10000.0, 2.0 * pair / dim);
      const double sinusoid = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
      out[i * dim + c] = scale * table[ids[i] * dim + c] + sinusoid;
    }
  }
  return out;
}

void check_embed(DType dtype, int64_t vocab, int64_t dim, int threads, test::RandomInputs& random) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
  const std::vector<float> values = random.uniform(vocab * dim, -0.2f, 0.2f);
  std::vector<double> widened(vocab * dim);  // the table's values as stored, exactly
  std::vector<uint16_t> narrow(vocab * dim);
  std::vector<int8_t> quantized(vocab * dim);
  std::vector<float> row_scales(vocab);
  WeightMatrix table{dtype, values.data(), nullptr, vocab, dim};
  if (dtype == DType::f16) {
    for (size_t i = 0; i < values.size(); ++i) narrow[i] = float_to_half(values[i]);
    for (size_t i = 0; i < values.size(); ++i) widened[i] = decode_binary_float(narrow[i], 5, 10);
    table.data = narrow.data();
  } else if (dtype == DType::int8) {
    quantize_rows_int8(values.data(), vocab, dim, quantized.data(), row_scales.data());
    for (size_t i = 0; i < values.size(); ++i) {
      widened[i] = static_cast<double>(quantized[i]) * row_scales[i / dim];
    }
    table.data = quantized.data();
    table.row_scales = row_scales.data();
  } else {
    for (size_t i = 0; i < values.size(); ++i) widened[i] = values[i];
  }
  const int64_t count = 23;
  std::vector<int32_t> ids(count), positions(count);
  for (int64_t i = 0; i < count; ++i) {
    ids[i] = static_cast<int32_t>(random.integer(0, vocab - 1));
    positions[i] = static_cast<int32_t>(random.integer(0, 1000));
  }
  positions[0] = 0;
  // Runs of equal positions, as in a decode step (the kernel reuses the sinusoid).
  for (int64_t i = 3; i < count; i += 4) positions[i] = positions[i - 1];
  const float scale = std::sqrt(static_cast<float>(dim));
  std::vector<float> out(count * dim);
  embed(table, ids.data(), positions.data(), count, scale, out.data(), threads);
  const std::vector<double> expected = reference_embed(widened, dim, ids, positions, scale);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], expected[i], 1e-5 * (1.0 + std::fabs(expected[i]))) << "element " << i;
  }
}

TEST(Embed, ScalesTheRowAndAddsSinusoids) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (DType dtype : {DType::f32, DType::f16, DType::int8}) {
    check_embed(dtype, 50, 64, 2, random);
    check_embed(dtype, 11, 7, 1, random);    // odd dim: the last column is a sine
    check_embed(dtype, 9, 600, 2, random);   // wider than the widening buffer
    check_embed(dtype, 3, 2100, 2, random);  // wider than the cached sinusoid
  }
}

// The sinusoid layouts of imported models, against double-precision formulas written here:
// Hugging Face's Marian (the paper's frequencies, all sines then all cosines) and Marian's own
// (frequencies 10000^(-i / (d/2 - 1)), sines then cosines; Marian computes them in float, hence
// the looser bound at positions in the hundreds).
TEST(Embed, SinThenCosLayouts) {
  const int64_t dim = 16, half = dim / 2;
  for (const PositionEncoding encoding : {PositionEncoding::sin_then_cos, PositionEncoding::marian_sin_then_cos}) {
    for (const int32_t position : {0, 1, 7, 300}) {
      std::vector<float> out(dim);
      write_sinusoid(encoding, position, dim, out.data());
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t i = c % half;
        const double frequency = encoding == PositionEncoding::sin_then_cos
                                     ? std::pow(10000.0, -2.0 * i / dim)
                                     : std::exp(-static_cast<double>(i) * std::log(10000.0) / (half - 1));
        const double angle = position * frequency;
        const double expected = c < half ? std::sin(angle) : std::cos(angle);
        const double tolerance = encoding == PositionEncoding::sin_then_cos ? 1e-6 : 1e-7 * (1 + position) + 1e-6;
        EXPECT_NEAR(out[c], expected, tolerance) << "column " << c << " position " << position;
      }
    }
    // embed() adds the same sinusoid to the scaled row.
    const std::vector<float> table_values(3 * dim, 0.5f);
    const WeightMatrix table{DType::f32, table_values.data(), nullptr, 3, dim};
    const std::vector<int32_t> ids = {2, 0}, positions = {5, 9};
    std::vector<float> out(2 * dim), sinusoid(dim);
    embed(table, ids.data(), positions.data(), 2, 2.0f, out.data(), 1, encoding);
    for (int64_t r = 0; r < 2; ++r) {
      write_sinusoid(encoding, positions[r], dim, sinusoid.data());
      for (int64_t c = 0; c < dim; ++c) EXPECT_FLOAT_EQ(out[r * dim + c], 1.0f + sinusoid[c]);
    }
  }
}

TEST(Embed, RejectsIdsOutsideTheTable) {
  const std::vector<float> table(4 * 8, 0.0f);
  const WeightMatrix weights{DType::f32, table.data(), nullptr, 4, 8};
  std::vector<float> out(8);
  const int32_t position = 0;
  for (int32_t id : {-1, 4}) {
    EXPECT_THROW(embed(weights, &id, &position, 1, 1.0f, out.data(), 1), Error) << id;
  }
  const int32_t id = 0, negative = -1;
  EXPECT_THROW(embed(weights, &id, &negative, 1, 1.0f, out.data(), 1), Error);
}

enum class Alias { none, x, residual };

void check_layer_norm(int64_t rows, int64_t dim, bool with_bias, bool with_residual, Alias alias,
                      test::RandomInputs& random) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " bias " +
               std::to_string(with_bias) + " residual " + std::to_string(with_residual) +
               " alias " + std::to_string(static_cast<int>(alias)));
  // An offset of 3 makes a one-pass variance lose digits; the kernel must not.
  std::vector<float> x = random.uniform(rows * dim, 2.0f, 4.0f);
  std::vector<float> residual = random.uniform(rows * dim, -1.0f, 1.0f);
  const std::vector<float> bias = random.uniform(dim, -0.5f, 0.5f);
  const std::vector<float> gamma = random.uniform(dim, 0.5f, 1.5f);
  const std::vector<float> beta = random.uniform(dim, -0.5f, 0.5f);
  const float epsilon = 1e-5f;

  std::vector<double> expected(rows * dim), expected_mean(rows), expected_rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> v(dim);
    double sum = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      v[c] = static_cast<double>(x[r * dim + c]) + (with_bias ? bias[c] : 0.0) +
             (with_residual ? residual[r * dim + c] : 0.0);
      sum += v[c];
    }
    const double mean = sum / dim;
    double squares = 0.0;
    for (int64_t c = 0; c < dim; ++c) squares += (v[c] - mean) * (v[c] - mean);
    const double rstd = 1.0 / std::sqrt(squares / dim + epsilon);
    for (int64_t c = 0; c < dim; ++c) {
      expected[r * dim + c] = (v[c] - mean) * rstd * gamma[c] + beta[c];
    }
    expected_mean[r] = mean;
    expected_rstd[r] = rstd;
  }

  std::vector<float> separate_out(rows * dim, std::numeric_limits<float>::quiet_NaN());
  float* out = alias == Alias::x          ? x.data()
               : alias == Alias::residual ? residual.data()
                                          : separate_out.data();
  if (alias == Alias::residual && !with_residual) return;
  std::vector<float> mean(rows), rstd(rows);
  add_bias_residual_layer_norm(x.data(), with_bias ? bias.data() : nullptr,
                               with_residual ? residual.data() : nullptr, gamma.data(), beta.data(),
                               epsilon, rows, dim, out, mean.data(), rstd.data(), 2);
  for (int64_t i = 0; i < rows * dim; ++i) {
    ASSERT_NEAR(out[i], expected[i], 1e-5 * (1.0 + std::fabs(expected[i]))) << "element " << i;
  }
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(mean[r], expected_mean[r], 1e-5 * std::fabs(expected_mean[r])) << "row " << r;
    EXPECT_NEAR(rstd[r], expected_rstd[r], 1e-5 * expected_rstd[r]) << "row " << r;
  }
}

TEST(AddBiasResidualLayerNorm, MatchesReferenceForEveryInputCombination) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (bool with_bias : {false, true}) {
    for (bool with_residual : {false, true}) {
      check_layer_norm(7, 512, with_bias, with_residual, Alias::none, random);
      check_layer_norm(3, 37, with_bias, with_residual, Alias::none, random);
    }
  }
}

TEST(AddBiasResidualLayerNorm, OutputMayAliasAnInput) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  check_layer_norm(5, 64, true, true, Alias::x, random);
  check_layer_norm(5, 64, true, true, Alias::residual, random);
  check_layer_norm(5, 64, false, false, Alias::x, random);
}

TEST(AddBiasResidualLayerNorm, MeanAndRstdAreOptional) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 3, dim = 16;
  const std::vector<float> x = random.uniform(rows * dim, -1.0f, 1.0f);
  const std::vector<float> gamma(dim, 1.0f), beta(dim, 0.0f);
  std::vector<float> with_stats(rows * dim), without_stats(rows * dim), mean(rows), rstd(rows);
  add_bias_residual_layer_norm(x.data(), nullptr, nullptr, gamma.data(), beta.data(), 1e-6f, rows,
                               dim, with_stats.data(), mean.data(), rstd.data(), 1);
  add_bias_residual_layer_norm(x.data(), nullptr, nullptr, gamma.data(), beta.data(), 1e-6f, rows,
                               dim, without_stats.data(), nullptr, nullptr, 1);
  EXPECT_EQ(with_stats, without_stats);
}

TEST(AddBiasResidual, AddsWhateverIsGiven) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 9, dim = 70;
  const std::vector<float> x = random.uniform(rows * dim, -2.0f, 2.0f);
  const std::vector<float> bias = random.uniform(dim, -1.0f, 1.0f);
  const std::vector<float> residual = random.uniform(rows * dim, -2.0f, 2.0f);
  for (bool with_bias : {false, true}) {
    for (bool with_residual : {false, true}) {
      std::vector<float> out = x;
      add_bias_residual(out.data(), with_bias ? bias.data() : nullptr,
                        with_residual ? residual.data() : nullptr, rows, dim, 2);
      for (int64_t i = 0; i < rows * dim; ++i) {
        const double b = with_bias ? bias[i % dim] : 0.0;
        const double r = with_residual ? residual[i] : 0.0;
        const double expected = static_cast<double>(x[i]) + b + r;
        ASSERT_NEAR(out[i], expected, 1e-6 * (std::fabs(x[i]) + std::fabs(b) + std::fabs(r)))
            << "element " << i << " bias " << with_bias << " residual " << with_residual;
      }
    }
  }
}

TEST(BiasRelu, ClampsNegativesAfterTheBias) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 6, dim = 2048;
  const std::vector<float> x = random.uniform(rows * dim, -1.0f, 1.0f);
  const std::vector<float> bias = random.uniform(dim, -0.5f, 0.5f);
  for (bool with_bias : {true, false}) {
    std::vector<float> out = x;
    bias_relu(out.data(), with_bias ? bias.data() : nullptr, rows, dim, 2);
    for (int64_t i = 0; i < rows * dim; ++i) {
      const double b = with_bias ? bias[i % dim] : 0.0;
      const double expected = std::max(0.0, static_cast<double>(x[i]) + b);
      ASSERT_NEAR(out[i], expected, 1e-6 * (std::fabs(x[i]) + std::fabs(b))) << "element " << i;
    }
  }
}

// swish x * sigmoid(x) and gelu x * Phi(x) (erf) after the bias, against double formulas, over
// a range that reaches exp's overflow; relu is bias_relu.
TEST(BiasActivation, SwishAndGeluMatchDoubleFormulas) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 7, dim = 45;
  std::vector<float> x = random.uniform(rows * dim, -12.0f, 12.0f);
  x[0] = -100.0f;  // exp(100) overflows float: swish must give -0, not NaN
  x[1] = 100.0f;
  const std::vector<float> bias = random.uniform(dim, -1.0f, 1.0f);
  for (const Activation activation : {Activation::swish, Activation::gelu, Activation::relu}) {
    for (const bool with_bias : {true, false}) {
      std::vector<float> out = x;
      bias_activation(out.data(), with_bias ? bias.data() : nullptr, rows, dim, activation, 2);
      for (int64_t i = 0; i < rows * dim; ++i) {
        const double v = static_cast<double>(x[i]) + (with_bias ? bias[i % dim] : 0.0);
        const double expected = activation == Activation::swish  ? v / (1.0 + std::exp(-v))
                                : activation == Activation::gelu ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))
                                                                 : std::max(v, 0.0);
        ASSERT_FALSE(std::isnan(out[i])) << i;
        ASSERT_NEAR(out[i], expected, 2e-6 * (1.0 + std::fabs(expected))) << "element " << i;
      }
    }
  }
}

TEST(GatherRows, CopiesTheIndexedRowsWithStrides) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t src_rows = 8, row_len = 33, src_stride = 40, dst_stride = 35, count = 12;
  const std::vector<float> src = random.uniform(src_rows * src_stride, -1.0f, 1.0f);
  std::vector<int32_t> indices(count);
  for (int32_t& index : indices) index = static_cast<int32_t>(random.integer(0, src_rows - 1));
  indices[1] = indices[0];  // a beam may be chosen twice
  const float untouched = -7.0f;
  std::vector<float> dst(count * dst_stride, untouched);
  gather_rows(src.data(), src_stride, indices.data(), count, row_len, dst.data(), dst_stride, 2);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t c = 0; c < dst_stride; ++c) {
      const float expected = c < row_len ? src[indices[i] * src_stride + c] : untouched;
      ASSERT_EQ(dst[i * dst_stride + c], expected) << "row " << i << " column " << c;
    }
  }
}

}  // namespace
}  // namespace xf::cpu
