#include "xf/trainer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "xf/error.h"

namespace xf::trainer {

double LearningRateSchedule::at(int64_t step) const {
  if (step < 1) throw Error("learning-rate schedule: step must be >= 1, got " + std::to_string(step));
  if (warmup_steps < 1)
    throw Error("learning-rate schedule: warmup steps must be >= 1, got " +
                std::to_string(warmup_steps));
  if (d_model < 1) throw Error("learning-rate schedule: d_model must be >= 1");
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup_steps);
  return scale / std::sqrt(static_cast<double>(d_model)) *
         std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
}

Adam::Adam(size_t parameter_count, const AdamOptions& options, int threads)
    : options_(options), threads_(std::max(1, threads)) {
  state_.first_moment.assign(parameter_count, 0.0f);
  state_.second_moment.assign(parameter_count, 0.0f);
}

void Adam::set_state(AdamState state) {
  if (state.first_moment.size() != state_.first_moment.size() ||
      state.second_moment.size() != state_.second_moment.size())
    throw Error("Adam state: moments hold " + std::to_string(state.first_moment.size()) + " and " +
                std::to_string(state.second_moment.size()) + " values, the model has " +
                std::to_string(state_.first_moment.size()) + " parameters");
  if (state.step < 0) throw Error("Adam state: negative step count");
  state_ = std::move(state);
}

void Adam::step(float* parameters, const float* gradients, double learning_rate,
                double gradient_scale) {
  state_.step += 1;
  const double t = static_cast<double>(state_.step);
  const float beta1 = static_cast<float>(options_.beta1);
  const float beta2 = static_cast<float>(options_.beta2);
  // Bias corrections folded into the step size and epsilon once, in double.
  const double correction1 = 1.0 - std::pow(options_.beta1, t);
  const double correction2 = 1.0 - std::pow(options_.beta2, t);
  const float step_size = static_cast<float>(learning_rate / correction1);
  const float inv_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(correction2));
  const float epsilon = static_cast<float>(options_.epsilon);
  const float scale = static_cast<float>(gradient_scale);
  float* m = state_.first_moment.data();
  float* v = state_.second_moment.data();
  const int64_t n = static_cast<int64_t>(state_.first_moment.size());
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gradients[i] * scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    parameters[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_correction2 + epsilon);
  }
}

double gradient_norm(const float* gradients, size_t count, double gradient_scale, int threads) {
  // Fixed chunks summed in order, so the norm does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = static_cast<int64_t>(count);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) sum += double(gradients[i]) * gradients[i];
    partial[static_cast<size_t>(c)] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return std::sqrt(total) * std::abs(gradient_scale);
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0;
  return max_norm / norm;
}

}  // namespace xf::trainer
