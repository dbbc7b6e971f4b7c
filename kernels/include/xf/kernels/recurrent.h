#pragma once
// Marian's SSRU cell (rnn/cells.h, class SSRU: the decoder cell of the Bergamot students), one
// decoding step for the runtime and the recurrence over whole sequences for the trainer. With
// x the candidate and f the forget gate (both from a product u W^T + b made beforehand), per
// feature:
//   s = sigmoid(f);  c = s * c_previous + (1 - s) * x  (c_previous = 0 at the first step);
//   out = relu(c)
// (Marian's highway(c, x, f) then relu). ssru_forget_weight and ssru_next_cell below are that
// math, once, for every kernel of the family on host and device; the CPU's decoding step
// (ssru_step) computes the sigmoid's exp with the CPU kernels' vectorizable exp (simd_cpu.h,
// within 2e-7 of std::exp), as the CPU's softmax and swish do.
//
// ssru_step (runtime): for each of `rows` rows r, [x | f] = in[r] ([rows, 2 * dim]: candidate
//   then forget gate, bias included) and c the row's cell state at cell + state_row * dim
//   (state_row = state_rows[r], or r when state_rows is null; c taken as 0 when `first`). The
//   state is updated in place; out is [rows, dim]. f32 math (the state of the half kernel is
//   half, as its activations are).
//
// ssru_scan_forward / ssru_scan_backward (trainer): per batch row b and step t = 0..len-1, rows
//   b * len + t. x and f are views with a row stride (the two halves of one fused projection
//   [rows, 2 * dim] with stride 2 * dim, or separate [rows, dim] buffers with stride dim); cell
//   and out are [rows, dim].
//   ssru_scan_forward: writes cell (kept for the backward) and out (=).
//   ssru_scan_backward: given dout [rows, dim], writes dx and df (=, views with d_stride), the
//   gradients of x and f; the carry of dc from step t to t - 1 is dc_t * s_t.
//   Padding after a sequence's end needs no mask: a step reads only the steps before it, so the
//   positions after a sentence never reach it, and their gradients are zero when dout is.
//   The trainer's model test RuntimeScoresWhatTheTrainerScores/ssru checks that the runtime's
//   steps score what the scan trained.
#include <cmath>

#include "xf/kernels/host_device.h"
#include "xf/kernels/types.h"

namespace xf {

// s = sigmoid(f) as 1 / (1 + exp(-f)): exp overflowing to inf gives 0, never NaN.
template <typename T>
XF_HOST_DEVICE T ssru_forget_weight(T f) {
#if defined(__CUDA_ARCH__)
  return T(1) / (T(1) + exp(-f));
#else
  return T(1) / (T(1) + std::exp(-f));
#endif
}

// c = s * c_previous + (1 - s) * x.
template <typename T>
XF_HOST_DEVICE T ssru_next_cell(T s, T previous, T x) {
  return s * previous + (T(1) - s) * x;
}

}  // namespace xf

namespace xf::cpu {

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, int threads);

template <typename T>
void ssru_scan_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       T* cell, T* out, int threads);

template <typename T>
void ssru_scan_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell, int64_t batch,
                        int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, cudaStream_t stream);
void ssru_step(const half* in, half* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               half* out, cudaStream_t stream);

void ssru_scan_forward(const float* x, const float* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       float* cell, float* out, cudaStream_t stream);
void ssru_scan_backward(const float* dout, const float* x, const float* f, int64_t in_stride, const float* cell,
                        int64_t batch, int64_t len, int64_t dim, float* dx, float* df, int64_t d_stride,
                        cudaStream_t stream);

}  // namespace xf::cuda
