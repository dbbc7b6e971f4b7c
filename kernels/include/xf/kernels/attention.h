#pragma once
// Scaled dot-product attention over strided heads, and its backward.
//
// attention: out = softmax(q k^T / sqrt(head_dim) + mask) v, per batch and head, over
//   [batch, heads, positions, head_dim] views with the given strides (xf/kernels/types.h).
//   key_lengths ([batch], may be null): keys at positions >= key_lengths[b] are masked (padding).
//   causal_offset < 0: no causal mask; otherwise query i sees keys j <= i + causal_offset (the
//   decoder's incremental step passes its step index with query_len 1).
//   probabilities ([batch, heads, query_len, key_len] f32, may be null) receives the softmax for
//   the trainer's backward pass. A query that sees no key at all (an empty source) gets zeros
//   (and all-zero probabilities). out may alias q when both have the same strides (each query
//   row is read before its output is written).
// attention_forward (CPU trainer): attention keeping the probabilities; with a dropout_mask
//   (same shape, may be null) the output is dropout(P) V, kept entries scaled by dropout_scale
//   (float without dropout: attention(); otherwise plain loops). CUDA computes dropout(P) V
//   with attention_dropout_values after attention().
// attention_backward: the backward of O = dropout(P) V, P = softmax(Q K^T / sqrt(d) + mask).
//   probabilities: P from the forward pass (masked entries 0, which is all the backward needs of
//   the masks); dropout: the CPU's stored mask (1 = kept, scaled by dropout_scale = 1 / (1 - p))
//   or CUDA's rule, element index (((b * heads + h) * query_len + i) * key_len + j); either may be
//   null. dq, dk, dv are overwritten (masked keys get zero).
#include "xf/kernels/dropout.h"
#include "xf/kernels/types.h"

namespace xf::cpu {

// scratch: [threads, key_len] floats.
void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, float* scratch, int threads);

// probabilities: required. scratch: [threads, key_len].
template <typename T>
void attention_forward(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                       const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                       const AttentionShape& shape, const int32_t* key_lengths,
                       int64_t causal_offset, T* probabilities, const uint8_t* dropout_mask,
                       T dropout_scale, T* scratch, int threads);

// scratch: [threads, 2 * key_len].
template <typename T>
void attention_backward(const T* dout, HeadStrides dout_strides, const T* q, HeadStrides q_strides,
                        const T* k, HeadStrides k_strides, const T* v, HeadStrides v_strides,
                        const T* probabilities, const uint8_t* dropout_mask, T dropout_scale,
                        T* dq, HeadStrides dq_strides, T* dk, HeadStrides dk_strides, T* dv,
                        HeadStrides dv_strides, const AttentionShape& shape, T* scratch,
                        int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// key_lengths on the device. One block per (query, head, batch) row; the scores live in shared
// memory, so key_len is limited to max_attention_key_len().
void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream);
void attention(const half* q, HeadStrides q_strides, const half* k, HeadStrides k_strides,
               const half* v, HeadStrides v_strides, half* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream);
int64_t max_attention_key_len();

// Where add_bias_split_heads writes each part: a [batch, heads, positions, head_dim] view.
template <typename T>
struct SplitHeadsOutputs {
  T* data[3] = {nullptr, nullptr, nullptr};
  HeadStrides strides[3];
};

// Fused bias + head split of a packed projection (Q|K|V, K|V or Q alone), attention's inputs.
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

// out = dropout(P) V for the attention's output when attention dropout is on (attention() itself
// computes P V): P [batch, heads, query_len, key_len], element indices as attention_backward.
void attention_dropout_values(const float* probabilities, const DropoutRule& dropout,
                              const float* v, HeadStrides v_strides, float* out,
                              HeadStrides out_strides, const AttentionShape& shape,
                              cudaStream_t stream);

// workspace: attention_backward_workspace_floats(shape) floats.
size_t attention_backward_workspace_floats(const AttentionShape& shape);
void attention_backward(const float* dout, HeadStrides dout_strides, const float* q,
                        HeadStrides q_strides, const float* k, HeadStrides k_strides,
                        const float* v, HeadStrides v_strides, const float* probabilities,
                        const DropoutRule* dropout, float* dq, HeadStrides dq_strides, float* dk,
                        HeadStrides dk_strides, float* dv, HeadStrides dv_strides,
                        const AttentionShape& shape, float* workspace, cudaStream_t stream);

}  // namespace xf::cuda
