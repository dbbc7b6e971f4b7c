#pragma once
// The trainer's forward kernels, templated on the scalar type like the backward kernels
// (backward.h). For float they call the shared forward kernels (kernels.h, oneDNN gemm), the
// code the runtime runs too; for double (the trainer's gradient tests) they run plain loops of
// the same math. tests/trainer/layers_test.cc holds the two to each other. Their CUDA
// counterparts are in xf/kernels_cuda (kernels.h, backward.h).
#include <cstddef>
#include <cstdint>

#include "xf/kernels_cpu/kernels.h"

namespace xf::cpu {

class Bf16Gemm;  // matmul.h

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major (float: oneDNN sgemm, or bf16 products
// through `bf16` when given: xf-train --bf16; double: plain loops, `bf16` must be null).
template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc, int threads,
          Bf16Gemm* bf16 = nullptr);

// y = x W^T (+ bias).                          x: [rows, in]; weight: [out, in]; y: [rows, out]
template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                    int64_t out, T* y, int threads, Bf16Gemm* bf16 = nullptr);

// Backward of y = x W^T + b: dweight += dy^T x; dbias += column sums of dy (dbias may be null);
// dx = dy W (or dx += dy W when accumulate_dx; dx may be null).
template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                     int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias, int threads,
                     Bf16Gemm* bf16 = nullptr);

// out = LayerNorm(x) * gamma + beta; mean, rstd: [rows] kept for the backward pass.
template <typename T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, T epsilon, int64_t rows,
                        int64_t dim, T* out, T* mean, T* rstd, int threads);

// out[i, :] = scale * table[ids[i], :] + sinusoid(positions[i]).   table: [vocab, dim]
template <typename T>
void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                       const int32_t* positions, int64_t count, T scale, T* out, int threads);

// x = max(0, x + bias) in place.                                   x: [rows, dim]
template <typename T>
void bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim, int threads);

// Attention as cpu::attention (kernels.h), keeping probabilities [batch, heads, query_len,
// key_len] for the backward pass; with a dropout_mask (same shape, may be null) the output is
// dropout(P) V with kept entries scaled by dropout_scale. scratch: [threads, key_len].
template <typename T>
void attention_forward(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                       const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                       const AttentionShape& shape, const int32_t* key_lengths,
                       int64_t causal_offset, T* probabilities, const uint8_t* dropout_mask,
                       T dropout_scale, T* scratch, int threads);

// Dropout masks from the counter-based hash of (seed, site, index) that the CUDA kernels share
// (xf/kernels_common/dropout_hash.h): the same seed gives the same mask whatever the thread count. mask[i] = 1 with probability 1 - p. mask[i] is element
// first_index + i of the site (a rank's rows of a larger batch start past the others').
void make_dropout_mask(uint64_t seed, uint64_t site, size_t count, float p, uint8_t* mask,
                       int threads, uint64_t first_index = 0);

// x[i] = mask[i] ? x[i] * scale : 0, the forward and the backward of dropout alike.
template <typename T>
void apply_dropout(T* x, const uint8_t* mask, size_t count, T scale, int threads);

}  // namespace xf::cpu
