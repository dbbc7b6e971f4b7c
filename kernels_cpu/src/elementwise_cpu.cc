// Row-wise kernels: weight rows, quantization, embedding, bias/residual/LayerNorm, ReLU, gather.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels_cpu/kernels.h"

namespace xf::cpu {
namespace {

// Elementwise work below this many floats runs on the calling thread: waking the other
// threads costs a few microseconds, more than the loop itself.
constexpr int64_t kMinSharedWork = 16384;

XF_VECTORIZED_BODY void dequantize_int8_row_body(const int8_t* values, float scale, int64_t cols,
                                       float* out) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(values[c]) * scale;
}
XF_DISPATCH_BY_ISA(dequantize_int8_row)

XF_VECTORIZED_BODY float absmax_of_body(const float* x, int64_t count) {
  float absmax = 0.0f;
#pragma omp simd reduction(max : absmax)
  for (int64_t i = 0; i < count; ++i) {
    const float magnitude = std::fabs(x[i]);
    absmax = magnitude > absmax ? magnitude : absmax;
  }
  return absmax;
}
XF_DISPATCH_BY_ISA(absmax_of)

XF_VECTORIZED_BODY void quantize_with_scale_body(const float* x, int64_t count, float scale,
                                       int8_t* quantized) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    // |x / scale| <= 127 up to rounding, well inside round_to_nearest's range.
    float q = detail::round_to_nearest(x[i] / scale);
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
    quantized[i] = static_cast<int8_t>(q);
  }
}
XF_DISPATCH_BY_ISA(quantize_with_scale)

// PE(position, :) for `dim` columns. Angles in double: position * frequency reaches hundreds of
// radians, where a float angle would be off by ~1e-5; Marian's own layout is computed in float,
// as Marian computes it, so that imported models see the values they were trained with.
void write_sinusoid_row(PositionEncoding encoding, int64_t position, int64_t dim, float* out) {
  const double log_base = std::log(10000.0);
  if (encoding == PositionEncoding::interleaved) {
    for (int64_t even = 0; even < dim; even += 2) {
      const double frequency = std::exp(-log_base * static_cast<double>(even) / dim);
      const double angle = static_cast<double>(position) * frequency;
      out[even] = static_cast<float>(std::sin(angle));
      if (even + 1 < dim) out[even + 1] = static_cast<float>(std::cos(angle));
    }
    return;
  }
  const int64_t half = dim / 2;
  if (encoding == PositionEncoding::sin_then_cos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position) / std::pow(10000.0, 2.0 * i / dim);
      out[i] = static_cast<float>(std::sin(angle));
      out[half + i] = static_cast<float>(std::cos(angle));
    }
    return;
  }
  const float increment = std::log(10000.0f) / (static_cast<float>(half) - 1.0f);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * std::exp(static_cast<float>(i) * -increment);
    out[i] = std::sin(angle);
    out[half + i] = std::cos(angle);
  }
}

XF_VECTORIZED_BODY void scale_add_body(const float* row, float scale, int64_t dim, float* out) {
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) out[c] = scale * row[c] + out[c];
}
XF_DISPATCH_BY_ISA(scale_add)

// One row of add_bias_residual_layer_norm. out may alias x or residual: every loop reads
// element c of its inputs before writing element c of out.
XF_VECTORIZED_BODY void layer_norm_row_body(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon, int64_t dim,
                                  float* out, float* mean_out, float* rstd_out) {
  float sum = 0.0f;
  if (bias != nullptr && residual != nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < dim; ++c) {
      const float v = x[c] + bias[c] + residual[c];
      out[c] = v;
      sum += v;
    }
  } else if (bias != nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < dim; ++c) {
      const float v = x[c] + bias[c];
      out[c] = v;
      sum += v;
    }
  } else if (residual != nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < dim; ++c) {
      const float v = x[c] + residual[c];
      out[c] = v;
      sum += v;
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < dim; ++c) {
      out[c] = x[c];
      sum += x[c];
    }
  }
  const float mean = sum / static_cast<float>(dim);
  // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels.
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < dim; ++c) {
    const float d = out[c] - mean;
    squares += d * d;
  }
  // Biased variance, epsilon inside the square root: PyTorch's LayerNorm.
  const float rstd = 1.0f / std::sqrt(squares / static_cast<float>(dim) + epsilon);
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) out[c] = (out[c] - mean) * rstd * gamma[c] + beta[c];
  if (mean_out != nullptr) *mean_out = mean;
  if (rstd_out != nullptr) *rstd_out = rstd;
}
XF_DISPATCH_BY_ISA(layer_norm_row)

XF_VECTORIZED_BODY void add_bias_residual_row_body(float* x, const float* bias, const float* residual,
                                         int64_t dim) {
  if (bias != nullptr && residual != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) x[c] += bias[c] + residual[c];
  } else if (bias != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) x[c] += bias[c];
  } else if (residual != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) x[c] += residual[c];
  }
}
XF_DISPATCH_BY_ISA(add_bias_residual_row)

// x * sigmoid(x), as x / (1 + exp(-x)): exp overflowing to inf gives -0 or 0, never NaN.
XF_VECTORIZED_BODY void bias_swish_row_body(float* x, const float* bias, int64_t dim) {
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) {
    const float v = x[c] + (bias != nullptr ? bias[c] : 0.0f);
    x[c] = v / (1.0f + std::exp(-v));
  }
}
XF_DISPATCH_BY_ISA(bias_swish_row)

// x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact GELU (PyTorch's default).
XF_VECTORIZED_BODY void bias_gelu_row_body(float* x, const float* bias, int64_t dim) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) {
    const float v = x[c] + (bias != nullptr ? bias[c] : 0.0f);
    x[c] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
  }
}
XF_DISPATCH_BY_ISA(bias_gelu_row)

