#pragma once
// Backward kernels for the trainer: plain functions over raw pointers, no allocation inside.
// Each is a template instantiated for float (what xf-train runs) and double (what the
// finite-difference gradient tests run), so the tests check the very code the trainer uses.
//
// Conventions: "+=" outputs accumulate (parameter gradients summed over a batch, and over
// micro-batches); "=" outputs are overwritten. Column reductions (bias, gamma, beta, embedding
// rows) are split by column across threads, so results do not depend on the thread count.
#include <cstddef>
#include <cstdint>

#include "xf/kernels_common/adam_constants.h"
#include "xf/kernels_cpu/kernels.h"

namespace xf::cpu {

// Backward of out = LayerNorm(x) * gamma + beta, row by row.
// x: the LayerNorm input [rows, dim]; mean, rstd: [rows] from the forward pass.
// dx += d out/dx . dout;  dgamma += sum_r dout * x_hat;  dbeta += sum_r dout.
template <typename T>
void layer_norm_backward(const T* dout, const T* x, const T* mean, const T* rstd, const T* gamma,
                         int64_t rows, int64_t dim, T* dx, T* dgamma, T* dbeta, int threads);

// dbias += sum over rows of dy.                                   dy: [rows, dim]
template <typename T>
void bias_backward(const T* dy, int64_t rows, int64_t dim, T* dbias, int threads);

// Backward of y = max(0, x + bias) given y: dy = dy * (y > 0) in place, then dbias += column
// sums of it (dbias may be null).                                 dy, y: [rows, dim]
template <typename T>
void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias, int threads);

// Backward of out[i, :] = scale * table[ids[i], :] + position term:
// dtable[ids[i], :] += scale * dout[i, :].                dout: [count, dim]; dtable: [vocab, dim]
template <typename T>
void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim, T scale,
                        T* dtable, int threads);

// Backward of scaled dot-product attention O = dropout(P) V, P = softmax(Q K^T / sqrt(d) + mask),
// per batch and head, with the strided views of attention() (kernels.h).
// probabilities: P from the forward pass [batch, heads, query_len, key_len] (masked entries 0).
// dropout_mask (may be null): [batch, heads, query_len, key_len], 1 = kept, each kept entry
// scaled by dropout_scale = 1 / (1 - p).
// dq, dk, dv are overwritten (masked keys get zero). scratch: [threads, 2 * key_len].
template <typename T>
void attention_backward(const T* dout, HeadStrides dout_strides, const T* q, HeadStrides q_strides,
                        const T* k, HeadStrides k_strides, const T* v, HeadStrides v_strides,
                        const T* probabilities, const uint8_t* dropout_mask, T dropout_scale,
                        T* dq, HeadStrides dq_strides, T* dk, HeadStrides dk_strides, T* dv,
                        HeadStrides dv_strides, const AttentionShape& shape, T* scratch,
                        int threads);

// Label-smoothed cross-entropy over rows of logits, with PyTorch's rule: the target
// distribution is q = (1 - smoothing) * onehot(target) + smoothing / vocab, and
// loss = -sum_j q_j log softmax(logits)_j. Rows whose target equals ignore_id score nothing.
// row_loss, row_nll ([rows]) receive each row's loss and -log p(target) (0 when ignored); the
// caller sums them in order, so the total does not depend on the thread count.
// When write_gradient, logits are overwritten with d loss / d logits = softmax - q (0 when ignored).
template <typename T>
void label_smoothed_cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  T smoothing, int32_t ignore_id, bool write_gradient,
                                  double* row_loss, double* row_nll, int threads);

// ---- Optimizer (f32: the trainer's master weights) ----

// One Adam update (xf/kernels_common/adam_constants.h: the rule, in the order of
// xf::cuda::adam_step).                                                            All: [count]
using xf::AdamConstants;
void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants, int threads);

// sum of x[i]^2 in double: fixed chunks summed in order, so the result does not depend on the
// thread count.
double sum_of_squares(const float* x, int64_t count, int threads);

}  // namespace xf::cpu
