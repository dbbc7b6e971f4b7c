// Bias and activation in place, row by row, and their backward.
#include "xf/kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/kernels/layer_norm.h"  // bias_backward

namespace xf::cpu {
namespace {

// x * sigmoid(x), as x / (1 + exp(-x)); exp_vectorizable saturates at exp(88) (x below -88
// gives -0, never NaN). std::exp stayed a scalar libm call per value: with it, swish was 12% of
// a base-size Marian model's batch-32 int8 translation (issue 40's breakdown).
XF_VECTORIZED_BODY void bias_swish_row_body(float* x, const float* bias, int64_t dim) {
#pragma omp simd
  for (int64_t c = 0; c < dim; ++c) {
    const float v = x[c] + (bias != nullptr ? bias[c] : 0.0f);
    x[c] = v / (1.0f + detail::exp_vectorizable(-v));
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

}  // namespace

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, int threads) {
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork,
                       [&](int64_t r) { bias_relu_row(x + r * dim, bias, dim); });
}

void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     int threads) {
  if (activation == Activation::relu) return bias_relu(x, bias, rows, dim, threads);
  const bool swish = activation == Activation::swish;
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork, [&](int64_t r) {
    swish ? bias_swish_row(x + r * dim, bias, dim) : bias_gelu_row(x + r * dim, bias, dim);
  });
}

template <typename T>
void bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    bias_relu(x, bias, rows, dim, threads);
  } else {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < dim; ++j)
        x[r * dim + j] = std::max(T(0), x[r * dim + j] + (bias ? bias[j] : T(0)));
  }
}

template <typename T>
void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias, int threads) {
  const int64_t n = rows * dim;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > T(0) ? dy[i] : T(0);
  if (dbias) bias_backward(dy, rows, dim, dbias, threads);
}

#define XF_INSTANTIATE(T) \
  template void bias_relu_forward<T>(T*, const T*, int64_t, int64_t, int); \
  template void bias_relu_backward<T>(T*, const T*, int64_t, int64_t, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
