#pragma once
// Bias and activation, in place, row by row; and their backward.
//
// bias_relu: x = max(0, x + bias).                                 x: [rows, dim]; bias: [dim]
// bias_activation: x = activation(x + bias) (xf/model_math.h): relu as bias_relu; swish
//   x * sigmoid(x), computed as x / (1 + exp(-x)) (never NaN); gelu x * Phi(x) with erf. f32 math.
//   bias may be null in both.
// bias_relu_forward (CPU trainer): bias_relu for float (the same kernel) and double.
// bias_relu_backward: the backward of y = max(0, x + bias) given y: dy = dy * (y > 0) in place,
//   then dbias += column sums of it (bias_backward, layer_norm.h; dbias may be null, and CUDA's
//   workspace is then unused).                                               dy, y: [rows, dim]
#include "xf/kernels/types.h"
#include "xf/model_math.h"

namespace xf::cpu {

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, int threads);
void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     int threads);

template <typename T>
void bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim, int threads);

template <typename T>
void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream);
void bias_relu(half* x, const half* bias, int64_t rows, int64_t dim, cudaStream_t stream);
void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream);
void bias_activation(half* x, const half* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream);

void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim, float* dbias,
                        float* workspace, cudaStream_t stream);

}  // namespace xf::cuda
