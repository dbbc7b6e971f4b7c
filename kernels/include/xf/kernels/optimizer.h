#pragma once
// The optimizer's kernels over the trainer's f32 master weights: one Adam update, and a sum of
// squares for gradient clipping and overflow checks.
//
// adam_step applies, with the constants of one update (AdamConstants, derived once by
// xf::trainer::adam_constants: bias corrections folded into step_size and inv_sqrt_correction2),
// in plain f32 operations without fused multiply-adds and in this order, on the CPU and CUDA alike:
//   g = gradient * gradient_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
//   p -= step_size * m / (sqrt(v) * inv_sqrt_correction2 + epsilon).       All arrays: [count]
// sum_of_squares: sum of x[i]^2 in double over fixed chunks summed in order, so the result does
//   not depend on the thread count or launch shape (inf or nan when any x[i] is not finite).
#include "xf/kernels/types.h"

namespace xf {

struct AdamConstants {
  float beta1 = 0.9f;
  float beta2 = 0.98f;
  float step_size = 0;             // lr / (1 - b1^t)
  float inv_sqrt_correction2 = 1;  // 1 / sqrt(1 - b2^t)
  float epsilon = 1e-9f;
  float gradient_scale = 1;
};

}  // namespace xf

namespace xf::cpu {

using xf::AdamConstants;
void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants, int threads);

double sum_of_squares(const float* x, int64_t count, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// half_parameters (may be null) receives the updated parameters rounded to f16.
using xf::AdamConstants;
void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants,
               half* half_parameters, cudaStream_t stream);

// *result = the sum. workspace: kSumOfSquaresPartials doubles. result: one double.
inline constexpr int kSumOfSquaresPartials = 512;
void sum_of_squares(const float* x, int64_t count, double* workspace, double* result,
                    cudaStream_t stream);

}  // namespace xf::cuda
