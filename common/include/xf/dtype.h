#pragma once
// The tensor dtypes xf stores and computes in (the model file's, the kernels' and the
// runtime's), their names and sizes, and the rounding of one value to f16 and bf16.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "xf/export.h"

namespace xf {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, int8 = 3 };
inline constexpr int kNumDTypes = 4;

XF_API const char* dtype_name(DType dtype);           // "f32", "f16", "bf16", "int8"
XF_API DType parse_dtype(const std::string& name);    // throws xf::Error on an unknown name
XF_API size_t dtype_size(DType dtype);                // bytes per element

// One value between f32 and f16 / bf16.
uint16_t float_to_half(float value);      // round to nearest even, saturating to +-inf
float half_to_float(uint16_t bits);

// Round to nearest even; NaN stays a (quiet) NaN. Inline: the trainer's bf16 products
// (Bf16Gemm, xf/kernels/matmul.h) round whole matrices with it in a vectorized loop.
inline uint16_t float_to_bfloat16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // nan
  const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>((f + rounding) >> 16);
}

inline float bfloat16_to_float(uint16_t bits) {
  const uint32_t f = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

}  // namespace xf
