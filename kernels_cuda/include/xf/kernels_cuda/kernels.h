#pragma once
// CUDA kernels: the GPU mirror of xf/kernels_cpu/kernels.h, same semantics, so tests compare the
// two. Plain functions over DEVICE pointers (indices, lengths and offsets too), sizes and a stream;
// no allocation, no synchronization: each call only enqueues work on `stream`. Launch errors throw
// xf::Error (XF_CUDA_CHECK_LAUNCH); bad sizes throw before anything is launched.
//
// Activations are f32 or f16 (`half`); every reduction (dot products, softmax, LayerNorm
// statistics) accumulates in f32. Parameters (bias, gamma, beta) have the activations' type.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "xf/format/config.h"

namespace xf::cuda {

using half = __half;

// Element strides of a [batch, heads, positions, head_dim] view whose last dimension is
// contiguous (as xf::cpu::HeadStrides). The fused QKV projection output [batch, len, 3*d_model]
// is such a view with head = head_dim, position = 3*d_model; the decoder's K/V cache
// [batch*beam, heads, max_len, head_dim] is another.
struct HeadStrides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t position = 0;
};

// Strides of a contiguous [batch, heads, positions, head_dim] tensor.
inline HeadStrides contiguous_head_strides(int64_t heads, int64_t positions, int64_t head_dim) {
  return HeadStrides{heads * positions * head_dim, positions * head_dim, head_dim};
}

struct AttentionShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t query_len = 0;
  int64_t key_len = 0;
  int64_t head_dim = 0;
};

// out[i, :] = scale * table[ids[i], :] + sinusoid(positions[i])      table: [vocab, dim]
// The sinusoid of `encoding` (config.h); interleaved is the paper's: PE(p, 2j) =
// sin(p / 10000^(2j/dim)), PE(p, 2j+1) = cos(p / 10000^(2j/dim)).    out: [count, dim]
// ids and positions: [count] on the device. The caller validates them on the host (as the CPU
// kernel does); an id outside [0, vocab) gives a zero row, never an out-of-bounds read.
void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);
void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding = PositionEncoding::interleaved);

// out = LayerNorm(x + bias + residual) * gamma + beta, row by row, f32 statistics.
// x, residual, out: [rows, dim]; bias, gamma, beta: [dim]. bias and residual may be null; out
// may alias x or residual. mean and rstd ([rows], f32) may be null.
void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean,
                                  float* rstd, cudaStream_t stream);
void add_bias_residual_layer_norm(const half* x, const half* bias, const half* residual,
                                  const half* gamma, const half* beta, float epsilon,
                                  int64_t rows, int64_t dim, half* out, float* mean, float* rstd,
                                  cudaStream_t stream);

// x[r, :] += bias (+ residual[r, :]); bias or residual may be null.  x, residual: [rows, dim]
void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream);
void add_bias_residual(half* x, const half* bias, const half* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream);

// x = max(0, x + bias), in place; bias may be null.                    x: [rows, dim]
void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream);
void bias_relu(half* x, const half* bias, int64_t rows, int64_t dim, cudaStream_t stream);

// x = activation(x + bias), in place (relu as bias_relu; swish x * sigmoid(x); gelu x * Phi(x)
// with erf), f32 math; bias may be null.                                x: [rows, dim]
void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream);
void bias_activation(half* x, const half* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream);

// Where add_bias_split_heads writes each part: a [batch, heads, positions, head_dim] view.
template <typename T>
struct SplitHeadsOutputs {
  T* data[3] = {nullptr, nullptr, nullptr};
  HeadStrides strides[3];
};

// Fused bias + head split of a packed projection (Q|K|V, K|V or Q alone).
// packed: [batch, len, packed_stride]; columns [p*d_model, (p+1)*d_model) hold part p, with
// d_model = heads * head_dim; bias: [parts * d_model] (may be null).
// outputs.data[p][b, h, position_offset + i, :] = packed[b, i, p*d_model + h*head_dim + :] + bias.
// The encoder writes Q, K, V contiguously (position_offset 0); a decoder step writes Q to a
// [rows, heads, 1, head_dim] buffer and K, V into the cache [batch*beam, heads, max_len, head_dim]
// at position_offset = step. parts: 1..3.
void add_bias_split_heads(const float* packed, int64_t packed_stride, const float* bias,
                          int parts, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                          const SplitHeadsOutputs<float>& outputs, int64_t position_offset,
                          cudaStream_t stream);
