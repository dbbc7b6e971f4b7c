// f16 / bf16 conversions against references computed in double precision from the formats'
// definitions, and int8 per-row quantization against its documented formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"

namespace xf {
namespace {

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A 16-bit float of 1 sign, `exponent_bits` exponent (bias 2^(exponent_bits-1) - 1) and
// `mantissa_bits` mantissa bits, read as the standard says (subnormals, infinities, NaN).
double sixteen_bit_reference_value(uint16_t bits, int exponent_bits, int mantissa_bits) {
  const int max_exponent = (1 << exponent_bits) - 1, bias = max_exponent / 2;
  const int exponent = (bits >> mantissa_bits) & max_exponent;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == max_exponent) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  const int implicit_one = exponent == 0 ? 0 : 1 << mantissa_bits;
  return sign * std::ldexp(implicit_one + mantissa, std::max(exponent, 1) - bias - mantissa_bits);
}
double half_reference_value(uint16_t h) { return sixteen_bit_reference_value(h, 5, 10); }
double bfloat16_reference_value(uint16_t b) { return sixteen_bit_reference_value(b, 8, 7); }

// x rounded to nearest-even with `mantissa_bits` stored bits, a smallest normal exponent of
// `min_exponent`, overflowing to infinity from `overflow_threshold` on. In double: exact.
double round_reference(float x, int mantissa_bits, int min_exponent, double overflow_threshold) {
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) || a >= overflow_threshold) {
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  }
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int leading = std::max(e - 1, min_exponent);
  const double quantum = std::ldexp(1.0, leading - mantissa_bits);
  return std::copysign(std::nearbyint(a / quantum) * quantum, x);  // nearbyint: ties to even
}

double half_round_reference(float x) { return round_reference(x, 10, -14, 65520.0); }
double bfloat16_round_reference(float x) {
  return round_reference(x, 7, -126, std::ldexp(1.0, 128) - std::ldexp(1.0, 119));
}

void expect_same_value(double got, double want, float input) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "input " << input;
    return;
  }
  EXPECT_EQ(got, want) << "input " << std::hexfloat << input;
  EXPECT_EQ(std::signbit(got), std::signbit(want)) << "input " << input;
}

TEST(FormatDTypeConvert, HalfToFloatEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double want = half_reference_value(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    ASSERT_NO_FATAL_FAILURE(expect_same_value(got, want, static_cast<float>(h)));
  }
}

TEST(FormatDTypeConvert, BFloat16ToFloatEveryPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const double want = bfloat16_reference_value(static_cast<uint16_t>(b));
    const float got = bfloat16_to_float(static_cast<uint16_t>(b));
    ASSERT_NO_FATAL_FAILURE(expect_same_value(got, want, static_cast<float>(b)));
  }
}

// Each pair of neighbours (h, h+1), subnormals included: the exact midpoint goes to the even
// one, a float ulp either side to the nearer one. Past the largest finite value h, infinity
// begins one step (the last spacing) further, so h's upper midpoint rounds to infinity.
template <typename ToBits, typename Value>
void check_midpoints(uint16_t largest_finite, ToBits to_bits, Value value) {
  for (uint32_t h = 0; h <= largest_finite; ++h) {
    const double low_magnitude = value(static_cast<uint16_t>(h));
    const double step = h == largest_finite
                            ? low_magnitude - value(static_cast<uint16_t>(h - 1))
                            : value(static_cast<uint16_t>(h + 1)) - low_magnitude;
    const double mid = low_magnitude + step / 2;
    ASSERT_EQ(static_cast<double>(static_cast<float>(mid)), mid) << "midpoint is a float";
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const uint16_t low = static_cast<uint16_t>(h | sign);
      const uint16_t high = static_cast<uint16_t>((h + 1) | sign);
      const float midpoint = sign ? -static_cast<float>(mid) : static_cast<float>(mid);
      const uint16_t even = (h & 1) ? high : low;
      ASSERT_EQ(to_bits(midpoint), even) << std::hexfloat << midpoint;
      const float toward_zero = std::nextafter(midpoint, 0.0f);
      const float away = std::nextafter(midpoint, sign ? -INFINITY : INFINITY);
      ASSERT_EQ(to_bits(toward_zero), low) << std::hexfloat << toward_zero;
      ASSERT_EQ(to_bits(away), high) << std::hexfloat << away;
    }
  }
}

