// Trainer-only CUDA kernels: dropout from a counter-based hash, column reductions (bias, gamma,
// beta gradients), LayerNorm / bias+ReLU / embedding backward, the fused label-smoothed
// cross-entropy, Adam, and a deterministic sum of squares.
#include <cmath>
#include <string>

#include "device_utils.cuh"
#include "xf/kernels_common/dropout_hash.h"
#include "xf/kernels_cuda/backward.h"

namespace xf::cuda {
namespace {

using detail::ceil_div;
using detail::elementwise_blocks;
using detail::grid_dim;
using detail::kThreads;
using detail::require;
using detail::row_threads;

// ---- dropout ------------------------------------------------------------------------------------

__global__ void dropout_kernel(float* x, int64_t count, uint64_t stream, uint32_t threshold,
                               float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = dropout_hash::keeps(stream, threshold, i) ? x[i] * scale : 0.0f;
  }
}

// ---- column reductions --------------------------------------------------------------------------

// Rows per chunk of a column reduction: enough chunks to fill the GPU, few enough that the final
// in-order sum over chunks is cheap.
constexpr int64_t kMaxColumnChunks = 128;
constexpr int64_t kMinChunkRows = 16;

int64_t column_chunks(int64_t rows) {
  const int64_t chunks = ceil_div(rows, kMinChunkRows);
  return chunks < kMaxColumnChunks ? (chunks > 0 ? chunks : 1) : kMaxColumnChunks;
}

// Per-element terms of the reductions: value(r, c) -> (first, second).
struct BiasTerms {  // dbias: sum of dy
  const float* dy;
  int64_t dim;
  __device__ float2 operator()(int64_t r, int64_t c) const { return {dy[r * dim + c], 0.0f}; }
};
struct LayerNormTerms {  // dgamma: sum of dout * x_hat, dbeta: sum of dout
  const float* dout;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t dim;
  __device__ float2 operator()(int64_t r, int64_t c) const {
    const float d = dout[r * dim + c];
    return {d * (x[r * dim + c] - mean[r]) * rstd[r], d};
  }
};

// Grid: (column blocks, chunks). partials: [chunks, 2 * dim], sums of the chunk's rows.
template <typename Terms>
__global__ void column_partials_kernel(Terms terms, int64_t rows, int64_t dim,
                                       int64_t rows_per_chunk, float* partials) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = min(rows, begin + rows_per_chunk);
  float first = 0.0f, second = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float2 t = terms(r, c);
    first += t.x;
    second += t.y;
  }
  partials[chunk * 2 * dim + c] = first;
  partials[chunk * 2 * dim + dim + c] = second;
}

// out_first[c] += sum over chunks (in order); likewise out_second (may be null).
__global__ void column_finish_kernel(const float* partials, int64_t chunks, int64_t dim,
                                     float* out_first, float* out_second) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  float first = 0.0f, second = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    first += partials[chunk * 2 * dim + c];
    second += partials[chunk * 2 * dim + dim + c];
  }
  out_first[c] += first;
  if (out_second != nullptr) out_second[c] += second;
}

template <typename Terms>
void column_sums(const Terms& terms, int64_t rows, int64_t dim, float* out_first,
                 float* out_second, float* workspace, cudaStream_t stream, const char* name) {
  require(workspace != nullptr, name, "workspace is null");
  const int64_t chunks = column_chunks(rows);
  const int64_t rows_per_chunk = ceil_div(rows, chunks);
  const dim3 grid(grid_dim(ceil_div(dim, kThreads), name), static_cast<unsigned>(chunks));
  column_partials_kernel<<<grid, kThreads, 0, stream>>>(terms, rows, dim, rows_per_chunk,
                                                        workspace);
  XF_CUDA_CHECK_LAUNCH("column_partials_kernel");
  column_finish_kernel<<<grid_dim(ceil_div(dim, kThreads), name), kThreads, 0, stream>>>(
      workspace, chunks, dim, out_first, out_second);
  XF_CUDA_CHECK_LAUNCH("column_finish_kernel");
}

