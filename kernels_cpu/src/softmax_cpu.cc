// log_softmax over rows, alone or followed by the row's k best entries (beam search).
#include <algorithm>
#include <cmath>
#include <limits>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/kernels/softmax.h"

namespace xf::cpu {
namespace {

// Inline helpers, vectorized inside the XF_VECTORIZED row functions below.
inline float max_of(const float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

inline float sum_exp_shifted(const float* x, int64_t n, float max) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += detail::exp_non_positive(x[i] - max);
  return sum;
}

// log(sum_j exp(x_j - max)): log_softmax(x) = (x - max) - this. Shifting by the maximum keeps
// exp() in range, and subtracting in that order keeps entries near the maximum exact.
inline float log_sum_exp_shifted(const float* x, int64_t n, float max) {
  return std::log(sum_exp_shifted(x, n, max));
}

inline void subtract_two(float* x, int64_t n, float first, float second) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] - first) - second;
}

// Keeps values[0..count) sorted descending (ties: earlier column first) while scanning columns
// in increasing order; returns the new count. values/indices: [k].
inline int64_t offer(float value, int32_t column, int64_t k, int64_t count, float* values,
                     int32_t* indices) {
  if (count == k && !(value > values[k - 1])) return count;  // also drops NaN
  int64_t slot = std::min(count, k - 1);
  // Strictly greater moves up: an equal value found later stays behind the earlier column.
  while (slot > 0 && value > values[slot - 1]) {
    values[slot] = values[slot - 1];
    indices[slot] = indices[slot - 1];
    --slot;
  }
  values[slot] = value;
  indices[slot] = column;
  return std::min(count + 1, k);
}

// The k largest logits of a row, descending, ties to the lower column.
inline void top_k_of_row(const float* x, int64_t n, int64_t k, float* values, int32_t* indices) {
  int64_t count = 0;
  // Blocks whose maximum cannot enter the list are skipped with one vectorized pass: once the
  // list is full, almost every block of a vocabulary-sized row is.
  constexpr int64_t kBlock = 64;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    if (count == k && !(max_of(x + begin, end - begin) > values[k - 1])) continue;
    for (int64_t c = begin; c < end; ++c) {
      count = offer(x[c], static_cast<int32_t>(c), k, count, values, indices);
    }
  }
}

XF_VECTORIZED_BODY void log_softmax_top_k_row_body(const float* row, float offset, int64_t vocab, int64_t k,
                                         float* values, int32_t* indices) {
  top_k_of_row(row, vocab, k, values, indices);
  const float max = values[0];  // the row's maximum
  const float log_sum = log_sum_exp_shifted(row, vocab, max);
  for (int64_t i = 0; i < k; ++i) values[i] = ((values[i] - max) - log_sum) + offset;
}
XF_DISPATCH_BY_ISA(log_softmax_top_k_row)

XF_VECTORIZED_BODY void log_softmax_row_body(float* row, int64_t vocab) {
  const float max = max_of(row, vocab);
  subtract_two(row, vocab, max, log_sum_exp_shifted(row, vocab, max));
}
XF_DISPATCH_BY_ISA(log_softmax_row)

}  // namespace

void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows, int64_t vocab,
                       int64_t k, float* top_values, int32_t* top_indices, int threads) {
  if (k <= 0) return;
  detail::parallel_for(rows, threads, true, [&](int64_t r) {
    log_softmax_top_k_row(logits + r * vocab, row_offsets != nullptr ? row_offsets[r] : 0.0f, vocab,
                          k, top_values + r * k, top_indices + r * k);
  });
}

void log_softmax_top_k_columns(const float* logits, int64_t vocab, const int32_t* row_lists,
                               const int32_t* columns, const int32_t* list_sizes, int64_t list_stride,
                               const float* row_offsets, int64_t rows, int64_t k, float* top_values,
                               int32_t* top_indices, float* scratch, int threads) {
  if (k <= 0) return;
  detail::parallel_for_on_threads(rows, threads, true, [&](int64_t r, int thread) {
    const int32_t* list = columns + row_lists[r] * list_stride;
    const int64_t size = list_sizes[row_lists[r]];
    const float* row = logits + r * vocab;
    float* gathered = scratch + thread * list_stride;
    for (int64_t j = 0; j < size; ++j) gathered[j] = row[list[j]];
    int32_t* indices = top_indices + r * k;
    log_softmax_top_k_row(gathered, row_offsets != nullptr ? row_offsets[r] : 0.0f, size, k, top_values + r * k,
                          indices);
    for (int64_t i = 0; i < k; ++i) indices[i] = list[indices[i]];
  });
}