TEST(FormatDTypeConvert, FloatToHalfMidpointsRoundToEven) {
  // 0x7bff is 65504, the largest finite half; 65520 rounds to 0x7c00, infinity.
  check_midpoints(0x7bff, float_to_half, half_reference_value);
}

TEST(FormatDTypeConvert, FloatToBFloat16MidpointsRoundToEven) {
  // 0x7f7f is the largest finite bfloat16; from 2^128 - 2^119 on, values round to infinity,
  // the largest float among them.
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  check_midpoints(0x7f7f, float_to_bfloat16, bfloat16_reference_value);
}

// Random floats over every exponent that matters (underflow to zero through overflow).
TEST(FormatDTypeConvert, FloatToHalfRandomAgainstReference) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> exponent(95, 150), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_float(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng));
    ASSERT_NO_FATAL_FAILURE(
        expect_same_value(half_reference_value(float_to_half(x)), half_round_reference(x), x));
  }
}

TEST(FormatDTypeConvert, FloatToBFloat16RandomAgainstReference) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> exponent(0, 254), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_to_float(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng));
    ASSERT_NO_FATAL_FAILURE(expect_same_value(bfloat16_reference_value(float_to_bfloat16(x)),
                                              bfloat16_round_reference(x), x));
  }
}

TEST(FormatDTypeConvert, InfinityNanAndZeros) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_half(inf), 0x7c00);
  EXPECT_EQ(float_to_half(-inf), 0xfc00);
  EXPECT_EQ(float_to_bfloat16(inf), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-inf), 0xff80);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest half subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // its half: ties to even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest half normal
  // NaNs stay NaN, even one whose payload lies only in the low mantissa bits a narrowing
  // conversion drops (a naive shift would turn it into infinity).
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const float nan = bits_to_float(nan_bits);
    const uint16_t h = float_to_half(nan), b = float_to_bfloat16(nan);
    EXPECT_TRUE(std::isnan(half_to_float(h))) << std::hex << nan_bits << " -> " << h;
    EXPECT_TRUE(std::isnan(bfloat16_to_float(b))) << std::hex << nan_bits << " -> " << b;
    EXPECT_EQ(std::signbit(half_to_float(h)), std::signbit(nan));
    EXPECT_EQ(std::signbit(bfloat16_to_float(b)), std::signbit(nan));
  }
}

// scale[r] = max|row r| / 127 (in f32, as documented), q = round(x / scale) within [-127, 127].
void check_quantized(const std::vector<float>& values, size_t rows, size_t cols) {
  std::vector<int8_t> q(rows * cols);
  std::vector<float> scales(rows);
  quantize_rows_int8(values.data(), rows, cols, q.data(), scales.data());
  for (size_t r = 0; r < rows; ++r) {
    float absmax = 0.0f;
    for (size_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(values[r * cols + c]));
    if (absmax == 0.0f) {
      EXPECT_EQ(scales[r], 1.0f) << "row " << r;
    } else if (absmax / 127.0f > 0.0f) {
      EXPECT_EQ(scales[r], absmax / 127.0f) << "row " << r;
    }
    ASSERT_GT(scales[r], 0.0f) << "row " << r;
    ASSERT_TRUE(std::isfinite(scales[r])) << "row " << r;
    for (size_t c = 0; c < cols; ++c) {
      const double x = values[r * cols + c];
      const int stored = q[r * cols + c];
      EXPECT_GE(stored, -127);
      EXPECT_LE(stored, 127);
      // x / scale is at most 127 + a float rounding of ~1e-5: the bound allows that, no more.
      const double exact = x / scales[r];
      const double clamped = std::max(-127.0, std::min(127.0, exact));
      EXPECT_LE(std::fabs(stored - clamped), 0.5 + 1e-4) << "row " << r << " col " << c;
      if (std::fabs(x) == absmax && absmax / 127.0f > 0.0f) {
        EXPECT_EQ(std::abs(stored), 127) << "the row maximum uses the full range";
      }
    }
  }
}

TEST(FormatInt8Quantize, RandomRowsAgainstFormula) {
  std::mt19937 rng(3);
  const size_t rows = 37, cols = 53;
  std::vector<float> values(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    // Rows of very different magnitudes: scales are per row.
    std::normal_distribution<float> normal(0.0f, std::ldexp(1.0f, static_cast<int>(r) - 18));
    for (size_t c = 0; c < cols; ++c) values[r * cols + c] = normal(rng);
  }
  check_quantized(values, rows, cols);
}

