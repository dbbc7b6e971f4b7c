// Backward kernels that work row by row or column by column: LayerNorm, bias, ReLU, embedding.
#include <algorithm>
#include <cstring>

#include "xf/kernels_cpu/backward.h"

namespace xf::cpu {
namespace {

// Splits [0, dim) into one contiguous column range per thread: column reductions run over all
// rows inside one thread, so sums never depend on how rows are split.
template <typename Body>
void for_each_column_block(int64_t dim, int threads, Body body) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, (dim + 15) / 16));
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = dim * block / blocks, end = dim * (block + 1) / blocks;
    body(begin, end);
  }
}

}  // namespace

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
  for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
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
  for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * dim;
      for (int64_t j = begin; j < end; ++j) dbias[j] += row[j];
    }
  });
}

template <typename T>
void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias, int threads) {
  const int64_t n = rows * dim;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > T(0) ? dy[i] : T(0);
  if (dbias) bias_backward(dy, rows, dim, dbias, threads);
}

template <typename T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim, T scale,
                        T* dtable, int threads) {
  // Rows of the table repeat (the same token twice), so threads own columns, not rows.
  for_each_column_block(dim, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < count; ++i) {
      const T* src = dout + i * dim;
      T* dst = dtable + static_cast<int64_t>(ids[i]) * dim;
      for (int64_t j = begin; j < end; ++j) dst[j] += scale * src[j];
    }
  });
}

#define XF_INSTANTIATE(T)                                                                      \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*,       \
                                       int64_t, int64_t, T*, T*, T*, int);                     \
  template void bias_backward<T>(const T*, int64_t, int64_t, T*, int);                         \
  template void bias_relu_backward<T>(T*, const T*, int64_t, int64_t, T*, int);                \
  template void embedding_backward<T>(const T*, const int32_t*, int64_t, int64_t, T, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)
#undef XF_INSTANTIATE

}  // namespace xf::cpu
