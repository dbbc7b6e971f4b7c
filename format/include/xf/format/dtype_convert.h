#pragma once
// Conversions between f32 and the stored dtypes. Bytes-level helpers used by the writer's
// callers (converter, tests) and by kernels that widen stored weights.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace xf {

uint16_t float_to_half(float value);      // round to nearest even, saturating to +-inf
float half_to_float(uint16_t bits);

// Round to nearest even; NaN stays a (quiet) NaN. Inline: the trainer's bf16 products
// (kernels_cpu Bf16Gemm) round whole matrices with it in a vectorized loop.
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

// Symmetric per-row quantization: scale[r] = max|row r| / 127, q = round(x / scale).
// A row of zeros gets scale 1; a row whose max|x| / 127 underflows gets the smallest positive
// float. values is [rows, cols]. Throws xf::Error on a NaN or infinite value.
void quantize_rows_int8(const float* values, size_t rows, size_t cols, int8_t* quantized,
                        float* scales);

struct TensorView;  // xf/format/model_file.h

// A stored tensor's values as f32, whatever its dtype: f16 and bf16 widened, int8 times its
// row's scale (row_scales[r] for row r of [rows, cols]), f32 copied. out: [tensor.elements()].
// The one place the runtimes and tools widen whole tensors.
void widen_to_f32(const TensorView& tensor, float* out);

}  // namespace xf
