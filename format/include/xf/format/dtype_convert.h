#pragma once
// Conversions between f32 and the stored dtypes. Bytes-level helpers used by the writer's
// callers (converter, tests) and by kernels that widen stored weights.
#include <cstddef>
#include <cstdint>

namespace xf {

uint16_t float_to_half(float value);      // round to nearest even, saturating to +-inf
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);  // round to nearest even
float bfloat16_to_float(uint16_t bits);

// Symmetric per-row quantization: scale[r] = max|row r| / 127, q = round(x / scale).
// A row of zeros gets scale 1; a row whose max|x| / 127 underflows gets the smallest positive
// float. values is [rows, cols]. Throws xf::Error on a NaN or infinite value.
void quantize_rows_int8(const float* values, size_t rows, size_t cols, int8_t* quantized,
                        float* scales);

}  // namespace xf
