#pragma once
// Adam over the model's contiguous parameter buffer, the paper's learning-rate schedule, and
// global-norm gradient clipping.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xf/kernels/optimizer.h"

namespace xf::trainer {

// lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1.
struct LearningRateSchedule {
  double scale = 1.0;
  int64_t d_model = 512;
  int64_t warmup_steps = 4000;

  double at(int64_t step) const;  // throws xf::Error for step < 1 or warmup_steps < 1
};

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.98;
  double epsilon = 1e-9;
};

// Everything a checkpoint must save to resume exactly: the step count and both moments, laid
// out like the parameter buffer.
struct AdamState {
  int64_t step = 0;                  // updates applied so far
  std::vector<float> first_moment;   // m  [parameter_count]
  std::vector<float> second_moment;  // v  [parameter_count]
};

class Adam {
 public:
  Adam(size_t parameter_count, const AdamOptions& options, int threads);

  // One update with the bias-corrected Adam rule:
  //   g = gradients * gradient_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
  //   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),  t = step after increment.
  // gradient_scale turns summed gradients into means (1 / tokens) and carries clipping.
  void step(float* parameters, const float* gradients, double learning_rate,
            double gradient_scale);

  const AdamOptions& options() const { return options_; }
  AdamState& state() { return state_; }
  const AdamState& state() const { return state_; }
  // Replaces the state (from a checkpoint); throws xf::Error when the sizes disagree.
  void set_state(AdamState state);

 private:
  AdamOptions options_;
  AdamState state_;
  int threads_;
};

// The constants of Adam update number `step` (counted from 1) for every device's kernel
// (cpu::adam_step, cuda::adam_step): the bias corrections folded in, in double, then rounded.
AdamConstants adam_constants(const AdamOptions& options, int64_t step, double learning_rate,
                             double gradient_scale);

// L2 norm of gradients * gradient_scale over the whole buffer (accumulated in double).
double gradient_norm(const float* gradients, size_t count, double gradient_scale, int threads);

// The factor to multiply gradient_scale by so that the global norm is at most max_norm:
// min(1, max_norm / norm); max_norm <= 0 disables clipping (returns 1).
double clip_factor(double norm, double max_norm);

}  // namespace xf::trainer
