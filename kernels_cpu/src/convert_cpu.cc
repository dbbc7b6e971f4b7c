// Dtype conversions of rows: weight rows widened to f32, activations quantized to int8 per row,
// and an int8 product's rows scaled back.
#include "xf/kernels/convert.h"

#include <cmath>
#include <cstring>
#include <string>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"

namespace xf::cpu {
namespace {

XF_VECTORIZED_BODY void dequantize_int8_row_body(const int8_t* values, float scale, int64_t cols,
                                       float* out) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(values[c]) * scale;
}
XF_DISPATCH_BY_ISA(dequantize_int8_row)


XF_VECTORIZED_BODY void quantize_with_scale_body(const float* x, int64_t count, float scale,
                                       float max_level, int8_t* quantized) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    // |x / scale| <= max_level up to rounding, well inside round_to_nearest's range.
    float q = detail::round_to_nearest(x[i] / scale);
    q = q > max_level ? max_level : (q < -max_level ? -max_level : q);
    quantized[i] = static_cast<int8_t>(q);
  }
}
XF_DISPATCH_BY_ISA(quantize_with_scale)

XF_VECTORIZED_BODY void scale_row_add_body(float* y, int64_t cols, float scale, const float* bias) {
  if (bias == nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] *= scale;
  } else {
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = y[c] * scale + bias[c];
  }
}
XF_DISPATCH_BY_ISA(scale_row_add)

}  // namespace

namespace detail {
XF_VECTORIZED_BODY float absmax_of_dispatched_body(const float* x, int64_t count) {
  float absmax = 0.0f;
#pragma omp simd reduction(max : absmax)
  for (int64_t i = 0; i < count; ++i) {
    const float magnitude = std::fabs(x[i]);
    absmax = magnitude > absmax ? magnitude : absmax;
  }
  return absmax;
}
XF_DISPATCH_BY_ISA(absmax_of_dispatched)
float absmax_of(const float* x, int64_t count) { return absmax_of_dispatched(x, count); }
}  // namespace detail

void load_row(const WeightMatrix& weights, int64_t row, float* out) {
  const int64_t cols = weights.cols;
  switch (weights.dtype) {
    case DType::f32:
      std::memcpy(out, static_cast<const float*>(weights.data) + row * cols, cols * sizeof(float));
      return;
    case DType::f16: {
      const uint16_t* values = static_cast<const uint16_t*>(weights.data) + row * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = half_to_float(values[c]);
      return;
    }
    case DType::bf16: {
      const uint16_t* values = static_cast<const uint16_t*>(weights.data) + row * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = bfloat16_to_float(values[c]);
      return;
    }
    case DType::int8:
      dequantize_int8_row(static_cast<const int8_t*>(weights.data) + row * cols,
                          weights.row_scales[row], cols, out);
      return;
  }
  throw Error("load_row: unknown dtype " + std::to_string(static_cast<int>(weights.dtype)));
}

void quantize_int8_per_row(const float* x, int64_t rows, int64_t cols, int8_t* quantized, float* scales,
                           int threads, int max_level) {
  if (max_level < 1 || max_level > 127) {
    throw Error("quantize_int8_per_row: max_level " + std::to_string(max_level) + " is outside 1..127");
  }
  const auto level = static_cast<float>(max_level);
  // Below 16k values, waking threads costs more than it saves.
  detail::parallel_for(rows, threads, rows * cols >= 16384, [&](int64_t r) {
    const float absmax = detail::absmax_of(x + r * cols, cols);
    scales[r] = absmax > 0.0f ? absmax / level : 1.0f;
    quantize_with_scale(x + r * cols, cols, scales[r], level, quantized + r * cols);
  });
}

void scale_rows_add_bias(float* y, int64_t rows, int64_t cols, const float* row_scales, const float* bias,
                         int threads) {
  detail::parallel_for(rows, threads, rows * cols >= 16384,
                       [&](int64_t r) { scale_row_add(y + r * cols, cols, row_scales[r], bias); });
}

}  // namespace xf::cpu