// ---- LayerNorm backward: dx, one block per row --------------------------------------------------

// dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dout * gamma; accumulated into dx.
__global__ void layer_norm_backward_dx_kernel(const float* dout, const float* x,
                                              const float* mean, const float* rstd,
                                              const float* gamma, int64_t dim, float* dx) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float row_mean = mean[r], row_rstd = rstd[r];
  const float* dout_row = dout + r * dim;
  const float* x_row = x + r * dim;
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float g = dout_row[c] * gamma[c];
    sum_g += g;
    sum_g_xhat += g * (x_row[c] - row_mean) * row_rstd;
  }
  const float mean_g = detail::block_sum(sum_g, scratch) / static_cast<float>(dim);
  const float mean_g_xhat = detail::block_sum(sum_g_xhat, scratch) / static_cast<float>(dim);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float g = dout_row[c] * gamma[c];
    const float x_hat = (x_row[c] - row_mean) * row_rstd;
    dx[r * dim + c] += row_rstd * (g - mean_g - x_hat * mean_g_xhat);
  }
}

// ---- ReLU and embedding backward ----------------------------------------------------------------

__global__ void relu_backward_kernel(float* dy, const float* y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
}

// One block per token: its row of the table gets scale * dout added, atomically (tokens repeat).
__global__ void embedding_backward_kernel(const float* dout, const int32_t* ids, int64_t dim,
                                          int64_t vocab, float scale, float* dtable) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  if (id < 0 || id >= vocab) return;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    atomicAdd(&dtable[static_cast<int64_t>(id) * dim + c], scale * dout[i * dim + c]);
}

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

// ---- Adam ---------------------------------------------------------------------------------------

// The CPU's f32 operation order, with explicit rounding so nvcc fuses no multiply-add.
__global__ void adam_kernel(float* parameters, const float* gradients, float* m, float* v,
                            int64_t count, AdamConstants c, __half* half_parameters) {
  const float one_minus_beta1 = 1.0f - c.beta1, one_minus_beta2 = 1.0f - c.beta2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(gradients[i], c.gradient_scale);
    const float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(one_minus_beta1, g));
    const float vi =
        __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
    const float denominator =
        __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_correction2), c.epsilon);
    const float p = __fsub_rn(parameters[i], __fdiv_rn(__fmul_rn(c.step_size, mi), denominator));
    m[i] = mi;
    v[i] = vi;
    parameters[i] = p;
    if (half_parameters != nullptr) half_parameters[i] = __float2half_rn(p);
  }
}

// ---- sum of squares -----------------------------------------------------------------------------

__device__ __forceinline__ double warp_sum_double(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(detail::kFullWarpMask, value, offset);
  return value;
}

// Block k sums elements k*chunk .. (k+1)*chunk - 1 (in a fixed pattern) into partials[k].
__global__ void sum_of_squares_partials_kernel(const float* x, int64_t count, int64_t chunk,
                                               double* partials) {
  __shared__ double warp_sums[kThreads / 32];
  const int64_t begin = blockIdx.x * chunk;
  const int64_t end = min(count, begin + chunk);
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double value = x[i];
    sum += value * value;
  }
  sum = warp_sum_double(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    partials[blockIdx.x] = total;
  }
}

__global__ void sum_partials_kernel(const double* partials, int count, double* result) {
  double total = 0.0;
  for (int i = 0; i < count; ++i) total += partials[i];
  *result = total;
}

}  // namespace

DropoutRule make_dropout_rule(uint64_t seed, uint64_t site, float p) {
  require(p >= 0.0f && p < 1.0f, "make_dropout_rule",
          "dropout probability must be in [0, 1), got " + std::to_string(p));
  DropoutRule rule;
  rule.stream = dropout_hash::site_stream(seed, site);
  rule.threshold = dropout_hash::threshold(p);
  rule.scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  return rule;
}

