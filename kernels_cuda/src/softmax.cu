// log_softmax over rows, alone or followed by the row's k best entries (beam search), with the
// CPU kernel's rules: rank raw logits (ties to the lower column, NaN never ranked), then
// value = ((x - max) - log(sum exp(x - max))) + row_offset.
#include <climits>
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels_cuda/kernels.h"

namespace xf::cuda {
namespace {

using detail::require;
using detail::to_float;

constexpr int kSoftmaxThreads = 256;
constexpr int kTopK = static_cast<int>(kMaxTopK);

// a ranks before b: larger value, or equal value and lower column.
__device__ __forceinline__ bool ranks_before(float a_value, int a_column, float b_value,
                                             int b_column) {
  return a_value > b_value || (a_value == b_value && a_column < b_column);
}

// Grid: rows; block: kSoftmaxThreads. Each thread keeps its own sorted top-k of the columns it
// scans (in registers: every loop over the list is unrolled), then k rounds of a block-wide
// argmax pick the row's best, each winner dropping its head.
template <typename T>
__global__ void log_softmax_top_k_kernel(const T* logits, const float* row_offsets, int64_t vocab,
                                         int k, float* top_values, int32_t* top_indices) {
  __shared__ float scratch[32];
  __shared__ float warp_values[32];
  __shared__ int warp_columns[32];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * vocab;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;

  float values[kTopK];
  int columns[kTopK];
#pragma unroll
  for (int t = 0; t < kTopK; ++t) {
    values[t] = -INFINITY;
    columns[t] = INT_MAX;  // a sentinel every real column (even one at -inf) ranks before
  }
  float local_max = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    float value = to_float(row[c]);
    int column = static_cast<int>(c);
    local_max = fmaxf(local_max, value);
    if (!(value == value)) continue;  // NaN is never ranked
#pragma unroll
    for (int t = 0; t < kTopK; ++t) {
      if (t < k && ranks_before(value, column, values[t], columns[t])) {
        const float displaced_value = values[t];
        const int displaced_column = columns[t];
        values[t] = value;
        columns[t] = column;
        value = displaced_value;
        column = displaced_column;
      }
    }
  }
  const float max = detail::block_max(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) local_sum += expf(to_float(row[c]) - max);
  const float log_sum = logf(detail::block_sum(local_sum, scratch));
  const float offset = row_offsets != nullptr ? row_offsets[r] : 0.0f;

  for (int round = 0; round < k; ++round) {
    float best_value = values[0];
    int best_column = columns[0];
    for (int delta = 16; delta > 0; delta /= 2) {
      const float other_value = __shfl_xor_sync(detail::kFullWarpMask, best_value, delta);
      const int other_column = __shfl_xor_sync(detail::kFullWarpMask, best_column, delta);
      if (ranks_before(other_value, other_column, best_value, best_column)) {
        best_value = other_value;
        best_column = other_column;
      }
    }
    __syncthreads();  // the previous round's readers are done with warp_values
    if (lane == 0) {
      warp_values[warp] = best_value;
      warp_columns[warp] = best_column;
    }
    __syncthreads();
    best_value = warp_values[0];
    best_column = warp_columns[0];
    for (int w = 1; w < warps; ++w) {
      if (ranks_before(warp_values[w], warp_columns[w], best_value, best_column)) {
        best_value = warp_values[w];
        best_column = warp_columns[w];
      }
    }
    if (columns[0] == best_column) {  // this thread held the winner: drop its head
#pragma unroll
      for (int t = 0; t + 1 < kTopK; ++t) {
        values[t] = values[t + 1];
        columns[t] = columns[t + 1];
      }
      values[kTopK - 1] = -INFINITY;
      columns[kTopK - 1] = INT_MAX;
    }
    if (threadIdx.x == 0) {
      top_values[r * k + round] = ((best_value - max) - log_sum) + offset;
      top_indices[r * k + round] = best_column;
    }
  }
}

// Grid: rows. In place: (x - max) - log(sum exp(x - max)).
__global__ void log_softmax_kernel(float* logits, int64_t vocab) {
  __shared__ float scratch[32];
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float local_max = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) local_max = fmaxf(local_max, row[c]);
  const float max = detail::block_max(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) local_sum += expf(row[c] - max);
  const float log_sum = logf(detail::block_sum(local_sum, scratch));
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) row[c] = (row[c] - max) - log_sum;
}

template <typename T>
void log_softmax_top_k_impl(const T* logits, const float* row_offsets, int64_t rows,
                            int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                            cudaStream_t stream) {
  const char* name = "log_softmax_top_k";
  require(vocab > 0 && vocab <= INT_MAX && rows >= 0, name, "bad shape");
  require(k >= 1 && k <= kMaxTopK && k <= vocab, name,
          "k " + std::to_string(k) + " is outside [1, min(vocab, 16)]");
  if (rows == 0) return;
  log_softmax_top_k_kernel<<<detail::grid_dim(rows, name), kSoftmaxThreads, 0, stream>>>(
      logits, row_offsets, vocab, static_cast<int>(k), top_values, top_indices);
  XF_CUDA_CHECK_LAUNCH("log_softmax_top_k_kernel");
}

}  // namespace

void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows,
                       int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                       cudaStream_t stream) {
  log_softmax_top_k_impl(logits, row_offsets, rows, vocab, k, top_values, top_indices, stream);
}
void log_softmax_top_k(const half* logits, const float* row_offsets, int64_t rows, int64_t vocab,
                       int64_t k, float* top_values, int32_t* top_indices, cudaStream_t stream) {
  log_softmax_top_k_impl(logits, row_offsets, rows, vocab, k, top_values, top_indices, stream);
}

void log_softmax(float* logits, int64_t rows, int64_t vocab, cudaStream_t stream) {
  require(vocab > 0 && rows >= 0, "log_softmax", "bad shape");
  if (rows == 0) return;
  log_softmax_kernel<<<detail::grid_dim(rows, "log_softmax"), kSoftmaxThreads, 0, stream>>>(
      logits, vocab);
  XF_CUDA_CHECK_LAUNCH("log_softmax_kernel");
}

}  // namespace xf::cuda