TEST(FormatInt8Quantize, ZeroRowTinyRowAndTies) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> values = {
      0.0f, 0.0f, -0.0f, 0.0f,           // all zero: scale 1, q 0
      127.0f, 0.5f, 1.5f, -2.5f,         // scale 1 exactly: ties go to even (0, 2, -2)
      tiny, -tiny, 0.0f, tiny,           // absmax / 127 underflows to zero
      1e-39f, -5e-40f, 1e-40f, 0.0f,     // subnormal absmax
  };
  check_quantized(values, 4, 4);
  std::vector<int8_t> q(16);
  std::vector<float> scales(4);
  quantize_rows_int8(values.data(), 4, 4, q.data(), scales.data());
  EXPECT_EQ(q[4], 127);
  EXPECT_EQ(q[5], 0);
  EXPECT_EQ(q[6], 2);
  EXPECT_EQ(q[7], -2);
  // No f32 scale is below denorm_min, so the tiny row gets that scale and dequantizes exactly.
  EXPECT_EQ(scales[2], tiny);
  EXPECT_EQ(q[8] * scales[2], tiny);
  EXPECT_EQ(q[9] * scales[2], -tiny);
}

TEST(FormatInt8Quantize, RefusesNonFiniteValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<int8_t> q(6);
  std::vector<float> scales(2);
  for (float bad : {nan, inf, -inf}) {
    const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, bad, 6.0f};
    try {
      quantize_rows_int8(values.data(), 2, 3, q.data(), scales.data());
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "cannot quantize a non-finite value to int8 (row 1, column 1)");
    }
  }
}

// widen_to_f32 over a [rows, cols] view of each dtype, against the formats' definitions in
// double precision (int8: q * scale of its row, exact in double, one rounding to f32).
TensorView matrix_view(DType dtype, const void* data, const float* row_scales, uint64_t rows,
                       uint64_t cols) {
  TensorView view;
  view.name = "test.matrix";
  view.dtype = dtype;
  view.rank = 2;
  view.shape = {rows, cols, 0, 0};
  view.data = data;
  view.row_scales = row_scales;
  return view;
}

TEST(FormatWidenToF32, EveryDTypeAgainstReference) {
  std::mt19937 rng(11);
  const uint64_t rows = 7, cols = 13, count = rows * cols;
  std::vector<float> out(count);

  std::vector<float> f32(count);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : f32) v = normal(rng);
  widen_to_f32(matrix_view(DType::f32, f32.data(), nullptr, rows, cols), out.data());
  for (uint64_t i = 0; i < count; ++i) EXPECT_EQ(out[i], f32[i]) << i;

  std::vector<uint16_t> bits(count);
  for (uint16_t& b : bits) b = static_cast<uint16_t>(rng());
  widen_to_f32(matrix_view(DType::f16, bits.data(), nullptr, rows, cols), out.data());
  for (uint64_t i = 0; i < count; ++i) expect_same_value(out[i], half_reference_value(bits[i]), 0.0f);
  widen_to_f32(matrix_view(DType::bf16, bits.data(), nullptr, rows, cols), out.data());
  for (uint64_t i = 0; i < count; ++i)
    expect_same_value(out[i], bfloat16_reference_value(bits[i]), 0.0f);

  std::vector<int8_t> quantized(count);
  for (int8_t& q : quantized) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> scales(rows);
  std::uniform_real_distribution<float> magnitude(-20.0f, 5.0f);
  for (float& s : scales) s = std::exp2(magnitude(rng));  // rows of different scales
  widen_to_f32(matrix_view(DType::int8, quantized.data(), scales.data(), rows, cols), out.data());
  for (uint64_t i = 0; i < count; ++i) {
    const double want = static_cast<double>(quantized[i]) * scales[i / cols];
    EXPECT_EQ(out[i], static_cast<float>(want)) << "row " << i / cols << " col " << i % cols;
  }
}

TEST(FormatWidenToF32, Int8WithoutScalesIsAnError) {
  const std::vector<int8_t> quantized(6, 1);
  std::vector<float> out(6);
  try {
    widen_to_f32(matrix_view(DType::int8, quantized.data(), nullptr, 2, 3), out.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "test.matrix: int8 tensor without row scales");
  }
}

}  // namespace
}  // namespace xf
