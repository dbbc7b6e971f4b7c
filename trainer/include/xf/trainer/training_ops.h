#pragma once
// The device interface of the trainer: every operation the Transformer's forward and backward
// passes (transformer_graph.h) need, over device pointers. A device implements it once over its
// kernel library: CpuTrainingOps (cpu_training_ops.h, kernels_cpu; float, and double for the
// gradient tests) and the CUDA ops (trainer/cuda, kernels_cuda; f32 or f16 mixed precision).
//
// The device owns its memory (the parameter and gradient buffers, the activation and index
// arenas, its own workspaces) and its precision policy: mixed precision (f16 operand copies, the
// loss scale) lives entirely in an implementation; the graph only sees T buffers.
//
// Pointers handed to the ops are device pointers: parameters() / gradients() plus an offset, or
// inside reserve_values() / reserve_indices(). Every op may run asynchronously; the ones that
// return host data (cross_entropy's rows) wait.
#include <cstddef>
#include <cstdint>

#include "xf/kernels/types.h"

namespace xf::trainer {

// Attention shapes and strided head views: one definition for every device (xf/kernels/types.h).
using xf::AttentionShape;
using xf::HeadStrides;

// One dropout site's draw (xf/kernels/dropout.h): element i of the site is kept with
// probability 1 - p, decided by hashing (seed, site, first_index + i); kept elements are scaled
// by 1 / (1 - p). The same draw gives the same mask on every device, in forward and backward.
struct DropoutDraw {
  uint64_t seed = 0;
  uint64_t site = 0;
  uint64_t first_index = 0;  // the site's first element in the global batch (data parallel)
  float p = 0;               // in [0, 1); 0 draws nothing
};

template <typename T>
class TrainingOps {
 public:
  virtual ~TrainingOps() = default;

  // ---- Memory ----
  // The contiguous parameter and gradient buffers ([parameter_count] each, allocated by the
  // device at construction, in transformer_parameters(config) order).
  virtual T* parameters() = 0;
  virtual T* gradients() = 0;
  // Activations: an arena of at least `count` values (contents lost when it grows), and the
  // alignment in bytes each buffer the graph carves out of it must start on.
  virtual T* reserve_values(size_t count) = 0;
  virtual size_t value_alignment() const = 0;
  // Token ids, positions, targets and lengths: an arena of at least `count` int32, filled from
  // host memory by upload_indices.
  virtual int32_t* reserve_indices(size_t count) = 0;
  virtual void upload_indices(int32_t* device, const int32_t* host, size_t count) = 0;
  // Sizes the device's own workspaces for a forward and backward pass whose matrices have at
  // most `rows` rows and `width` columns and whose attentions are at most `largest`.
  virtual void reserve_workspace(int64_t rows, int64_t width, const AttentionShape& largest) = 0;
  // The longest key sequence the attention kernels take (0: no limit).
  virtual int64_t max_key_length() const = 0;

  // ---- Elementwise ----
  virtual void copy(T* to, const T* from, int64_t count) = 0;
  virtual void zero(T* x, int64_t count) = 0;
  // out = a + b (out may be a or b): residual sums and gradient sums.
  virtual void add(T* out, const T* a, const T* b, int64_t count) = 0;
  // x = kept ? x / (1 - p) : 0 with the draw's mask: dropout's forward and its backward alike.
  virtual void dropout(T* x, int64_t count, const DropoutDraw& draw) = 0;
  // x = max(0, x + bias) in place; backward: dy *= (y > 0), dbias += column sums of that.
  virtual void bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim) = 0;
  virtual void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias) = 0;

  // ---- SSRU (Marian's decoder cell, xf/kernels/recurrent.h) ----
  // Over [batch, len] rows: c_t = s_t c_{t-1} + (1 - s_t) x_t with s_t = sigmoid(f_t), out =
  // relu(c); x and f are views with in_stride (the halves of the fused input_forget product).
  // cell (kept for backward) and out are [rows, dim]. Backward writes dx and df (=, d_stride).
  virtual void ssru_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                            T* cell, T* out) = 0;
  virtual void ssru_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell,
                             int64_t batch, int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride) = 0;

  // ---- Embedding ----
  // out[i, :] = scale * table[ids[i], :] + sinusoid(positions[i]).           table: [vocab, dim]
  virtual void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                                 const int32_t* positions, int64_t count, T scale, T* out) = 0;
  // dtable[ids[i], :] += scale * dout[i, :] (a scatter-add).
  virtual void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim,
                                  int64_t vocab, T scale, T* dtable) = 0;

  // ---- Matrix products ----
  // y[rows, out] = x[rows, in] W^T (+ bias).                             weight: [out, in]
  virtual void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows,
                              int64_t in, int64_t out, T* y) = 0;
  // dweight += dy^T x; dbias += column sums of dy (dbias may be null);
  // dx = dy W, or dx += dy W when accumulate_dx (dx may be null).
  virtual void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                               int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias) = 0;

  // ---- LayerNorm ----
  // out = (x - mean) * rstd * gamma + beta per row; mean, rstd: [rows], kept for backward.
  virtual void layer_norm_forward(const T* x, const T* gamma, const T* beta, float epsilon,
                                  int64_t rows, int64_t dim, T* out, T* mean, T* rstd) = 0;
  // dx += d(loss)/dx; dgamma, dbeta += their gradients.
  virtual void layer_norm_backward(const T* dout, const T* x, const T* mean, const T* rstd,
                                   const T* gamma, int64_t rows, int64_t dim, T* dx, T* dgamma,
                                   T* dbeta) = 0;

  // ---- Attention ----
  // out = dropout(softmax(q k^T / sqrt(head_dim) + masks)) v per head, keeping the probabilities
  // [batch, heads, query_len, key_len] (before dropout) for the backward pass. key_lengths
  // [batch] may be null; causal_offset >= 0 lets query i see keys <= i + offset. dropout may be
  // null (no attention dropout).
  virtual void attention_forward(const T* q, HeadStrides q_strides, const T* k,
                                 HeadStrides k_strides, const T* v, HeadStrides v_strides, T* out,
                                 HeadStrides out_strides, const AttentionShape& shape,
                                 const int32_t* key_lengths, int64_t causal_offset,
                                 T* probabilities, const DropoutDraw* dropout) = 0;
  // dq, dk, dv = the gradients of q, k, v (overwritten) given dout.
  virtual void attention_backward(const T* dout, HeadStrides dout_strides, const T* q,
                                  HeadStrides q_strides, const T* k, HeadStrides k_strides,
                                  const T* v, HeadStrides v_strides, const T* probabilities,
                                  const DropoutDraw* dropout, T* dq, HeadStrides dq_strides,
                                  T* dk, HeadStrides dk_strides, T* dv, HeadStrides dv_strides,
                                  const AttentionShape& shape) = 0;

  // ---- Loss ----
  // Label-smoothed cross-entropy of each row of logits against targets (-1: not scored); with
  // write_gradient the logits become d(loss sum)/d(logits), times the device's loss scale.
  // row_loss and row_nll are HOST arrays [rows]; the call waits for them.
  virtual void cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                             float smoothing, bool write_gradient, double* row_loss,
                             double* row_nll) = 0;
};

}  // namespace xf::trainer
