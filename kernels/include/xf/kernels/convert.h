#pragma once
// Dtype conversions of rows and activations: weight rows widened to f32, activations quantized
// to int8 per row and their products scaled back, f32 <-> f16 on the GPU. One value's rounding
// rules are xf/dtype.h's.
#include "xf/kernels/types.h"

namespace xf::cpu {

// Widens row `row` of `weights` to f32 (dequantizes int8).                   out: [cols]
void load_row(const WeightMatrix& weights, int64_t row, float* out);

// Symmetric int8 quantization of each row of x [rows, cols] with its own scale: the rule of
// xf::quantize_rows_int8 (the file format's), scales[r] = max|x[r, :]| / max_level (1 for a
// row of zeros), q = nearbyint(x / scale) in [-max_level, max_level]. Parallel and vectorized.
// The int8 matmul quantizes its input with it (one scale per token, as CTranslate2 does), so
// that a row's product never depends on the other rows: a sentence translates the same in any
// batch; its max_level is int8_x_max_level() (xf/kernels/matmul.h).
void quantize_int8_per_row(const float* x, int64_t rows, int64_t cols, int8_t* quantized, float* scales,
                           int threads, int max_level = 127);

// y[r, :] = y[r, :] * row_scales[r] (+ bias[:] when bias is not null).        y: [rows, cols]
// The int8 matmul's epilogue: the per-row input scales, which oneDNN 2.6 cannot apply itself.
void scale_rows_add_bias(float* y, int64_t rows, int64_t cols, const float* row_scales, const float* bias,
                         int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// Element-wise (round to nearest even, saturating to +-inf).                 in, out: [count]
void convert(const float* in, int64_t count, half* out, cudaStream_t stream);
void convert(const half* in, int64_t count, float* out, cudaStream_t stream);

}  // namespace xf::cuda
