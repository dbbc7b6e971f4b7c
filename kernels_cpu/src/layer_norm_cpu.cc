// Bias, residual and LayerNorm row by row, and their backward.
#include "xf/kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "parallel_cpu.h"
#include "simd_cpu.h"

namespace xf::cpu {
namespace {

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

}  // namespace

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean, float* rstd,
                                  int threads) {
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork, [&](int64_t r) {
    layer_norm_row(x + r * dim, bias, residual != nullptr ? residual + r * dim : nullptr, gamma,
                   beta, epsilon, dim, out + r * dim, mean != nullptr ? mean + r : nullptr,
                   rstd != nullptr ? rstd + r : nullptr);
  });
}

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, int threads) {
  if (bias == nullptr && residual == nullptr) return;
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork, [&](int64_t r) {
    add_bias_residual_row(x + r * dim, bias, residual != nullptr ? residual + r * dim : nullptr,
                          dim);
  });
}

template <typename T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T epsilon, int64_t rows,
                        int64_t dim, T* out, T* mean, T* rstd, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    add_bias_residual_layer_norm(x, nullptr, nullptr, gamma, beta, epsilon, rows, dim, out,
                                      mean, rstd, threads);
  } else {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim;
      T mu = 0;
      for (int64_t j = 0; j < dim; ++j) mu += xr[j];
      mu /= T(dim);
      T var = 0;
      for (int64_t j = 0; j < dim; ++j) var += (xr[j] - mu) * (xr[j] - mu);
      var /= T(dim);
      const T rs = T(1) / std::sqrt(var + epsilon);
      for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

template <typename T>
void layer_norm_backward(const T* dout, const T* x, const T* mean, const T* rstd, const T* gamma,
                         int64_t rows, int64_t dim, T* dx, T* dgamma, T* dbeta, int threads) {
  // dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),  g = dout * gamma.
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = dout + r * dim;
    const T* xr = x + r * dim;
    const T mu = mean[r], rs = rstd[r];
    T sum_g = 0, sum_g_xhat = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const T g = dy[j] * gamma[j];
      sum_g += g;
      sum_g_xhat += g * (xr[j] - mu) * rs;
    }
    const T mean_g = sum_g / T(dim), mean_g_xhat = sum_g_xhat / T(dim);
    T* dxr = dx + r * dim;
    for (int64_t j = 0; j < dim; ++j) {
      const T x_hat = (xr[j] - mu) * rs;
      dxr[j] += rs * (dy[j] * gamma[j] - mean_g - x_hat * mean_g_xhat);
    }
  }
  detail::for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* dy = dout + r * dim;
      const T* xr = x + r * dim;
      const T mu = mean[r], rs = rstd[r];
      for (int64_t j = begin; j < end; ++j) {
        dgamma[j] += dy[j] * (xr[j] - mu) * rs;
        dbeta[j] += dy[j];
      }
    }
  });
}

template <typename T>
void bias_backward(const T* dy, int64_t rows, int64_t dim, T* dbias, int threads) {
  detail::for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * dim;
      for (int64_t j = begin; j < end; ++j) dbias[j] += row[j];
    }
  });
}

#define XF_INSTANTIATE(T) \
  template void bias_backward<T>(const T*, int64_t, int64_t, T*, int); \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T, int64_t, int64_t, T*, T*, \
                                      T*, int); \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, \
                                       int64_t, T*, T*, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
