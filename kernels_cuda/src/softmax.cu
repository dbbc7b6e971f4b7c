// log_softmax over rows, alone or followed by the row's k best entries (beam search), with the
// CPU kernel's rules: rank raw logits (ties to the lower column, NaN never ranked), then
// value = ((x - max) - log(sum exp(x - max))) + row_offset; and the fused label-smoothed
// cross-entropy with its gradient (trainer only).
#include <climits>
#include <cmath>
#include <string>

#include "device_utils.cuh"
#include "xf/kernels/softmax.h"

namespace xf::cuda {
namespace {

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

namespace {

// ---- label-smoothed cross-entropy: one block per row --------------------------------------------

constexpr int kLossThreads = 512;

__global__ void cross_entropy_kernel(float* logits, const int32_t* targets, int64_t vocab,
                                     float smoothing, int32_t ignore_id, bool write_gradient,
                                     float gradient_scale, double* row_loss, double* row_nll) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  float* z = logits + r * vocab;
  const int32_t target = targets[r];
  if (target == ignore_id || target < 0 || target >= vocab) {
    if (threadIdx.x == 0) {
      row_loss[r] = 0.0;
      row_nll[r] = 0.0;
    }
    if (write_gradient)
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) z[j] = 0.0f;
    return;
  }
  float local_max = -INFINITY, local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    local_max = fmaxf(local_max, z[j]);
    local_sum += z[j];
  }
  const float max_z = detail::block_max(local_max, scratch);
  const float sum_z = detail::block_sum(local_sum, scratch);
  float local_exp = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) local_exp += expf(z[j] - max_z);
  const float sum_exp = detail::block_sum(local_exp, scratch);
  // -log p_j = log_norm - z_j;  loss = (1 - eps) * nll + eps * mean_j(-log p_j)
  const float log_norm = max_z + logf(sum_exp);
  const float target_z = z[target];
  if (threadIdx.x == 0) {
    const float nll = log_norm - target_z;
    const float mean_neg_log_p = log_norm - sum_z / static_cast<float>(vocab);
    row_nll[r] = nll;
    row_loss[r] = (1.0f - smoothing) * nll + smoothing * mean_neg_log_p;
  }
  if (!write_gradient) return;
  __syncthreads();  // everyone has read z[target] before it is overwritten
  const float inv_sum = 1.0f / sum_exp, uniform = smoothing / static_cast<float>(vocab);
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float q = uniform + (j == target ? 1.0f - smoothing : 0.0f);
    z[j] = gradient_scale * (expf(z[j] - max_z) * inv_sum - q);
  }
}

}  // namespace

void label_smoothed_cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, int32_t ignore_id,
                                  bool write_gradient, float gradient_scale, double* row_loss,
                                  double* row_nll, cudaStream_t stream) {
  const char* name = "label_smoothed_cross_entropy";
  require(rows >= 0 && vocab > 0, name, "rows must be >= 0 and vocab > 0");
  require(smoothing >= 0.0f && smoothing < 1.0f, name, "smoothing must be in [0, 1)");
  if (rows == 0) return;
  cross_entropy_kernel<<<grid_dim(rows, name), kLossThreads, 0, stream>>>(
      logits, targets, vocab, smoothing, ignore_id, write_gradient, gradient_scale, row_loss,
      row_nll);
  XF_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

}  // namespace xf::cuda
