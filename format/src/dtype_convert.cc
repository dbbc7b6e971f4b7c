#include "xf/format/dtype_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "xf/error.h"
#include "xf/format/model_file.h"

namespace xf {

uint16_t float_to_half(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of smallest
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 + (112 - exponent) + 1 ... maps to 2^-24 units
    uint32_t half_mantissa = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return static_cast<uint16_t>(sign | half_mantissa);
  }
  // Normal: rebias exponent (127 -> 15), round mantissa 23 -> 10 bits to nearest even.
  uint32_t bits = abs - 0x38000000u;
  const uint32_t remainder = bits & 0x1fffu;
  bits >>= 13;
  if (remainder > 0x1000u || (remainder == 0x1000u && (bits & 1u))) ++bits;
  return static_cast<uint16_t>(sign | bits);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t f;
  if (exponent == 0) {
    if (mantissa == 0) {
      f = sign;
    } else {  // subnormal: value = mantissa * 2^-24
      float value = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&f, &value, 4);
      f |= sign;
    }
  } else if (exponent == 31) {
    f = sign | 0x7f800000u | (mantissa << 13);
  } else {
    f = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

void quantize_rows_int8(const float* values, size_t rows, size_t cols, int8_t* quantized,
                        float* scales) {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = values + r * cols;
    float absmax = 0.0f;
    for (size_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        throw Error("cannot quantize a non-finite value to int8 (row " + std::to_string(r) +
                    ", column " + std::to_string(c) + ")");
      }
      absmax = std::max(absmax, std::fabs(row[c]));
    }
    // For a row of tiny subnormals absmax / 127 underflows to zero; the smallest positive
    // float is then the scale (the values become small integers, exactly representable).
    const float scale = absmax > 0.0f
                            ? std::max(absmax / 127.0f, std::numeric_limits<float>::denorm_min())
                            : 1.0f;
    scales[r] = scale;
    for (size_t c = 0; c < cols; ++c) {
      const float q = std::nearbyint(row[c] / scale);
      quantized[r * cols + c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void widen_to_f32(const TensorView& tensor, float* out) {
  const uint64_t count = tensor.elements(), rows = tensor.rows(), cols = tensor.cols();
  switch (tensor.dtype) {
    case DType::f32:
      std::memcpy(out, tensor.data, sizeof(float) * count);
      break;
    case DType::f16: {
      const auto* values = static_cast<const uint16_t*>(tensor.data);
      for (uint64_t i = 0; i < count; ++i) out[i] = half_to_float(values[i]);
      break;
    }
    case DType::bf16: {
      const auto* values = static_cast<const uint16_t*>(tensor.data);
      for (uint64_t i = 0; i < count; ++i) out[i] = bfloat16_to_float(values[i]);
      break;
    }
    case DType::int8: {
      if (tensor.row_scales == nullptr)
        throw Error(std::string(tensor.name) + ": int8 tensor without row scales");
      const auto* values = static_cast<const int8_t*>(tensor.data);
      for (uint64_t r = 0; r < rows; ++r) {
        const float scale = tensor.row_scales[r];
        for (uint64_t c = 0; c < cols; ++c) out[r * cols + c] = values[r * cols + c] * scale;
      }
      break;
    }
  }
}

}  // namespace xf
