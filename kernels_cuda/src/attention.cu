// Attention: the general strided kernel (encoder self-attention with padding masks, decoder
// cross-attention, the trainer's causal self-attention) and the decoder step's single-query
// attention over the K/V cache, split over key chunks when the cache is long; the fused bias +
// head split that feeds them; the backward and the dropout(P) V product (trainer only).
#include <algorithm>
#include <cmath>
#include <string>

#include "device_utils.cuh"
#include "xf/kernels/attention.h"

namespace xf::cuda {
namespace {

constexpr int kAttentionThreads = 128;  // 4 warps: one key per warp at a time
// Scores and the query live in shared memory as f32: the default 48 KB hold 12k values.
constexpr int64_t kMaxSharedFloats = 12 * 1024;
constexpr int64_t kMaxHeadDim = 1024;
// Keys per block of the decoder's cached attention; longer caches are split and merged.
constexpr int64_t kCachedChunk = 256;

// Loads one query row into shared memory, pre-multiplied by 1/sqrt(head_dim).
template <typename T>
__device__ void load_scaled_query(const T* q_row, int64_t head_dim, float scale, float* query) {
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) query[d] = to_float(q_row[d]) * scale;
  __syncthreads();
}

// For keys [0, count) of k_rows (one key every k_position_stride elements): scores[j] becomes
// exp(q.k_j - max) and the block learns max and sum. count may be 0 (max -inf, sum 0).
// Ends with a barrier, so scores may be read by any thread afterwards.
template <typename T>
__device__ void exp_scores(const float* query, const T* k_rows, int64_t k_position_stride,
                           int64_t count, int64_t head_dim, float* scores, float* scratch,
                           float* max_out, float* sum_out) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  float local_max = -INFINITY;
  for (int64_t j = warp; j < count; j += warps) {
    const T* key = k_rows + j * k_position_stride;
    float dot = 0.0f;
    for (int64_t d = lane; d < head_dim; d += 32) dot += query[d] * to_float(key[d]);
    dot = detail::warp_sum(dot);
    if (lane == 0) scores[j] = dot;
    local_max = fmaxf(local_max, dot);
  }
  const float max = detail::block_max(local_max, scratch);  // its barriers publish scores
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const float e = expf(scores[j] - max);
    scores[j] = e;
    local_sum += e;
  }
  *max_out = max;
  *sum_out = detail::block_sum(local_sum, scratch);  // its barriers publish the exponentials
}

// out_d = scale * sum_j weights[j] * v_j[d] for every d, one thread per d.
template <typename T, typename OutT>
__device__ void weighted_sum_values(const float* weights, const T* v_rows,
                                    int64_t v_position_stride, int64_t count, int64_t head_dim,
                                    float scale, OutT* out) {
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < count; ++j) sum += weights[j] * to_float(v_rows[j * v_position_stride + d]);
    out[d] = from_float<OutT>(sum * scale);
  }
}

// Grid: (query_len, heads, batch); dynamic shared memory: [head_dim + key_len] floats.
template <typename T>
__global__ void attention_kernel(const T* q, HeadStrides q_strides, const T* k,
                                 HeadStrides k_strides, const T* v, HeadStrides v_strides, T* out,
                                 HeadStrides out_strides, int64_t query_len, int64_t key_len,
                                 int64_t head_dim, const int32_t* key_lengths,
                                 int64_t causal_offset, float* probabilities, float scale) {
  extern __shared__ float shared[];
  float* query = shared;                // [head_dim]
  float* scores = shared + head_dim;    // [key_len]
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x;
  const int64_t h = blockIdx.y;
  const int64_t b = blockIdx.z;

  int64_t visible = key_len;
  if (key_lengths != nullptr) visible = min(visible, static_cast<int64_t>(max(key_lengths[b], 0)));
  if (causal_offset >= 0) visible = min(visible, i + causal_offset + 1);

  // The query row is in shared memory before any output is written: out may alias q.
  load_scaled_query(q + b * q_strides.batch + h * q_strides.head + i * q_strides.position,
                    head_dim, scale, query);
  float max = 0.0f;
  float sum = 0.0f;
  exp_scores(query, k + b * k_strides.batch + h * k_strides.head, k_strides.position, visible,
             head_dim, scores, scratch, &max, &sum);
  const float inverse_sum = visible > 0 ? 1.0f / sum : 0.0f;  // no visible key: zeros

  if (probabilities != nullptr) {
    float* row = probabilities + ((b * gridDim.y + h) * query_len + i) * key_len;
    for (int64_t j = threadIdx.x; j < key_len; j += blockDim.x)
      row[j] = j < visible ? scores[j] * inverse_sum : 0.0f;
  }
  weighted_sum_values(scores, v + b * v_strides.batch + h * v_strides.head, v_strides.position,
                      visible, head_dim, inverse_sum,
                      out + b * out_strides.batch + h * out_strides.head + i * out_strides.position);
}

