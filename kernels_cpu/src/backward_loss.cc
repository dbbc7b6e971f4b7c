// Label-smoothed cross-entropy with its gradient (trainer only).
#include <algorithm>
#include <cmath>

#include "xf/kernels_cpu/backward.h"

namespace xf::cpu {

template <typename T>
void label_smoothed_cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  T smoothing, int32_t ignore_id, bool write_gradient,
                                  double* row_loss, double* row_nll, int threads) {
  const T uniform = smoothing / T(vocab);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* z = logits + r * vocab;
    const int32_t target = targets[r];
    if (target == ignore_id) {
      row_loss[r] = 0;
      row_nll[r] = 0;
      if (write_gradient) std::fill(z, z + vocab, T(0));
      continue;
    }
    T max_z = z[0], sum_z = 0;
#pragma omp simd reduction(max : max_z) reduction(+ : sum_z)
    for (int64_t j = 0; j < vocab; ++j) {
      max_z = std::max(max_z, z[j]);
      sum_z += z[j];
    }
    const T target_z = z[target];
    T sum_exp = 0;
    if (write_gradient) {  // keep exp(z - max) in place: one exp per logit
#pragma omp simd reduction(+ : sum_exp)
      for (int64_t j = 0; j < vocab; ++j) {
        z[j] = std::exp(z[j] - max_z);
        sum_exp += z[j];
      }
    } else {
#pragma omp simd reduction(+ : sum_exp)
      for (int64_t j = 0; j < vocab; ++j) sum_exp += std::exp(z[j] - max_z);
    }
    const T log_norm = max_z + std::log(sum_exp);  // log sum_j exp(z_j)
    // -log p_j = log_norm - z_j;  loss = (1 - eps) * nll + eps * mean_j(-log p_j)
    const T nll = log_norm - target_z;
    const T mean_neg_log_p = log_norm - sum_z / T(vocab);
    row_nll[r] = static_cast<double>(nll);
    row_loss[r] = static_cast<double>((T(1) - smoothing) * nll + smoothing * mean_neg_log_p);
    if (write_gradient) {
      const T inv_sum = T(1) / sum_exp;
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) z[j] = z[j] * inv_sum - uniform;
      z[target] -= T(1) - smoothing;
    }
  }
}

template void label_smoothed_cross_entropy<float>(float*, const int32_t*, int64_t, int64_t, float,
                                                  int32_t, bool, double*, double*, int);
template void label_smoothed_cross_entropy<double>(double*, const int32_t*, int64_t, int64_t,
                                                   double, int32_t, bool, double*, double*, int);

}  // namespace xf::cpu