void dropout(float* x, int64_t count, const DropoutRule& rule, cudaStream_t stream) {
  require(count >= 0, "dropout", "negative count");
  if (count == 0 || rule.threshold == 0) return;  // p = 0 keeps everything unscaled
  dropout_kernel<<<elementwise_blocks(count), kThreads, 0, stream>>>(x, count, rule.stream,
                                                                     rule.threshold, rule.scale);
  XF_CUDA_CHECK_LAUNCH("dropout_kernel");
}

size_t column_reduction_workspace_floats(int64_t rows, int64_t dim) {
  return static_cast<size_t>(column_chunks(rows) * 2 * dim);
}

void layer_norm_backward(const float* dout, const float* x, const float* mean, const float* rstd,
                         const float* gamma, int64_t rows, int64_t dim, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t stream) {
  const char* name = "layer_norm_backward";
  require(rows >= 0 && dim > 0, name, "rows must be >= 0 and dim > 0");
  if (rows == 0) return;
  layer_norm_backward_dx_kernel<<<grid_dim(rows, name), row_threads(dim), 0, stream>>>(
      dout, x, mean, rstd, gamma, dim, dx);
  XF_CUDA_CHECK_LAUNCH("layer_norm_backward_dx_kernel");
  column_sums(LayerNormTerms{dout, x, mean, rstd, dim}, rows, dim, dgamma, dbeta, workspace,
              stream, name);
}

void bias_backward(const float* dy, int64_t rows, int64_t dim, float* dbias, float* workspace,
                   cudaStream_t stream) {
  const char* name = "bias_backward";
  require(rows >= 0 && dim > 0, name, "rows must be >= 0 and dim > 0");
  if (rows == 0) return;
  column_sums(BiasTerms{dy, dim}, rows, dim, dbias, nullptr, workspace, stream, name);
}

void bias_relu_backward(float* dy, const float* y, int64_t rows, int64_t dim, float* dbias,
                        float* workspace, cudaStream_t stream) {
  const char* name = "bias_relu_backward";
  require(rows >= 0 && dim > 0, name, "rows must be >= 0 and dim > 0");
  if (rows == 0) return;
  relu_backward_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(dy, y,
                                                                               rows * dim);
  XF_CUDA_CHECK_LAUNCH("relu_backward_kernel");
  if (dbias != nullptr) bias_backward(dy, rows, dim, dbias, workspace, stream);
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t count, int64_t dim,
                        int64_t vocab, float scale, float* dtable, cudaStream_t stream) {
  const char* name = "embedding_backward";
  require(count >= 0 && dim > 0 && vocab > 0, name, "count >= 0, dim > 0 and vocab > 0 needed");
  if (count == 0) return;
  embedding_backward_kernel<<<grid_dim(count, name), row_threads(dim), 0, stream>>>(
      dout, ids, dim, vocab, scale, dtable);
  XF_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

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

void adam_step(float* parameters, const float* gradients, float* first_moment,
               float* second_moment, int64_t count, const AdamConstants& constants,
               __half* half_parameters, cudaStream_t stream) {
  require(count >= 0, "adam_step", "negative count");
  if (count == 0) return;
  adam_kernel<<<elementwise_blocks(count), kThreads, 0, stream>>>(
      parameters, gradients, first_moment, second_moment, count, constants, half_parameters);
  XF_CUDA_CHECK_LAUNCH("adam_kernel");
}

void sum_of_squares(const float* x, int64_t count, double* workspace, double* result,
                    cudaStream_t stream) {
  require(count >= 0, "sum_of_squares", "negative count");
  const int64_t chunk = ceil_div(count > 0 ? count : 1, kSumOfSquaresPartials);
  sum_of_squares_partials_kernel<<<kSumOfSquaresPartials, kThreads, 0, stream>>>(x, count, chunk,
                                                                                 workspace);
  XF_CUDA_CHECK_LAUNCH("sum_of_squares_partials_kernel");
  sum_partials_kernel<<<1, 1, 0, stream>>>(workspace, kSumOfSquaresPartials, result);
  XF_CUDA_CHECK_LAUNCH("sum_partials_kernel");
}

}  // namespace xf::cuda
