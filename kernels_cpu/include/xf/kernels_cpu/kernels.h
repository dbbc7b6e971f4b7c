#pragma once
// CPU kernels: plain functions over raw pointers. No allocation inside a kernel, no tensor
// classes, no knowledge of layers. Forward kernels serve trainer and runtime alike.
// Parallel loops use OpenMP with the caller's thread count (oneDNN, built with OpenMP in
// Debian, shares the same pool).
#include <cstddef>
#include <cstdint>

#include "xf/format/config.h"

namespace xf::cpu {

// A weight matrix [rows, cols] as stored in a model file: f32, f16, bf16, or int8 with one f32
// scale per row.
struct WeightMatrix {
  DType dtype = DType::f32;
  const void* data = nullptr;
  const float* row_scales = nullptr;  // int8 only
  int64_t rows = 0;
  int64_t cols = 0;
};

// Widens row `row` of `weights` to f32 (dequantizes int8).                   out: [cols]
void load_row(const WeightMatrix& weights, int64_t row, float* out);

// Symmetric int8 quantization of each row of x [rows, cols] with its own scale: the rule of
// xf::quantize_rows_int8 (format/dtype_convert.h), scales[r] = max|x[r, :]| / 127 (1 for a row
// of zeros), q = nearbyint(x / scale) in [-127, 127]. Parallel and vectorized. The int8 matmul
// quantizes its input with it (one scale per token, as CTranslate2 does), so that a row's
// product never depends on the other rows: a sentence translates the same in any batch.
void quantize_int8_per_row(const float* x, int64_t rows, int64_t cols, int8_t* quantized, float* scales,
                           int threads);

// y[r, :] = y[r, :] * row_scales[r] (+ bias[:] when bias is not null).        y: [rows, cols]
// The int8 matmul's epilogue: the per-row input scales, which oneDNN 2.6 cannot apply itself.
void scale_rows_add_bias(float* y, int64_t rows, int64_t cols, const float* row_scales, const float* bias,
                         int threads);

// out[i, :] = scale * table[ids[i], :] + sinusoid(positions[i])      out: [count, dim]
// The sinusoid's layout and frequencies are `encoding`'s (config.h); interleaved is the paper's:
// PE(p, 2j) = sin(p / 10000^(2j/dim)), PE(p, 2j+1) = cos(...).
// Throws xf::Error when an id is outside the table or a position is negative.
void embed(const WeightMatrix& table, const int32_t* ids, const int32_t* positions, int64_t count,
           float scale, float* out, int threads,
           PositionEncoding encoding = PositionEncoding::interleaved);

// The sinusoid of `encoding` at `position`, `dim` columns (embed() adds it).    out: [dim]
void write_sinusoid(PositionEncoding encoding, int64_t position, int64_t dim, float* out);

// out = LayerNorm(x + bias + residual) * gamma + beta, row by row.     x, residual, out: [rows, dim]
// bias and residual may be null; out may alias x or residual. mean and rstd ([rows]) may be null;
// the trainer keeps them for the backward pass.
void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean, float* rstd,
                                  int threads);

// x[r, :] += bias (+ residual[r, :]); bias or residual may be null.  x: [rows, dim]
void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, int threads);

// x = max(0, x + bias), in place.                                       x: [rows, dim]
void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, int threads);

// x = activation(x + bias), in place (relu as bias_relu; swish x * sigmoid(x); gelu
// x * Phi(x) with erf); bias may be null.                                x: [rows, dim]
void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     int threads);

// Element strides of a [batch, heads, positions, head_dim] view whose last dimension is
// contiguous. The fused QKV projection output [batch, len, 3*d_model] is such a view with
// head = head_dim, position = 3*d_model; the decoder's K/V cache
// [batch, heads, max_len, head_dim] is another.
struct HeadStrides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t position = 0;
};

struct AttentionShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t query_len = 0;
  int64_t key_len = 0;
  int64_t head_dim = 0;
};

// Scaled dot-product attention, softmax(q k^T / sqrt(head_dim) + mask) v, per batch and head.
// key_lengths ([batch], may be null): keys at positions >= key_lengths[b] are masked (padding).
// causal_offset < 0: no causal mask; otherwise query i sees keys j <= i + causal_offset (the
// decoder's incremental step passes its step index with query_len 1).
// probabilities ([batch, heads, query_len, key_len], may be null) receives the softmax for the
// trainer's backward pass. scratch: [threads, key_len] floats.
// A query that sees no key at all (an empty source) gets zeros (and all-zero probabilities).
// out may alias q when both have the same strides (each query row is read before its output).
void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, float* scratch, int threads);

// Per row: log_softmax(logits[r, :]) + row_offsets[r] (row_offsets may be null), then the k best
// values in descending order with their column indices (ties: lower index first).
// logits: [rows, vocab]; top_values, top_indices: [rows, k]; k <= vocab.
void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows,
                       int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                       int threads);

// In place log_softmax over each row (the trainer's loss and the runtime's n-best scores).
void log_softmax(float* logits, int64_t rows, int64_t vocab, int threads);

// dst[i, :] = src[indices[i], :]; rows of row_len floats, with the given element strides.
// The beam search reorders its K/V cache and scores with it. dst must not alias src.
void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, int threads);

}  // namespace xf::cpu
