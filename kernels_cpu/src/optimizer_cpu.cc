// Adam's update and the sum of squares for clipping, over the trainer's f32 master weights.
#include "xf/kernels/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace xf::cpu {

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

}  // namespace xf::cpu
