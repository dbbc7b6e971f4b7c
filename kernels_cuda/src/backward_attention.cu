// Backward of scaled dot-product attention, and the dropout(P) V product of the forward pass when
// attention dropout is on (trainer only).
//
// With O = P_d V, P_d = P * keep * scale, S = Q K^T / sqrt(dh), P = softmax(S):
//   dP = (dO V^T) * keep * scale;  dS = P * (dP - rowsum(dP * P));
//   dQ = dS K / sqrt(dh);  dK = dS^T Q / sqrt(dh);  dV = P_d^T dO.
// Two kernels, no atomics: one block per query row computes dS (into the workspace) and dQ; one
// block per key row then sums dK and dV over the queries.
#include <cmath>
#include <string>

#include "device_utils.cuh"
#include "xf/kernels_common/dropout_hash.h"
#include "xf/kernels_cuda/backward.h"

namespace xf::cuda {
namespace {

using detail::grid_dim;
using detail::require;

constexpr int kAttentionThreads = 128;  // 4 warps: one key per warp at a time
constexpr int64_t kMaxHeadDim = 1024;
// Shared memory holds one [key_len] (or 2 x [query_len]) row of f32 values next to the head row.
constexpr int64_t kMaxSharedFloats = 12 * 1024;

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
