// Attention: the general strided kernel (encoder self-attention with padding masks, decoder
// cross-attention, the trainer's causal self-attention) and the decoder step's single-query
// attention over the K/V cache, split over key chunks when the cache is long.
#include <algorithm>
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels_cuda/kernels.h"

namespace xf::cuda {
namespace {

using detail::ceil_div;
using detail::from_float;
using detail::require;
using detail::to_float;

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

}  // namespace xf::cuda
