#pragma once
// The SSRU recurrence over whole sequences, for training (Marian's SSRU, rnn/cells.h: the
// decoder cell of the Bergamot students). Per batch row b, feature j and step t = 0..len-1:
//   s_t = sigmoid(f_t),  c_t = s_t * c_{t-1} + (1 - s_t) * x_t  (c_{-1} = 0),  out_t = relu(c_t)
// where x = input W^T and f = input W_f^T + b_f are computed beforehand (linear layers). The
// runtime's one step of the same cell is ssru_step (recurrent.h); the trainer's model test
// RuntimeScoresWhatTheTrainerScores/ssru checks that the two agree.
// Rows are b * len + t. x and f are views with a row stride (the two halves of one fused
// projection [rows, 2 * dim] with stride 2 * dim, or separate [rows, dim] buffers with stride
// dim); cell and out are [rows, dim].
//
// ssru_scan_forward: writes cell (kept for the backward) and out (=).
// ssru_scan_backward: given dout [rows, dim], writes dx and df (=, views with d_stride), the
//   gradients of x and f; the carry of dc from step t to t - 1 is dc_t * s_t.
// Padding after a sequence's end needs no mask: a step reads only the steps before it, so the
// positions after a sentence never reach it, and their gradients are zero when dout is.
#include "xf/kernels/types.h"

namespace xf::cpu {

template <typename T>
void ssru_scan_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       T* cell, T* out, int threads);

template <typename T>
void ssru_scan_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell, int64_t batch,
                        int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

void ssru_scan_forward(const float* x, const float* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       float* cell, float* out, cudaStream_t stream);
void ssru_scan_backward(const float* dout, const float* x, const float* f, int64_t in_stride, const float* cell,
                        int64_t batch, int64_t len, int64_t dim, float* dx, float* df, int64_t d_stride,
                        cudaStream_t stream);

}  // namespace xf::cuda
