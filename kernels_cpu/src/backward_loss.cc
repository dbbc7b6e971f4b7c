// Label-smoothed cross-entropy with its gradient (trainer only).
#include <algorithm>
#include <cmath>

#include "simd_cpu.h"
#include "xf/kernels_cpu/backward.h"

namespace xf::cpu {
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