template <typename T>
void attention_impl(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                    const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                    const AttentionShape& shape, const int32_t* key_lengths,
                    int64_t causal_offset, float* probabilities, cudaStream_t stream) {
  const char* name = "attention";
  require(shape.batch >= 0 && shape.heads >= 0 && shape.query_len >= 0 && shape.key_len >= 0,
          name, "negative size");
  require(shape.head_dim > 0 && shape.head_dim <= kMaxHeadDim, name,
          "head_dim " + std::to_string(shape.head_dim) + " is outside [1, 1024]");
  require(shape.key_len <= max_attention_key_len(), name,
          "key_len " + std::to_string(shape.key_len) + " exceeds " +
              std::to_string(max_attention_key_len()));
  require(shape.batch <= 65535 && shape.heads <= 65535, name, "batch or heads above 65535");
  if (shape.batch == 0 || shape.heads == 0 || shape.query_len == 0) return;
  const dim3 grid(detail::grid_dim(shape.query_len, name), static_cast<unsigned>(shape.heads),
                  static_cast<unsigned>(shape.batch));
  const size_t shared_bytes = (shape.head_dim + shape.key_len) * sizeof(float);
  attention_kernel<<<grid, kAttentionThreads, shared_bytes, stream>>>(
      q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape.query_len, shape.key_len,
      shape.head_dim, key_lengths, causal_offset, probabilities,
      1.0f / std::sqrt(static_cast<float>(shape.head_dim)));
  XF_CUDA_CHECK_LAUNCH("attention_kernel");
}

// ---- decoder step over the K/V cache ----------------------------------------------------------

// Where a split cached attention keeps each chunk's partial result.
struct CachedPartials {
  float* output;  // [rows, heads, chunks, head_dim]: sum_j exp(s_j - max) v_j, unnormalized
  float* max;     // [rows, heads, chunks]
  float* sum;     // [rows, heads, chunks]
};

// Grid: (chunks, heads, rows); dynamic shared memory: [head_dim + kCachedChunk] floats.
// With one chunk the block writes the normalized output itself; otherwise its partials.
template <typename T>
__global__ void cached_attention_kernel(const T* q, int64_t q_row_stride, const T* k_cache,
                                        const T* v_cache, HeadStrides cache_strides,
                                        int64_t head_dim, int64_t key_count, T* out,
                                        int64_t out_row_stride, CachedPartials partials,
                                        float scale) {
  extern __shared__ float shared[];
  float* query = shared;              // [head_dim]
  float* scores = shared + head_dim;  // [kCachedChunk]
  __shared__ float scratch[32];
  const int64_t chunk = blockIdx.x;
  const int64_t chunks = gridDim.x;
  const int64_t h = blockIdx.y;
  const int64_t heads = gridDim.y;
  const int64_t row = blockIdx.z;
  const int64_t begin = chunk * kCachedChunk;
  const int64_t count = min(kCachedChunk, key_count - begin);
  const int64_t cache_offset =
      row * cache_strides.batch + h * cache_strides.head + begin * cache_strides.position;

  load_scaled_query(q + row * q_row_stride + h * head_dim, head_dim, scale, query);
  float max = 0.0f;
  float sum = 0.0f;
  exp_scores(query, k_cache + cache_offset, cache_strides.position, count, head_dim, scores,
             scratch, &max, &sum);
  if (chunks == 1) {
    weighted_sum_values(scores, v_cache + cache_offset, cache_strides.position, count, head_dim,
                        1.0f / sum, out + row * out_row_stride + h * head_dim);
    return;
  }
  const int64_t partial = (row * heads + h) * chunks + chunk;
  weighted_sum_values(scores, v_cache + cache_offset, cache_strides.position, count, head_dim,
                      1.0f, partials.output + partial * head_dim);
  if (threadIdx.x == 0) {
    partials.max[partial] = max;
    partials.sum[partial] = sum;
  }
}

