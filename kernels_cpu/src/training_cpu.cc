// The trainer's forward kernels, for float (the shared forward kernels) and double (plain loops of
// the same math, for the finite-difference tests).
#include "xf/kernels_cpu/training.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "xf/error.h"
#include "xf/kernels_common/dropout_hash.h"
#include "xf/kernels_cpu/backward.h"
#include "xf/kernels_cpu/matmul.h"

namespace xf::cpu {

template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc, int threads,
          Bf16Gemm* bf16) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // oneDNN runs on the OpenMP pool the caller sized (Bf16Gemm: at its own thread count).
    if (bf16) bf16->run(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else xf::cpu::gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    if (bf16) throw Error("gemm: bf16 products are for float");
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const T av = transpose_a ? a[p * lda + i] : a[i * lda + p];
          const T bv = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
          sum += av * bv;
        }
        c[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
      }
    }
  }
}

template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                    int64_t out, T* y, int threads, Bf16Gemm* bf16) {
  // The bias is written first and the product added onto it (beta = 1): one pass over y.
  T beta = 0;
  if (bias) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
    beta = 1;
  }
  gemm<T>(false, true, rows, out, in, T(1), x, in, weight, in, beta, y, out, threads, bf16);
}

template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                     int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias, int threads,
                     Bf16Gemm* bf16) {
  if (dx)  // dx[rows, in] = dy[rows, out] W[out, in]
    gemm<T>(false, false, rows, in, out, T(1), dy, out, weight, in, accumulate_dx ? T(1) : T(0),
            dx, in, threads, bf16);
  // dW[out, in] += dy^T[out, rows] x[rows, in]
  gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dweight, in, threads, bf16);
  if (dbias) bias_backward(dy, rows, out, dbias, threads);
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
void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                       const int32_t* positions, int64_t count, T scale, T* out, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    WeightMatrix matrix;
    matrix.dtype = DType::f32;
    matrix.data = table;
    matrix.rows = vocab;
    matrix.cols = dim;
    embed(matrix, ids, positions, count, scale, out, threads);
  } else {
    (void)vocab;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      const T* row = table + static_cast<int64_t>(ids[i]) * dim;
      const T p = T(positions[i]);
      for (int64_t j = 0; j < dim; j += 2) {
        // PE(p, 2i) = sin(p / 10000^(2i/dim)), PE(p, 2i+1) = cos(p / 10000^(2i/dim))
        const T angle = p / std::pow(T(10000), T(j) / T(dim));
        out[i * dim + j] = scale * row[j] + std::sin(angle);
        if (j + 1 < dim) out[i * dim + j + 1] = scale * row[j + 1] + std::cos(angle);
      }
    }
  }
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
void attention_forward(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                       const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                       const AttentionShape& shape, const int32_t* key_lengths,
                       int64_t causal_offset, T* probabilities, const uint8_t* dropout_mask,
                       T dropout_scale, T* scratch, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    if (!dropout_mask) {
      attention(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape,
                     key_lengths, causal_offset, probabilities, scratch, threads);
      return;
    }
  }
  (void)scratch;
  const int64_t heads = shape.heads, tq = shape.query_len, tk = shape.key_len,
                dh = shape.head_dim;
  const T inv_sqrt = T(1) / std::sqrt(T(dh));
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t bh = 0; bh < shape.batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    const int64_t keys = key_lengths ? std::min<int64_t>(tk, key_lengths[b]) : tk;
    for (int64_t i = 0; i < tq; ++i) {
      T* p = probabilities + (bh * tq + i) * tk;
      const int64_t visible =
          causal_offset < 0 ? keys : std::max<int64_t>(0, std::min(keys, i + causal_offset + 1));
      const T* qi = q + b * q_strides.batch + h * q_strides.head + i * q_strides.position;
      T max_score = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const T* kj = k + b * k_strides.batch + h * k_strides.head + j * k_strides.position;
        T s = 0;
        for (int64_t c = 0; c < dh; ++c) s += qi[c] * kj[c];
        p[j] = s * inv_sqrt;
        max_score = std::max(max_score, p[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        p[j] = std::exp(p[j] - max_score);
        sum += p[j];
      }
      for (int64_t j = 0; j < visible; ++j) p[j] /= sum;
      std::fill(p + visible, p + tk, T(0));
      T* oi = out + b * out_strides.batch + h * out_strides.head + i * out_strides.position;
      std::fill(oi, oi + dh, T(0));
      const uint8_t* mask = dropout_mask ? dropout_mask + (bh * tq + i) * tk : nullptr;
      for (int64_t j = 0; j < visible; ++j) {
        const T weight = mask ? (mask[j] ? p[j] * dropout_scale : T(0)) : p[j];
        const T* vj = v + b * v_strides.batch + h * v_strides.head + j * v_strides.position;
        for (int64_t c = 0; c < dh; ++c) oi[c] += weight * vj[c];
      }
    }
  }
}

void make_dropout_mask(uint64_t seed, uint64_t site, size_t count, float p, uint8_t* mask,
                       int threads, uint64_t first_index) {
  const uint32_t threshold = dropout_hash::threshold(p);
  const uint64_t stream = dropout_hash::site_stream(seed, site) + first_index;
  const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) mask[i] = dropout_hash::keeps(stream, threshold, i) ? 1 : 0;
}

template <typename T>
void apply_dropout(T* x, const uint8_t* mask, size_t count, T scale, int threads) {
  const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = mask[i] ? x[i] * scale : T(0);
}

void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& c, int threads) {
  float* m = first_moment;
  float* v = second_moment;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gradients[i] * c.gradient_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    parameters[i] -= c.step_size * m[i] / (std::sqrt(v[i]) * c.inv_sqrt_correction2 + c.epsilon);
  }
}

double sum_of_squares(const float* x, int64_t count, int threads) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0;
    const int64_t end = std::min(count, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) sum += double(x[i]) * x[i];
    partial[static_cast<size_t>(c)] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

#define XF_INSTANTIATE(T)                                                                       \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, \
                        int64_t, T, T*, int64_t, int, Bf16Gemm*);                               \
  template void linear_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*,  \
                                  int, Bf16Gemm*);                                              \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                   bool, T*, T*, int, Bf16Gemm*);                               \
  template void layer_norm_forward<T>(const T*, const T*, const T*, T, int64_t, int64_t, T*,    \
                                      T*, T*, int);                                             \
  template void embedding_forward<T>(const T*, int64_t, int64_t, const int32_t*,                \
                                     const int32_t*, int64_t, T, T*, int);                      \
  template void bias_relu_forward<T>(T*, const T*, int64_t, int64_t, int);                      \
  template void attention_forward<T>(const T*, HeadStrides, const T*, HeadStrides, const T*,    \
                                     HeadStrides, T*, HeadStrides, const AttentionShape&,       \
                                     const int32_t*, int64_t, T*, const uint8_t*, T, T*, int);  \
  template void apply_dropout<T>(T*, const uint8_t*, size_t, T, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)
#undef XF_INSTANTIATE

}  // namespace xf::cpu