void add_bias_split_heads(const half* packed, int64_t packed_stride, const half* bias, int parts,
                          int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                          const SplitHeadsOutputs<half>& outputs, int64_t position_offset,
                          cudaStream_t stream);

// Scaled dot-product attention, softmax(q k^T / sqrt(head_dim) + mask) v, per batch and head,
// exactly as xf::cpu::attention: key_lengths ([batch] on the device, may be null) masks keys at
// positions >= key_lengths[b] (padding); causal_offset >= 0 lets query i see keys
// j <= i + causal_offset. A query that sees no key gets zeros (and all-zero probabilities).
// probabilities ([batch, heads, query_len, key_len] f32, may be null) receives the softmax.
// out may alias q when both have the same strides. One block per (query, head, batch) row; the
// scores live in shared memory, so key_len is limited to max_attention_key_len().
void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream);
void attention(const half* q, HeadStrides q_strides, const half* k, HeadStrides k_strides,
               const half* v, HeadStrides v_strides, half* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream);
int64_t max_attention_key_len();

// One decoder step's self-attention over the K/V cache: each of `rows` (= batch*beam) queries
// attends to cache positions 0..step.
// q: rows of q_row_stride elements, head h at h*head_dim (the fused QKV output has stride
// 3*d_model); out: rows of out_row_stride elements, likewise. k_cache, v_cache: a
// [rows, heads, max_len, head_dim] view with cache_strides, so both the head-major layout
// (contiguous_head_strides(heads, max_len, head_dim)) and the position-major one
// [rows, max_len, d_model] ({max_len*d_model, head_dim, d_model}) work.
// Splits the keys over several blocks per (row, head) when the cache is long, then merges.
// workspace: cached_attention_workspace_bytes(rows, heads, head_dim, max_len) bytes (0 when
// max_len fits one block; may be null then).
void cached_attention(const float* q, int64_t q_row_stride, const float* k_cache,
                      const float* v_cache, HeadStrides cache_strides, int64_t rows, int64_t heads,
                      int64_t head_dim, int64_t max_len, int64_t step, float* out,
                      int64_t out_row_stride, void* workspace, cudaStream_t stream);
void cached_attention(const half* q, int64_t q_row_stride, const half* k_cache,
                      const half* v_cache, HeadStrides cache_strides, int64_t rows, int64_t heads,
                      int64_t head_dim, int64_t max_len, int64_t step, half* out,
                      int64_t out_row_stride, void* workspace, cudaStream_t stream);
size_t cached_attention_workspace_bytes(int64_t rows, int64_t heads, int64_t head_dim,
                                        int64_t max_len);

// Per row: log_softmax(logits[r, :]) + row_offsets[r] (row_offsets may be null), then the k best
// values in descending order with their column indices (ties: lower index first), as
// xf::cpu::log_softmax_top_k. logits: [rows, vocab]; top_values, top_indices: [rows, k];
// 1 <= k <= min(vocab, kMaxTopK). All pointers on the device.
inline constexpr int64_t kMaxTopK = 16;
void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows,
                       int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                       cudaStream_t stream);
void log_softmax_top_k(const half* logits, const float* row_offsets, int64_t rows, int64_t vocab,
                       int64_t k, float* top_values, int32_t* top_indices, cudaStream_t stream);

// In place log_softmax over each row.                                  logits: [rows, vocab]
void log_softmax(float* logits, int64_t rows, int64_t vocab, cudaStream_t stream);

// dst[i, :] = src[indices[i], :]: rows of row_len elements with the given element strides.
// The beam search reorders its K/V cache ([batch*beam, heads, max_len, head_dim] as rows of
// heads*max_len*head_dim) and its token history with it. indices: [count] on the device, each in
// the caller's range (validated on the host). dst must not alias src.
void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, cudaStream_t stream);
void gather_rows(const half* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, half* dst, int64_t dst_stride, cudaStream_t stream);
void gather_rows(const int32_t* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, int32_t* dst, int64_t dst_stride, cudaStream_t stream);

// Element-wise dtype conversion (round to nearest even, saturating to +-inf).  [count]
void convert(const float* in, int64_t count, half* out, cudaStream_t stream);
void convert(const half* in, int64_t count, float* out, cudaStream_t stream);

}  // namespace xf::cuda
