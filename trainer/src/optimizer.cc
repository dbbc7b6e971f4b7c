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

AdamConstants adam_constants(const AdamOptions& options, int64_t step,
                             double learning_rate, double gradient_scale) {
  const double t = static_cast<double>(step);
  AdamConstants c;
  c.beta1 = static_cast<float>(options.beta1);
  c.beta2 = static_cast<float>(options.beta2);
  // Bias corrections folded into the step size and epsilon once, in double.
  c.step_size = static_cast<float>(learning_rate / (1.0 - std::pow(options.beta1, t)));
  c.inv_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(options.beta2, t)));
  c.epsilon = static_cast<float>(options.epsilon);
  c.gradient_scale = static_cast<float>(gradient_scale);
  return c;
}

void Adam::step(float* parameters, const float* gradients, double learning_rate,
                double gradient_scale) {
  state_.step += 1;
  cpu::adam_step(parameters, gradients, state_.first_moment.data(), state_.second_moment.data(),
                 static_cast<int64_t>(state_.first_moment.size()),
                 adam_constants(options_, state_.step, learning_rate, gradient_scale), threads_);
}

double gradient_norm(const float* gradients, size_t count, double gradient_scale, int threads) {
  return std::sqrt(cpu::sum_of_squares(gradients, static_cast<int64_t>(count), threads)) *
         std::abs(gradient_scale);
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0;
  return max_norm / norm;
}

}  // namespace xf::trainer
