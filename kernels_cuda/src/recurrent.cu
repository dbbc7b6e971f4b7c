// Marian's SSRU cell (xf/kernels/recurrent.h): one decoding step, and the recurrence over whole
// sequences with its backward, where one thread per (batch row, feature) scans the steps;
// neighbouring threads read neighbouring features, so each step's loads coalesce.
#include "device_utils.cuh"
#include "xf/kernels/recurrent.h"

namespace xf::cuda {
namespace {

template <typename T>
__global__ void ssru_step_kernel(const T* in, T* cell, const int32_t* state_rows, bool first, int64_t count,
                                 int64_t dim, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, j = i % dim;
    const float x = to_float(in[r * 2 * dim + j]), f = to_float(in[r * 2 * dim + dim + j]);
    T* c = cell + (state_rows != nullptr ? state_rows[r] : r) * dim + j;
    const float next = ssru_next_cell(ssru_forget_weight(f), first ? 0.0f : to_float(*c), x);
    *c = from_float<T>(next);
    out[i] = from_float<T>(fmaxf(next, 0.0f));
  }
}

template <typename T>
void ssru_step_impl(const T* in, T* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim, T* out,
                    cudaStream_t stream) {
  require(rows >= 0 && dim > 0, "ssru_step", "bad shape");
  if (rows == 0) return;
  ssru_step_kernel<<<elementwise_blocks(rows * dim), kThreads, 0, stream>>>(in, cell, state_rows, first, rows * dim,
                                                                            dim, out);
  XF_CUDA_CHECK_LAUNCH("ssru_step_kernel");
}

__global__ void ssru_scan_forward_kernel(const float* x, const float* f, int64_t in_stride, int64_t batch,
                                         int64_t len, int64_t dim, float* cell, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch * dim) return;
  const int64_t b = i / dim, j = i % dim;
  float c = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t r = b * len + t;
    c = ssru_next_cell(ssru_forget_weight(f[r * in_stride + j]), c, x[r * in_stride + j]);
    cell[r * dim + j] = c;
    out[r * dim + j] = fmaxf(c, 0.0f);
  }
}

__global__ void ssru_scan_backward_kernel(const float* dout, const float* x, const float* f, int64_t in_stride,
                                          const float* cell, int64_t batch, int64_t len, int64_t dim, float* dx,
                                          float* df, int64_t d_stride) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch * dim) return;
  const int64_t b = i / dim, j = i % dim;
  float carry = 0.0f;
  for (int64_t t = len; t-- > 0;) {
    const int64_t r = b * len + t;
    const float c = cell[r * dim + j];
    const float dc = (c > 0.0f ? dout[r * dim + j] : 0.0f) + carry;
    const float s = ssru_forget_weight(f[r * in_stride + j]);
    const float previous = t > 0 ? cell[(r - 1) * dim + j] : 0.0f;
    dx[r * d_stride + j] = dc * (1.0f - s);
    df[r * d_stride + j] = dc * (previous - x[r * in_stride + j]) * s * (1.0f - s);
    carry = dc * s;
  }
}

void check_shape(int64_t in_stride, int64_t batch, int64_t len, int64_t dim, const char* kernel) {
  require(batch >= 0 && len >= 0 && dim > 0 && in_stride >= dim, kernel, "bad shape");
}

}  // namespace

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, cudaStream_t stream) {
  ssru_step_impl(in, cell, state_rows, first, rows, dim, out, stream);
}
void ssru_step(const half* in, half* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               half* out, cudaStream_t stream) {
  ssru_step_impl(in, cell, state_rows, first, rows, dim, out, stream);
}

void ssru_scan_forward(const float* x, const float* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       float* cell, float* out, cudaStream_t stream) {
  check_shape(in_stride, batch, len, dim, "ssru_scan_forward");
  if (batch == 0 || len == 0) return;
  ssru_scan_forward_kernel<<<grid_dim(ceil_div(batch * dim, kThreads), "ssru_scan"), kThreads, 0, stream>>>(x, f, in_stride, batch, len,
                                                                                     dim, cell, out);
  XF_CUDA_CHECK_LAUNCH("ssru_scan_forward_kernel");
}

void ssru_scan_backward(const float* dout, const float* x, const float* f, int64_t in_stride, const float* cell,
                        int64_t batch, int64_t len, int64_t dim, float* dx, float* df, int64_t d_stride,
                        cudaStream_t stream) {
  check_shape(in_stride, batch, len, dim, "ssru_scan_backward");
  require(d_stride >= dim, "ssru_scan_backward", "bad gradient stride");
  if (batch == 0 || len == 0) return;
  ssru_scan_backward_kernel<<<grid_dim(ceil_div(batch * dim, kThreads), "ssru_scan"), kThreads, 0, stream>>>(
      dout, x, f, in_stride, cell, batch, len, dim, dx, df, d_stride);
  XF_CUDA_CHECK_LAUNCH("ssru_scan_backward_kernel");
}

}  // namespace xf::cuda