void log_softmax(float* logits, int64_t rows, int64_t vocab, int threads) {
  detail::parallel_for(rows, threads, true,
                       [&](int64_t r) { log_softmax_row(logits + r * vocab, vocab); });
}

// ---- Label-smoothed cross-entropy with its gradient (trainer only) ----
namespace {

inline float exp_of(float x) { return detail::exp_vectorizable(x); }  // vectorizes; ~2e-7
inline double exp_of(double x) { return std::exp(x); }

// One row r with a scored target: writes its loss and NLL and, when asked, the gradient.
template <typename T>
__attribute__((always_inline)) inline void cross_entropy_row(T* z, int64_t vocab, int32_t target,
                                                             T smoothing, bool write_gradient,
                                                             double* loss, double* nll_out) {
  T max_z = z[0], sum_z = 0;
#pragma omp simd reduction(max : max_z) reduction(+ : sum_z)
  for (int64_t j = 0; j < vocab; ++j) {
    max_z = z[j] > max_z ? z[j] : max_z;
    sum_z += z[j];
  }
  const T target_z = z[target];
  T sum_exp = 0;
  if (write_gradient) {  // keep exp(z - max) in place: one exp per logit
#pragma omp simd reduction(+ : sum_exp)
    for (int64_t j = 0; j < vocab; ++j) {
      z[j] = exp_of(z[j] - max_z);
      sum_exp += z[j];
    }
  } else {
#pragma omp simd reduction(+ : sum_exp)
    for (int64_t j = 0; j < vocab; ++j) sum_exp += exp_of(z[j] - max_z);
  }
  const T log_norm = max_z + std::log(sum_exp);  // log sum_j exp(z_j)
  // -log p_j = log_norm - z_j;  loss = (1 - eps) * nll + eps * mean_j(-log p_j)
  const T nll = log_norm - target_z;
  const T mean_neg_log_p = log_norm - sum_z / T(vocab);
  *nll_out = static_cast<double>(nll);
  *loss = static_cast<double>((T(1) - smoothing) * nll + smoothing * mean_neg_log_p);
  if (write_gradient) {
    const T inv_sum = T(1) / sum_exp, uniform = smoothing / T(vocab);
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) z[j] = z[j] * inv_sum - uniform;
    z[target] -= T(1) - smoothing;
  }
}

// float: compiled for several instruction sets (simd_cpu.h); double (the tests): plain.
XF_VECTORIZED_BODY void run_row_body(float* z, int64_t vocab, int32_t target, float smoothing,
                           bool write_gradient, double* loss, double* nll) {
  cross_entropy_row(z, vocab, target, smoothing, write_gradient, loss, nll);
}
XF_DISPATCH_BY_ISA(run_row)
void run_row(double* z, int64_t vocab, int32_t target, double smoothing, bool write_gradient,
             double* loss, double* nll) {
  cross_entropy_row(z, vocab, target, smoothing, write_gradient, loss, nll);
}

}  // namespace

template <typename T>
void label_smoothed_cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  T smoothing, int32_t ignore_id, bool write_gradient,
                                  double* row_loss, double* row_nll, int threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* z = logits + r * vocab;
    if (targets[r] == ignore_id) {
      row_loss[r] = 0;
      row_nll[r] = 0;
      if (write_gradient) std::fill(z, z + vocab, T(0));
      continue;
    }
    run_row(z, vocab, targets[r], smoothing, write_gradient, &row_loss[r], &row_nll[r]);
  }
}

template void label_smoothed_cross_entropy<float>(float*, const int32_t*, int64_t, int64_t, float,
                                                  int32_t, bool, double*, double*, int);
template void label_smoothed_cross_entropy<double>(double*, const int32_t*, int64_t, int64_t,
                                                   double, int32_t, bool, double*, double*, int);

}  // namespace xf::cpu