// Grid: (heads, rows). Rescales each chunk's partials to the global max and normalizes.
template <typename T>
__global__ void merge_cached_partials_kernel(CachedPartials partials, int64_t chunks,
                                             int64_t head_dim, T* out, int64_t out_row_stride) {
  const int64_t h = blockIdx.x;
  const int64_t heads = gridDim.x;
  const int64_t row = blockIdx.y;
  const int64_t first = (row * heads + h) * chunks;
  float max = -INFINITY;
  for (int64_t c = 0; c < chunks; ++c) max = fmaxf(max, partials.max[first + c]);
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partials.sum[first + c] * expf(partials.max[first + c] - max);
  const float inverse_sum = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float value = 0.0f;
    for (int64_t c = 0; c < chunks; ++c)
      value += partials.output[(first + c) * head_dim + d] * expf(partials.max[first + c] - max);
    out[row * out_row_stride + h * head_dim + d] = from_float<T>(value * inverse_sum);
  }
}

CachedPartials cached_partials(void* workspace, int64_t rows, int64_t heads, int64_t head_dim,
                               int64_t chunks) {
  float* base = static_cast<float*>(workspace);
  const int64_t slots = rows * heads * chunks;
  return CachedPartials{base, base + slots * head_dim, base + slots * (head_dim + 1)};
}

template <typename T>
void cached_attention_impl(const T* q, int64_t q_row_stride, const T* k_cache, const T* v_cache,
                           HeadStrides cache_strides, int64_t rows, int64_t heads,
                           int64_t head_dim, int64_t max_len, int64_t step, T* out,
                           int64_t out_row_stride, void* workspace, cudaStream_t stream) {
  const char* name = "cached_attention";
  require(rows >= 0 && heads > 0 && heads <= 65535 && rows <= 65535, name, "bad rows or heads");
  require(head_dim > 0 && head_dim <= kMaxHeadDim, name, "head_dim outside [1, 1024]");
  require(q_row_stride >= heads * head_dim && out_row_stride >= heads * head_dim, name,
          "a row stride is smaller than heads * head_dim");
  require(step >= 0 && step < max_len, name,
          "step " + std::to_string(step) + " is outside the cache of " + std::to_string(max_len) +
              " positions");
  if (rows == 0) return;
  const int64_t key_count = step + 1;
  const int64_t chunks = ceil_div(key_count, kCachedChunk);
  require(chunks == 1 || workspace != nullptr, name, "a cache this long needs the workspace");
  // Laid out for this call's chunk count, which is at most the one the workspace was sized for.
  const CachedPartials partials = chunks > 1
                                      ? cached_partials(workspace, rows, heads, head_dim, chunks)
                                      : CachedPartials{nullptr, nullptr, nullptr};
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(heads),
                  static_cast<unsigned>(rows));
  const size_t shared_bytes = (head_dim + kCachedChunk) * sizeof(float);
  cached_attention_kernel<<<grid, kAttentionThreads, shared_bytes, stream>>>(
      q, q_row_stride, k_cache, v_cache, cache_strides, head_dim, key_count, out, out_row_stride,
      partials,
      1.0f / std::sqrt(static_cast<float>(head_dim)));
  XF_CUDA_CHECK_LAUNCH("cached_attention_kernel");
  if (chunks > 1) {
    const unsigned threads = static_cast<unsigned>(std::min<int64_t>(ceil_div(head_dim, 32) * 32, 256));
    merge_cached_partials_kernel<<<dim3(static_cast<unsigned>(heads), static_cast<unsigned>(rows)),
                                   threads, 0, stream>>>(partials, chunks, head_dim, out, out_row_stride);
    XF_CUDA_CHECK_LAUNCH("merge_cached_partials_kernel");
  }
}

}  // namespace