XF_VECTORIZED_BODY void bias_relu_row_body(float* x, const float* bias, int64_t dim) {
  if (bias != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) {
      const float v = x[c] + bias[c];
      x[c] = v > 0.0f ? v : 0.0f;
    }
  } else {
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) x[c] = x[c] > 0.0f ? x[c] : 0.0f;
  }
}
XF_DISPATCH_BY_ISA(bias_relu_row)

// out_row += scale * table[id, :], widening f16/bf16/int8 rows piece by piece on the stack.
void add_scaled_row(const WeightMatrix& table, int64_t id, float scale, float* out_row) {
  const int64_t dim = table.cols;
  if (table.dtype == DType::f32) {
    scale_add(static_cast<const float*>(table.data) + id * dim, scale, dim, out_row);
    return;
  }
  constexpr int64_t kPiece = 256;
  float widened[kPiece];
  const size_t element = dtype_size(table.dtype);
  for (int64_t begin = 0; begin < dim; begin += kPiece) {
    // A one-row view of columns [begin, begin + width) of row id.
    WeightMatrix piece = table;
    piece.cols = std::min(kPiece, dim - begin);
    piece.data = static_cast<const char*>(table.data) + (id * dim + begin) * element;
    piece.row_scales = table.row_scales != nullptr ? table.row_scales + id : nullptr;
    load_row(piece, 0, widened);
    scale_add(widened, scale, piece.cols, out_row + begin);
  }
}

}  // namespace

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
                           int threads) {
  // Below 16k values, waking threads costs more than it saves.
  detail::parallel_for(rows, threads, rows * cols >= 16384, [&](int64_t r) {
    const float absmax = absmax_of(x + r * cols, cols);
    scales[r] = absmax > 0.0f ? absmax / 127.0f : 1.0f;
    quantize_with_scale(x + r * cols, cols, scales[r], quantized + r * cols);
  });
}

namespace {

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

void scale_rows_add_bias(float* y, int64_t rows, int64_t cols, const float* row_scales, const float* bias,
                         int threads) {
  detail::parallel_for(rows, threads, rows * cols >= 16384,
                       [&](int64_t r) { scale_row_add(y + r * cols, cols, row_scales[r], bias); });
}

void write_sinusoid(PositionEncoding encoding, int64_t position, int64_t dim, float* out) {
  write_sinusoid_row(encoding, position, dim, out);
}

void embed(const WeightMatrix& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads, PositionEncoding encoding) {
  // Checked here, before the parallel loop: an exception cannot leave an OpenMP region.
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= table.rows) {
      throw Error("embed: token id " + std::to_string(ids[i]) + " outside the vocabulary of " +
                  std::to_string(table.rows));
    }
    if (positions[i] < 0) throw Error("embed: negative position " + std::to_string(positions[i]));
  }
  const int64_t dim = table.cols;
  // Each thread takes a contiguous range of rows. The sinusoid of the last position is kept on
  // the stack (dims up to kCachedDim): a decode step's rows all share one position, so it costs
  // one row of sin/cos instead of one per row.
  constexpr int64_t kCachedDim = 2048;
  auto embed_rows = [&](int64_t begin, int64_t end) {
    float sinusoid[kCachedDim];
    int64_t cached_position = -1;
    for (int64_t i = begin; i < end; ++i) {
      float* out_row = out + i * dim;
      if (dim <= kCachedDim) {
        if (positions[i] != cached_position) {
          write_sinusoid_row(encoding, positions[i], dim, sinusoid);
          cached_position = positions[i];
        }
        std::memcpy(out_row, sinusoid, dim * sizeof(float));
      } else {
        write_sinusoid_row(encoding, positions[i], dim, out_row);
      }
      add_scaled_row(table, ids[i], scale, out_row);
    }
  };
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), count);
  detail::parallel_for(parts, threads, count * dim > kMinSharedWork, [&](int64_t part) {
    embed_rows(count * part / parts, count * (part + 1) / parts);
  });
}

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean, float* rstd,
                                  int threads) {
  detail::parallel_for(rows, threads, rows * dim > kMinSharedWork, [&](int64_t r) {
    layer_norm_row(x + r * dim, bias, residual != nullptr ? residual + r * dim : nullptr, gamma,
                   beta, epsilon, dim, out + r * dim, mean != nullptr ? mean + r : nullptr,
                   rstd != nullptr ? rstd + r : nullptr);
  });
}

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, int threads) {
  if (bias == nullptr && residual == nullptr) return;
  detail::parallel_for(rows, threads, rows * dim > kMinSharedWork, [&](int64_t r) {
    add_bias_residual_row(x + r * dim, bias, residual != nullptr ? residual + r * dim : nullptr,
                          dim);
  });
}

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, int threads) {
  detail::parallel_for(rows, threads, rows * dim > kMinSharedWork,
                       [&](int64_t r) { bias_relu_row(x + r * dim, bias, dim); });
}

void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     int threads) {
  if (activation == Activation::relu) return bias_relu(x, bias, rows, dim, threads);
  const bool swish = activation == Activation::swish;
  detail::parallel_for(rows, threads, rows * dim > kMinSharedWork, [&](int64_t r) {
    swish ? bias_swish_row(x + r * dim, bias, dim) : bias_gelu_row(x + r * dim, bias, dim);
  });
}

void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, int threads) {
  detail::parallel_for(count, threads, count * row_len > kMinSharedWork, [&](int64_t i) {
    std::memcpy(dst + i * dst_stride, src + indices[i] * src_stride, row_len * sizeof(float));
  });
}

}  // namespace xf::cpu
