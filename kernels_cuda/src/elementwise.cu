// Embedding, bias/residual/LayerNorm, bias+ReLU, head split, row gather and dtype conversion.
#include <algorithm>
#include <cmath>

#include "device_utils.cuh"
#include "xf/kernels_cuda/kernels.h"

namespace xf::cuda {
namespace {

using detail::ceil_div;
using detail::elementwise_blocks;
using detail::from_float;
using detail::grid_dim;
using detail::kThreads;
using detail::require;
using detail::row_threads;
using detail::to_float;

// ---- embed ------------------------------------------------------------------------------------

// The sinusoid of PositionEncoding `encoding` at column c (config.h gives the formulas), as the
// CPU kernel computes it: in double, except Marian's layout, which Marian computes in float.
__device__ float sinusoid_at(int encoding, int64_t position, int64_t c, int64_t dim) {
  const double log_base = 9.210340371976184;  // ln(10000)
  if (encoding == static_cast<int>(PositionEncoding::interleaved)) {
    const int64_t even = c - (c % 2);
    const double angle = static_cast<double>(position) * exp(-log_base * static_cast<double>(even) / dim);
    return static_cast<float>(c % 2 == 0 ? sin(angle) : cos(angle));
  }
  const int64_t half = dim / 2;
  const int64_t i = c < half ? c : c - half;
  if (encoding == static_cast<int>(PositionEncoding::sin_then_cos)) {
    const double angle = static_cast<double>(position) / pow(10000.0, 2.0 * static_cast<double>(i) / dim);
    return static_cast<float>(c < half ? sin(angle) : cos(angle));
  }
  const float increment = logf(10000.0f) / (static_cast<float>(half) - 1.0f);
  const float angle = static_cast<float>(position) * expf(static_cast<float>(i) * -increment);
  return c < half ? sinf(angle) : cosf(angle);
}

template <typename TableT, typename OutT>
__global__ void embed_kernel(const TableT* table, int64_t vocab, int64_t dim, const int32_t* ids,
                             const int32_t* positions, float scale, int encoding, OutT* out) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const bool valid_id = id >= 0 && id < vocab;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float sinusoid = sinusoid_at(encoding, positions[i], c, dim);
    const float value = valid_id ? scale * to_float(table[id * dim + c]) : 0.0f;
    out[i * dim + c] = from_float<OutT>(value + sinusoid);
  }
}

template <typename TableT, typename OutT>
void embed_impl(const TableT* table, int64_t vocab, int64_t dim, const int32_t* ids,
                const int32_t* positions, int64_t count, float scale, OutT* out,
                cudaStream_t stream, PositionEncoding encoding) {
  require(vocab > 0 && dim > 0 && count >= 0, "embed", "vocab and dim must be positive");
  if (count == 0) return;
  embed_kernel<<<grid_dim(count, "embed"), row_threads(dim), 0, stream>>>(
      table, vocab, dim, ids, positions, scale, static_cast<int>(encoding), out);
  XF_CUDA_CHECK_LAUNCH("embed_kernel");
}

// ---- LayerNorm --------------------------------------------------------------------------------

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

// ---- bias, residual, ReLU ---------------------------------------------------------------------

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
__global__ void bias_relu_kernel(T* x, const T* bias, int64_t count, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    x[i] = from_float<T>(fmaxf(value, 0.0f));
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

template <typename T>
void bias_relu_impl(T* x, const T* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  require(rows >= 0 && dim > 0, "bias_relu", "bad shape");
  if (rows == 0) return;
  bias_relu_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(x, bias, rows * dim,
                                                                            dim);
  XF_CUDA_CHECK_LAUNCH("bias_relu_kernel");
}

// Activation as an int: 1 swish x * sigmoid(x), 2 gelu x * Phi(x) (erf); relu has its own kernel.
template <typename T>
__global__ void bias_activation_kernel(T* x, const T* bias, int64_t count, int64_t dim, int activation) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float value = to_float(x[i]);
    if (bias != nullptr) value += to_float(bias[i % dim]);
    value = activation == static_cast<int>(Activation::swish)
                ? value / (1.0f + expf(-value))
                : 0.5f * value * (1.0f + erff(value * 0.70710678118654752f));
    x[i] = from_float<T>(value);
  }
}