int64_t max_attention_key_len() { return kMaxSharedFloats - kMaxHeadDim; }

void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream) {
  attention_impl(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape, key_lengths,
                 causal_offset, probabilities, stream);
}
void attention(const half* q, HeadStrides q_strides, const half* k, HeadStrides k_strides,
               const half* v, HeadStrides v_strides, half* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, cudaStream_t stream) {
  attention_impl(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape, key_lengths,
                 causal_offset, probabilities, stream);
}

size_t cached_attention_workspace_bytes(int64_t rows, int64_t heads, int64_t head_dim,
                                        int64_t max_len) {
  const int64_t chunks = ceil_div(max_len, kCachedChunk);
  if (chunks <= 1) return 0;
  return static_cast<size_t>(rows * heads * chunks * (head_dim + 2)) * sizeof(float);
}

void cached_attention(const float* q, int64_t q_row_stride, const float* k_cache,
                      const float* v_cache, HeadStrides cache_strides, int64_t rows, int64_t heads,
                      int64_t head_dim, int64_t max_len, int64_t step, float* out,
                      int64_t out_row_stride, void* workspace, cudaStream_t stream) {
  cached_attention_impl(q, q_row_stride, k_cache, v_cache, cache_strides, rows, heads, head_dim,
                        max_len, step, out, out_row_stride, workspace, stream);
}
void cached_attention(const half* q, int64_t q_row_stride, const half* k_cache,
                      const half* v_cache, HeadStrides cache_strides, int64_t rows, int64_t heads,
                      int64_t head_dim, int64_t max_len, int64_t step, half* out,
                      int64_t out_row_stride, void* workspace, cudaStream_t stream) {
  cached_attention_impl(q, q_row_stride, k_cache, v_cache, cache_strides, rows, heads, head_dim,
                        max_len, step, out, out_row_stride, workspace, stream);
}

namespace {

// ---- head split -------------------------------------------------------------------------------

template <typename T>
__global__ void add_bias_split_heads_kernel(const T* packed, int64_t packed_stride, const T* bias,
                                            int parts, int64_t len, int64_t heads,
                                            int64_t head_dim, SplitHeadsOutputs<T> outputs,
                                            int64_t position_offset, int64_t count) {
  const int64_t d_model = heads * head_dim;
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       index < count; index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // index walks packed's [batch, len, parts, heads, head_dim] order, so reads are coalesced.
    const int64_t column = index % (parts * d_model);  // p * d_model + h * head_dim + d
    const int64_t token = index / (parts * d_model);   // b * len + i
    const int part = static_cast<int>(column / d_model);
    const int64_t h = (column % d_model) / head_dim;
    const int64_t d = column % head_dim;
    const int64_t b = token / len;
    const int64_t i = token % len;
    float value = to_float(packed[token * packed_stride + column]);
    if (bias != nullptr) value += to_float(bias[column]);
    const HeadStrides s = outputs.strides[part];
    outputs.data[part][b * s.batch + h * s.head + (position_offset + i) * s.position + d] =
        from_float<T>(value);
  }
}

