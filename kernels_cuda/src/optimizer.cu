// Adam over the f32 master weights (the CPU's operation order), and a deterministic sum of squares.
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels/optimizer.h"

namespace xf::cuda {
namespace {

// The CPU's f32 operation order, with explicit rounding so nvcc fuses no multiply-add.
__global__ void adam_kernel(float* parameters, const float* gradients, float* m, float* v,
                            int64_t count, AdamConstants c, __half* half_parameters) {
  const float one_minus_beta1 = 1.0f - c.beta1, one_minus_beta2 = 1.0f - c.beta2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(gradients[i], c.gradient_scale);
    const float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
    const float denominator =
        __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_correction2), c.epsilon);
    const float p = __fsub_rn(parameters[i], __fdiv_rn(__fmul_rn(c.step_size, mi), denominator));
    m[i] = mi;
    v[i] = vi;
    parameters[i] = p;
    if (half_parameters != nullptr) half_parameters[i] = __float2half_rn(p);
  }
}

// ---- sum of squares -----------------------------------------------------------------------------

__device__ __forceinline__ double warp_sum_double(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(detail::kFullWarpMask, value, offset);
  return value;
}

// Block k sums elements k*chunk .. (k+1)*chunk - 1 (in a fixed pattern) into partials[k].
__global__ void sum_of_squares_partials_kernel(const float* x, int64_t count, int64_t chunk,
                                               double* partials) {
  __shared__ double warp_sums[kThreads / 32];
  const int64_t begin = blockIdx.x * chunk;
  const int64_t end = min(count, begin + chunk);
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double value = x[i];
    sum += value * value;
  }
  sum = warp_sum_double(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    partials[blockIdx.x] = total;
  }
}

__global__ void sum_partials_kernel(const double* partials, int count, double* result) {
  double total = 0.0;
  for (int i = 0; i < count; ++i) total += partials[i];
  *result = total;
}

}  // namespace

void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants,
               __half* half_parameters, cudaStream_t stream) {
  require(count >= 0, "adam_step", "negative count");
  if (count == 0) return;
  adam_kernel<<<elementwise_blocks(count), kThreads, 0, stream>>>(
      parameters, gradients, first_moment, second_moment, count, constants, half_parameters);
  XF_CUDA_CHECK_LAUNCH("adam_kernel");
}

void sum_of_squares(const float* x, int64_t count, double* workspace, double* result,
                    cudaStream_t stream) {
  require(count >= 0, "sum_of_squares", "negative count");
  const int64_t chunk = ceil_div(count > 0 ? count : 1, kSumOfSquaresPartials);
  sum_of_squares_partials_kernel<<<kSumOfSquaresPartials, kThreads, 0, stream>>>(x, count, chunk,
                                                                                 workspace);
  XF_CUDA_CHECK_LAUNCH("sum_of_squares_partials_kernel");
  sum_partials_kernel<<<1, 1, 0, stream>>>(workspace, kSumOfSquaresPartials, result);
  XF_CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

}  // namespace xf::cuda
