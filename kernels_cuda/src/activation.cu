// Bias and activation in place, row by row, and their backward.
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels/activation.h"
#include "xf/kernels/layer_norm.h"  // bias_backward

namespace xf::cuda {
namespace {

template <typename T>
__global__ void bias_relu_kernel(T* x, const T* bias, int64_t count, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    x[i] = from_float<T>(fmaxf(value, 0.0f));
  }
}

template <typename T>
void bias_relu_impl(T* x, const T* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  require(rows >= 0 && dim > 0, "bias_relu", "bad shape");
  if (rows == 0) return;
  bias_relu_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(x, bias, rows * dim,
                                                                            dim);
  XF_CUDA_CHECK_LAUNCH("bias_relu_kernel");
}

// Activation as an int: 1 swish x * sigmoid(x), 2 gelu x * Phi(x) (erf); relu has its own kernel.
template <typename T>
__global__ void bias_activation_kernel(T* x, const T* bias, int64_t count, int64_t dim, int activation) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    value = activation == static_cast<int>(Activation::swish)
                ? value / (1.0f + expf(-value))
                : 0.5f * value * (1.0f + erff(value * 0.70710678118654752f));
    x[i] = from_float<T>(value);
  }
}

template <typename T>
void bias_activation_impl(T* x, const T* bias, int64_t rows, int64_t dim, Activation activation,
                          cudaStream_t stream) {
  if (activation == Activation::relu) return bias_relu_impl(x, bias, rows, dim, stream);
  require(rows >= 0 && dim > 0, "bias_activation", "bad shape");
  if (rows == 0) return;
  bias_activation_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(
      x, bias, rows * dim, dim, static_cast<int>(activation));
  XF_CUDA_CHECK_LAUNCH("bias_activation_kernel");
}

__global__ void relu_backward_kernel(float* dy, const float* y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
}

}  // namespace

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  bias_relu_impl(x, bias, rows, dim, stream);
}
void bias_relu(half* x, const half* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  bias_relu_impl(x, bias, rows, dim, stream);
}

void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream) {
  bias_activation_impl(x, bias, rows, dim, activation, stream);
}
void bias_activation(half* x, const half* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream) {
  bias_activation_impl(x, bias, rows, dim, activation, stream);
}

void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim, float* dbias,
                        float* workspace, cudaStream_t stream) {
  const char* name = "bias_relu_backward";
  require(rows >= 0 && dim > 0, name, "rows must be >= 0 and dim > 0");
  if (rows == 0) return;
  relu_backward_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(dy, y,
                                                                               rows * dim);
  XF_CUDA_CHECK_LAUNCH("relu_backward_kernel");
  if (dbias != nullptr) bias_backward(dy, rows, dim, dbias, workspace, stream);
}

}  // namespace xf::cuda