template <typename T>
void add_bias_split_heads_impl(const T* packed, int64_t packed_stride, const T* bias, int parts,
                               int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                               const SplitHeadsOutputs<T>& outputs, int64_t position_offset,
                               cudaStream_t stream) {
  const char* name = "add_bias_split_heads";
  require(parts >= 1 && parts <= 3, name, "parts must be 1, 2 or 3");
  require(batch >= 0 && len >= 0 && heads > 0 && head_dim > 0 && position_offset >= 0, name,
          "bad shape");
  require(packed_stride >= parts * heads * head_dim, name,
          "packed_stride is smaller than parts * d_model");
  for (int p = 0; p < parts; ++p) require(outputs.data[p] != nullptr, name, "null output");
  const int64_t count = batch * len * parts * heads * head_dim;
  if (count == 0) return;
  add_bias_split_heads_kernel<<<elementwise_blocks(count), kThreads, 0, stream>>>(
      packed, packed_stride, bias, parts, len, heads, head_dim, outputs, position_offset, count);
  XF_CUDA_CHECK_LAUNCH("add_bias_split_heads_kernel");
}

// ---- backward -----------------------------------------------------------------------------------

// With O = P_d V, P_d = P * keep * scale, S = Q K^T / sqrt(dh), P = softmax(S):
//   dP = (dO V^T) * keep * scale;  dS = P * (dP - rowsum(dP * P));
//   dQ = dS K / sqrt(dh);  dK = dS^T Q / sqrt(dh);  dV = P_d^T dO.
// Two kernels, no atomics: one block per query row computes dS (into the workspace) and dQ; one
// block per key row then sums dK and dV over the queries.

// keep * scale of element `index` (1 without dropout).
__device__ __forceinline__ float dropout_factor(bool has_dropout, DropoutRule rule,
                                                int64_t index) {
  if (!has_dropout) return 1.0f;
  return dropout_hash::keeps(rule.stream, rule.threshold, index) ? rule.scale : 0.0f;
}

// Grid: (query_len, heads, batch). Shared: dO row [head_dim] + dS row [key_len].
// Writes dS (already divided by sqrt(dh)) to ds_out [batch, heads, query_len, key_len] and dQ.
__global__ void attention_backward_query_kernel(
    const float* dout, HeadStrides dout_strides, const float* k, HeadStrides k_strides,
    const float* v, HeadStrides v_strides, const float* probabilities, bool has_dropout,
    DropoutRule rule, float* dq, HeadStrides dq_strides, int64_t query_len, int64_t key_len,
    int64_t head_dim, float inv_sqrt, float* ds_out) {
  extern __shared__ float shared[];
  float* dout_row = shared;         // [head_dim]
  float* ds = shared + head_dim;    // [key_len]
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = (b * gridDim.y + h) * query_len + i;  // row of P
  const float* p = probabilities + row * key_len;
  const float* doi = dout + b * dout_strides.batch + h * dout_strides.head + i * dout_strides.position;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) dout_row[c] = doi[c];
  __syncthreads();

  // dP_j = (dO_i . V_j) * keep * scale, one key per warp; 0 where P is 0 (masked keys).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* v_rows = v + b * v_strides.batch + h * v_strides.head;
  float local_row_sum = 0.0f;
  for (int64_t j = warp; j < key_len; j += warps) {
    const float pj = p[j];
    float dot = 0.0f;
    if (pj != 0.0f) {
      const float* vj = v_rows + j * v_strides.position;
      for (int64_t c = lane; c < head_dim; c += 32) dot += dout_row[c] * vj[c];
      dot = detail::warp_sum(dot) * dropout_factor(has_dropout, rule, row * key_len + j);
    }
    if (lane == 0) {
      ds[j] = dot;
      local_row_sum += dot * pj;
    }
  }
  const float row_sum = detail::block_sum(local_row_sum, scratch);  // publishes ds too
  for (int64_t j = threadIdx.x; j < key_len; j += blockDim.x) {
    const float value = p[j] * (ds[j] - row_sum) * inv_sqrt;
    ds[j] = value;
    ds_out[row * key_len + j] = value;
  }
  __syncthreads();
  // dQ_i = sum_j dS_j K_j, one thread per feature.
  const float* k_rows = k + b * k_strides.batch + h * k_strides.head;
  float* dqi = dq + b * dq_strides.batch + h * dq_strides.head + i * dq_strides.position;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < key_len; ++j)
      if (ds[j] != 0.0f) sum += ds[j] * k_rows[j * k_strides.position + c];
    dqi[c] = sum;
  }
}