template <typename T>
void bias_activation_impl(T* x, const T* bias, int64_t rows, int64_t dim, Activation activation,
                          cudaStream_t stream) {
  if (activation == Activation::relu) return bias_relu_impl(x, bias, rows, dim, stream);
  require(rows >= 0 && dim > 0, "bias_activation", "bad shape");
  if (rows == 0) return;
  bias_activation_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(
      x, bias, rows * dim, dim, static_cast<int>(activation));
  XF_CUDA_CHECK_LAUNCH("bias_activation_kernel");
}

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

// ---- gather, convert --------------------------------------------------------------------------

template <typename T>
__global__ void gather_rows_kernel(const T* src, int64_t src_stride, const int32_t* indices,
                                   int64_t row_len, T* dst, int64_t dst_stride) {
  const int64_t row = blockIdx.y;
  const T* from = src + static_cast<int64_t>(indices[row]) * src_stride;
  T* to = dst + row * dst_stride;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < row_len;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    to[c] = from[c];
}

template <typename T>
void gather_rows_impl(const T* src, int64_t src_stride, const int32_t* indices, int64_t count,
                      int64_t row_len, T* dst, int64_t dst_stride, cudaStream_t stream) {
  const char* name = "gather_rows";
  require(count >= 0 && row_len >= 0 && src_stride >= row_len && dst_stride >= row_len, name,
          "bad shape or strides");
  require(count <= 65535, name, "more than 65535 rows");
  if (count == 0 || row_len == 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(row_len, kThreads), 1024)),
                  static_cast<unsigned>(count));
  gather_rows_kernel<<<grid, kThreads, 0, stream>>>(src, src_stride, indices, row_len, dst,
                                                    dst_stride);
  XF_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

template <typename InT, typename OutT>
__global__ void convert_kernel(const InT* in, int64_t count, OutT* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<OutT>(to_float(in[i]));
}

template <typename InT, typename OutT>
void convert_impl(const InT* in, int64_t count, OutT* out, cudaStream_t stream) {
  require(count >= 0, "convert", "negative count");
  if (count == 0) return;
  convert_kernel<<<elementwise_blocks(count), kThreads, 0, stream>>>(in, count, out);
  XF_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace

void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, float* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const half* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}
void embed(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
           const int32_t* positions, int64_t count, float scale, half* out, cudaStream_t stream,
           PositionEncoding encoding) {
  embed_impl(table, vocab, dim, ids, positions, count, scale, out, stream, encoding);
}

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

void bias_relu(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  bias_relu_impl(x, bias, rows, dim, stream);
}
void bias_relu(half* x, const half* bias, int64_t rows, int64_t dim, cudaStream_t stream) {
  bias_relu_impl(x, bias, rows, dim, stream);
}

void bias_activation(float* x, const float* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream) {
  bias_activation_impl(x, bias, rows, dim, activation, stream);
}
void bias_activation(half* x, const half* bias, int64_t rows, int64_t dim, Activation activation,
                     cudaStream_t stream) {
  bias_activation_impl(x, bias, rows, dim, activation, stream);
}

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

void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, cudaStream_t stream) {
  gather_rows_impl(src, src_stride, indices, count, row_len, dst, dst_stride, stream);
}
void gather_rows(const half* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, half* dst, int64_t dst_stride, cudaStream_t stream) {
  gather_rows_impl(src, src_stride, indices, count, row_len, dst, dst_stride, stream);
}
void gather_rows(const int32_t* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, int32_t* dst, int64_t dst_stride, cudaStream_t stream) {
  gather_rows_impl(src, src_stride, indices, count, row_len, dst, dst_stride, stream);
}

void convert(const float* in, int64_t count, half* out, cudaStream_t stream) {
  convert_impl(in, count, out, stream);
}
void convert(const half* in, int64_t count, float* out, cudaStream_t stream) {
  convert_impl(in, count, out, stream);
}

}  // namespace xf::cuda
