#pragma once
// Bias, residual and LayerNorm, row by row; and their backward.
//
// add_bias_residual_layer_norm: out = LayerNorm(x + bias + residual) * gamma + beta, with f32
//   statistics.     x, residual, out: [rows, dim]; bias, gamma, beta: [dim]; mean, rstd: [rows]
//   bias and residual may be null; out may alias x or residual. mean and rstd (f32) may be null;
//   the trainer keeps them for the backward pass.
// add_bias_residual: x[r, :] += bias (+ residual[r, :]); bias or residual may be null.
//                                                           x, residual: [rows, dim]; bias: [dim]
// layer_norm_forward (CPU trainer): out = LayerNorm(x) * gamma + beta, keeping mean and rstd
//   (float: add_bias_residual_layer_norm; double: plain loops).
// layer_norm_backward: the backward of out = LayerNorm(x) * gamma + beta, row by row.
//   x: the LayerNorm input [rows, dim]; mean, rstd: [rows] from the forward pass.
//   dx += d out/dx . dout;  dgamma += sum_r dout * x_hat;  dbeta += sum_r dout.
// bias_backward: dbias += sum over rows of dy (any bias add's gradient).       dy: [rows, dim]
//   The CUDA workspace of both: column_reduction_workspace_floats(rows, dim) floats, the partial
//   sums of fixed row chunks, [chunks, 2 * dim].
#include "xf/kernels/types.h"

namespace xf::cpu {

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean, float* rstd,
                                  int threads);

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, int threads);

template <typename T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T epsilon, int64_t rows,
                        int64_t dim, T* out, T* mean, T* rstd, int threads);

template <typename T>
void layer_norm_backward(const T* dout, const T* x, const T* mean, const T* rstd, const T* gamma,
                         int64_t rows, int64_t dim, T* dx, T* dgamma, T* dbeta, int threads);

template <typename T>
void bias_backward(const T* dy, int64_t rows, int64_t dim, T* dbias, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean,
                                  float* rstd, cudaStream_t stream);
void add_bias_residual_layer_norm(const half* x, const half* bias, const half* residual,
                                  const half* gamma, const half* beta, float epsilon,
                                  int64_t rows, int64_t dim, half* out, float* mean, float* rstd,
                                  cudaStream_t stream);

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream);
void add_bias_residual(half* x, const half* bias, const half* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream);

void layer_norm_backward(const float* dout, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t dim, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t stream);
void bias_backward(const float* dy, int64_t rows, int64_t dim, float* dbias, float* workspace,
                   cudaStream_t stream);
size_t column_reduction_workspace_floats(int64_t rows, int64_t dim);

}  // namespace xf::cuda
