#pragma once
// The constants of one Adam update, one definition for the CPU and CUDA kernels
// (xf::cpu::adam_step, xf::cuda::adam_step), derived once by xf::trainer::adam_constants (bias
// corrections folded into step_size and inv_sqrt_correction2). Both kernels apply, in plain f32
// operations without fused multiply-adds and in this order:
//   g = gradient * gradient_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
//   p -= step_size * m / (sqrt(v) * inv_sqrt_correction2 + epsilon).
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