// Grid: (key_len, heads, batch). Shared: the key's column of dS and of P_d, [2 * query_len].
__global__ void attention_backward_key_kernel(
    const float* dout, HeadStrides dout_strides, const float* q, HeadStrides q_strides,
    const float* probabilities, bool has_dropout, DropoutRule rule, const float* ds_in,
    float* dk, HeadStrides dk_strides, float* dv, HeadStrides dv_strides, int64_t query_len,
    int64_t key_len, int64_t head_dim) {
  extern __shared__ float shared[];
  float* ds = shared;                  // [query_len]
  float* pd = shared + query_len;      // [query_len]
  const int64_t j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t first_row = (b * gridDim.y + h) * query_len;
  for (int64_t i = threadIdx.x; i < query_len; i += blockDim.x) {
    const int64_t index = (first_row + i) * key_len + j;
    ds[i] = ds_in[index];
    pd[i] = probabilities[index] * dropout_factor(has_dropout, rule, index);
  }
  __syncthreads();
  const float* q_rows = q + b * q_strides.batch + h * q_strides.head;
  const float* dout_rows = dout + b * dout_strides.batch + h * dout_strides.head;
  float* dkj = dk + b * dk_strides.batch + h * dk_strides.head + j * dk_strides.position;
  float* dvj = dv + b * dv_strides.batch + h * dv_strides.head + j * dv_strides.position;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float sum_k = 0.0f, sum_v = 0.0f;
    for (int64_t i = 0; i < query_len; ++i) {
      if (ds[i] != 0.0f) sum_k += ds[i] * q_rows[i * q_strides.position + c];
      if (pd[i] != 0.0f) sum_v += pd[i] * dout_rows[i * dout_strides.position + c];
    }
    dkj[c] = sum_k;
    dvj[c] = sum_v;
  }
}

// Grid: (query_len, heads, batch). out_i = sum_j P_ij * keep * scale * V_j.
__global__ void attention_dropout_values_kernel(const float* probabilities, DropoutRule rule,
                                                const float* v, HeadStrides v_strides, float* out,
                                                HeadStrides out_strides, int64_t query_len,
                                                int64_t key_len, int64_t head_dim) {
  extern __shared__ float weights[];  // [key_len]
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = (b * gridDim.y + h) * query_len + i;
  for (int64_t j = threadIdx.x; j < key_len; j += blockDim.x)
    weights[j] = probabilities[row * key_len + j] * dropout_factor(true, rule, row * key_len + j);
  __syncthreads();
  const float* v_rows = v + b * v_strides.batch + h * v_strides.head;
  float* oi = out + b * out_strides.batch + h * out_strides.head + i * out_strides.position;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < key_len; ++j)
      if (weights[j] != 0.0f) sum += weights[j] * v_rows[j * v_strides.position + c];
    oi[c] = sum;
  }
}

void check_shape(const AttentionShape& shape, const char* name) {
  require(shape.batch >= 0 && shape.heads >= 0 && shape.query_len >= 0 && shape.key_len >= 0,
          name, "negative size");
  require(shape.head_dim > 0 && shape.head_dim <= kMaxHeadDim, name,
          "head_dim " + std::to_string(shape.head_dim) + " is outside [1, 1024]");
  require(shape.head_dim + shape.key_len <= kMaxSharedFloats &&
              2 * shape.query_len <= kMaxSharedFloats,
          name,
          "query_len " + std::to_string(shape.query_len) + " or key_len " +
              std::to_string(shape.key_len) + " too long for shared memory");
  require(shape.batch <= 65535 && shape.heads <= 65535, name, "batch or heads above 65535");
}

}  // namespace

