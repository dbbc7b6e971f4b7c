// Bias, residual and LayerNorm row by row, and their backward: LayerNorm's, and the column
// reductions behind the bias, gamma and beta gradients (fixed row chunks summed in a fixed order,
// so results do not depend on the launch shape).
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels/layer_norm.h"

namespace xf::cuda {
namespace {

// LayerNorm's row is staged in shared memory as f32; 12k columns fit the default 48 KB.
constexpr int64_t kMaxLayerNormDim = 12 * 1024;

template <typename T>
__global__ void add_bias_residual_layer_norm_kernel(const T* x, const T* bias, const T* residual,
                                                    const T* gamma, const T* beta, float epsilon,
                                                    int64_t dim, T* out, float* mean_out,
                                                    float* rstd_out) {
  extern __shared__ float row[];  // [dim]: x + bias + residual in f32
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * dim;
  // Each thread reads and later writes the same columns, so out may alias x or residual.
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float value = to_float(x[offset + c]);
    if (bias != nullptr) value += to_float(bias[c]);
    if (residual != nullptr) value += to_float(residual[offset + c]);
    row[c] = value;
    sum += value;
  }
  const float mean = detail::block_sum(sum, scratch) / static_cast<float>(dim);
  // Two passes (mean, then squared deviations): E[x^2] - E[x]^2 cancels.
  float squares = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float deviation = row[c] - mean;
    squares += deviation * deviation;
  }
  // Biased variance, epsilon inside the square root (PyTorch's LayerNorm, as the CPU kernel).
  const float variance = detail::block_sum(squares, scratch) / static_cast<float>(dim);
  const float rstd = 1.0f / sqrtf(variance + epsilon);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    out[offset + c] =
        from_float<T>((row[c] - mean) * rstd * to_float(gamma[c]) + to_float(beta[c]));
  if (threadIdx.x == 0) {
    if (mean_out != nullptr) mean_out[blockIdx.x] = mean;
    if (rstd_out != nullptr) rstd_out[blockIdx.x] = rstd;
  }
}

template <typename T>
void add_bias_residual_layer_norm_impl(const T* x, const T* bias, const T* residual,
                                       const T* gamma, const T* beta, float epsilon, int64_t rows,
                                       int64_t dim, T* out, float* mean, float* rstd,
                                       cudaStream_t stream) {
  const char* name = "add_bias_residual_layer_norm";
  require(dim > 0 && dim <= kMaxLayerNormDim, name,
          "dim " + std::to_string(dim) + " is outside [1, " + std::to_string(kMaxLayerNormDim) +
              "]");
  require(rows >= 0, name, "negative row count");
  if (rows == 0) return;
  add_bias_residual_layer_norm_kernel<<<grid_dim(rows, name), row_threads(dim),
                                        dim * sizeof(float), stream>>>(
      x, bias, residual, gamma, beta, epsilon, dim, out, mean, rstd);
  XF_CUDA_CHECK_LAUNCH("add_bias_residual_layer_norm_kernel");
}

template <typename T>
__global__ void add_bias_residual_kernel(T* x, const T* bias, const T* residual, int64_t count,
                                         int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    if (residual != nullptr) value += to_float(residual[i]);
    x[i] = from_float<T>(value);
  }
}

template <typename T>
void add_bias_residual_impl(T* x, const T* bias, const T* residual, int64_t rows, int64_t dim,
                            cudaStream_t stream) {
  require(rows >= 0 && dim > 0, "add_bias_residual", "bad shape");
  if (rows == 0) return;
  add_bias_residual_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(
      x, bias, residual, rows * dim, dim);
  XF_CUDA_CHECK_LAUNCH("add_bias_residual_kernel");
}

// ---- column reductions ---------------------------------------------------------------------------

// Rows per chunk of a column reduction: enough chunks to fill the GPU, few enough that the final
// in-order sum over chunks is cheap.
constexpr int64_t kMaxColumnChunks = 128;
constexpr int64_t kMinChunkRows = 16;

int64_t column_chunks(int64_t rows) {
  const int64_t chunks = ceil_div(rows, kMinChunkRows);
  return chunks < kMaxColumnChunks ? (chunks > 0 ? chunks : 1) : kMaxColumnChunks;
}

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

}  // namespace

void add_bias_residual_layer_norm(const float* x, const float* bias, const float* residual,
                                  const float* gamma, const float* beta, float epsilon,
                                  int64_t rows, int64_t dim, float* out, float* mean,
                                  float* rstd, cudaStream_t stream) {
  add_bias_residual_layer_norm_impl(x, bias, residual, gamma, beta, epsilon, rows, dim, out, mean,
                                    rstd, stream);
}
void add_bias_residual_layer_norm(const half* x, const half* bias, const half* residual,
                                  const half* gamma, const half* beta, float epsilon,
                                  int64_t rows, int64_t dim, half* out, float* mean, float* rstd,
                                  cudaStream_t stream) {
  add_bias_residual_layer_norm_impl(x, bias, residual, gamma, beta, epsilon, rows, dim, out, mean,
                                    rstd, stream);
}

void add_bias_residual(float* x, const float* bias, const float* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream) {
  add_bias_residual_impl(x, bias, residual, rows, dim, stream);
}
void add_bias_residual(half* x, const half* bias, const half* residual, int64_t rows,
                       int64_t dim, cudaStream_t stream) {
  add_bias_residual_impl(x, bias, residual, rows, dim, stream);
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

}  // namespace xf::cuda
