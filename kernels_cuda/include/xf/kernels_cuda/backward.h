#pragma once
// Backward kernels for the trainer on CUDA: the GPU mirror of xf/kernels_cpu/backward.h (same
// conventions, so tests hold the two to each other), plus what a training step needs around them:
// dropout from a counter-based hash, Adam, a sum of squares for clipping and overflow checks, and
// a general row-major GEMM with f32 or f16 inputs.
//
// Plain functions over DEVICE pointers, sizes and a stream; nothing allocates, nothing
// synchronizes. Activations and gradients are f32; "+=" outputs accumulate (parameter gradients
// summed over a batch), "=" outputs are overwritten. Column reductions (bias, gamma, beta) sum
// fixed row chunks in a fixed order, so results do not depend on the launch shape; only the
// embedding scatter-add uses atomics (its order of additions may vary between runs).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "xf/kernels_common/adam_constants.h"
#include "xf/kernels_cuda/kernels.h"

namespace xf::cuda {

// ---- Dropout ------------------------------------------------------------------------------------

// Which elements a dropout site keeps: element i is kept when the top 24 bits of
// mix64(stream + i) are >= threshold, with stream = mix64(seed ^ mix64(site)) and
// threshold = round(p * 2^24): exactly xf::trainer::make_dropout_mask's rule, so the CPU and CUDA
// trainers draw the same masks. No mask is stored: forward and backward recompute it.
struct DropoutRule {
  uint64_t stream = 0;
  uint32_t threshold = 0;  // 0: keep everything
  float scale = 1.0f;      // 1 / (1 - p) for kept elements
};
DropoutRule make_dropout_rule(uint64_t seed, uint64_t site, float p);  // host; p in [0, 1)

// x[i] = kept(i) ? x[i] * scale : 0, the forward and the backward of dropout alike. x: [count]
void dropout(float* x, int64_t count, const DropoutRule& rule, cudaStream_t stream);

// ---- Matrix products ----------------------------------------------------------------------------

// C[m, n] = alpha * op(A) op(B) + beta * C, row-major, C f32, f32 accumulation (no TF32), on the
// handle's stream and workspace. op(A) is [m, k] (A stored [k, m] when transpose_a), op(B) is
// [k, n] (B stored [n, k] when transpose_b); lda, ldb, ldc are row strides in elements.
void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc);
// f16 inputs (the mixed-precision trainer's low-precision copies), f32 output and accumulation.
void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const __half* a, int64_t lda, const __half* b, int64_t ldb,
          float beta, float* c, int64_t ldc);

// ---- Layer backward kernels ---------------------------------------------------------------------

// Floats of workspace the column reductions below need for `rows` x `dim` (bias, ReLU and
// LayerNorm backward): [chunks, 2 * dim] partial sums.
size_t column_reduction_workspace_floats(int64_t rows, int64_t dim);

// Backward of out = LayerNorm(x) * gamma + beta, row by row, as xf::cpu::layer_norm_backward.
// x: the LayerNorm input [rows, dim]; mean, rstd: [rows] from the forward pass.
// dx += d out/dx . dout;  dgamma += sum_r dout * x_hat;  dbeta += sum_r dout.
// workspace: column_reduction_workspace_floats(rows, dim) floats.
void layer_norm_backward(const float* dout, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t dim, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t stream);

// dbias += sum over rows of dy.                                   dy: [rows, dim]
void bias_backward(const float* dy, int64_t rows, int64_t dim, float* dbias, float* workspace,
                   cudaStream_t stream);

// Backward of y = max(0, x + bias) given y: dy = dy * (y > 0) in place, then dbias += column
// sums of it (dbias may be null; workspace is then unused).         dy, y: [rows, dim]
void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim, float* dbias,
                        float* workspace, cudaStream_t stream);

// Backward of out[i, :] = scale * table[ids[i], :] + position term, by scatter-add:
// dtable[ids[i], :] += scale * dout[i, :].  dout: [count, dim]; dtable: [vocab, dim]; ids: [count]
// (validated on the host; an id outside [0, vocab) adds nothing).
void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                        int64_t vocab, float scale, float* dtable, cudaStream_t stream);

// Backward of O = dropout(P) V, P = softmax(Q K^T / sqrt(d) + mask), per batch and head, with the
// strided views of attention() (kernels.h), as xf::cpu::attention_backward.
// probabilities: P from the forward pass [batch, heads, query_len, key_len] (masked entries 0,
// which is all the backward needs of the masks). dropout (may be null): the rule the forward pass
// applied to P, element index (((b * heads + h) * query_len + i) * key_len + j).
// dq, dk, dv are overwritten (masked keys get zero). workspace: attention_backward_workspace_floats.
size_t attention_backward_workspace_floats(const AttentionShape& shape);
void attention_backward(const float* dout, HeadStrides dout_strides, const float* q,
                        HeadStrides q_strides, const float* k, HeadStrides k_strides,
                        const float* v, HeadStrides v_strides, const float* probabilities,
                        const DropoutRule* dropout, float* dq, HeadStrides dq_strides, float* dk,
                        HeadStrides dk_strides, float* dv, HeadStrides dv_strides,
                        const AttentionShape& shape, float* workspace, cudaStream_t stream);

// out = dropout(P) V for the attention's output when attention dropout is on (attention() itself
// computes P V): P [batch, heads, query_len, key_len], element indices as attention_backward.
void attention_dropout_values(const float* probabilities, const DropoutRule& dropout,
                              const float* v, HeadStrides v_strides, float* out,
                              HeadStrides out_strides, const AttentionShape& shape,
                              cudaStream_t stream);

// Fused log-softmax and label-smoothed cross-entropy with PyTorch's rule, as
// xf::cpu::label_smoothed_cross_entropy: q = (1 - smoothing) * onehot(target) + smoothing / vocab,
// loss = -sum_j q_j log softmax(logits)_j. Rows whose target equals ignore_id score nothing.
// row_loss, row_nll ([rows], double) receive each row's loss and -log p(target) (0 when ignored).
// When write_gradient, logits are overwritten with gradient_scale * (softmax - q) (0 when
// ignored); gradient_scale carries the mixed-precision loss scale. targets: [rows].
void label_smoothed_cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, int32_t ignore_id,
                                  bool write_gradient, float gradient_scale, double* row_loss,
                                  double* row_nll, cudaStream_t stream);

// ---- Optimizer ----------------------------------------------------------------------------------

// One Adam update (xf/kernels_common/adam_constants.h: the rule, in the order of
// xf::cpu::adam_step). half_parameters (may be null) receives the updated parameters rounded to
// f16.                                                                             All: [count]
using xf::AdamConstants;
void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants,
               __half* half_parameters, cudaStream_t stream);

// *result = sum of x[i]^2 in double (inf or nan when any x[i] is not finite), summed over fixed
// chunks in a fixed order. workspace: kSumOfSquaresPartials doubles. result: one double.
inline constexpr int kSumOfSquaresPartials = 512;
void sum_of_squares(const float* x, int64_t count, double* workspace, double* result,
                    cudaStream_t stream);

}  // namespace xf::cuda