void add_bias_split_heads(const float* packed, int64_t packed_stride, const float* bias,
                          int parts, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                          const SplitHeadsOutputs<float>& outputs, int64_t position_offset,
                          cudaStream_t stream) {
  add_bias_split_heads_impl(packed, packed_stride, bias, parts, batch, len, heads, head_dim,
                            outputs, position_offset, stream);
}
void add_bias_split_heads(const half* packed, int64_t packed_stride, const half* bias, int parts,
                          int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                          const SplitHeadsOutputs<half>& outputs, int64_t position_offset,
                          cudaStream_t stream) {
  add_bias_split_heads_impl(packed, packed_stride, bias, parts, batch, len, heads, head_dim,
                            outputs, position_offset, stream);
}

size_t attention_backward_workspace_floats(const AttentionShape& shape) {
  return static_cast<size_t>(shape.batch * shape.heads * shape.query_len * shape.key_len);
}

void attention_backward(const float* dout, HeadStrides dout_strides, const float* q,
                        HeadStrides q_strides, const float* k, HeadStrides k_strides,
                        const float* v, HeadStrides v_strides, const float* probabilities,
                        const DropoutRule* dropout, float* dq, HeadStrides dq_strides, float* dk,
                        HeadStrides dk_strides, float* dv, HeadStrides dv_strides,
                        const AttentionShape& shape, float* workspace, cudaStream_t stream) {
  const char* name = "attention_backward";
  check_shape(shape, name);
  require(workspace != nullptr || attention_backward_workspace_floats(shape) == 0, name,
          "workspace is null");
  if (shape.batch == 0 || shape.heads == 0 || shape.query_len == 0 || shape.key_len == 0) return;
  const bool has_dropout = dropout != nullptr && dropout->threshold != 0;
  const DropoutRule rule = dropout != nullptr ? *dropout : DropoutRule{};
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const unsigned heads = static_cast<unsigned>(shape.heads), batch = static_cast<unsigned>(shape.batch);
  const dim3 query_grid(grid_dim(shape.query_len, name), heads, batch);
  attention_backward_query_kernel<<<query_grid, kAttentionThreads,
                                    (shape.head_dim + shape.key_len) * sizeof(float), stream>>>(
      dout, dout_strides, k, k_strides, v, v_strides, probabilities, has_dropout, rule, dq,
      dq_strides, shape.query_len, shape.key_len, shape.head_dim, inv_sqrt, workspace);
  XF_CUDA_CHECK_LAUNCH("attention_backward_query_kernel");
  const dim3 key_grid(grid_dim(shape.key_len, name), heads, batch);
  attention_backward_key_kernel<<<key_grid, kAttentionThreads,
                                  2 * shape.query_len * sizeof(float), stream>>>(
      dout, dout_strides, q, q_strides, probabilities, has_dropout, rule, workspace, dk,
      dk_strides, dv, dv_strides, shape.query_len, shape.key_len, shape.head_dim);
  XF_CUDA_CHECK_LAUNCH("attention_backward_key_kernel");
}

void attention_dropout_values(const float* probabilities, const DropoutRule& dropout,
                              const float* v, HeadStrides v_strides, float* out,
                              HeadStrides out_strides, const AttentionShape& shape,
                              cudaStream_t stream) {
  const char* name = "attention_dropout_values";
  check_shape(shape, name);
  if (shape.batch == 0 || shape.heads == 0 || shape.query_len == 0) return;
  const dim3 grid(grid_dim(shape.query_len, name), static_cast<unsigned>(shape.heads),
                  static_cast<unsigned>(shape.batch));
  attention_dropout_values_kernel<<<grid, kAttentionThreads, shape.key_len * sizeof(float),
                                    stream>>>(probabilities, dropout, v, v_strides, out,
                                              out_strides, shape.query_len, shape.key_len,
                                              shape.head_dim);
  XF_CUDA_CHECK_LAUNCH("attention_dropout_values_kernel");
}

}  // namespace xf::cuda
