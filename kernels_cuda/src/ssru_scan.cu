// The SSRU recurrence over whole sequences and its backward (xf/kernels/ssru_scan.h): one
// thread per (batch row, feature) scans the steps; neighbouring threads read neighbouring
// features, so each step's loads coalesce.
#include "device_utils.cuh"
#include "xf/kernels/ssru_scan.h"

namespace xf::cuda {
namespace {

__device__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void ssru_scan_forward_kernel(const float* x, const float* f, int64_t in_stride, int64_t batch,
                                         int64_t len, int64_t dim, float* cell, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch * dim) return;
  const int64_t b = i / dim, j = i % dim;
  float c = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t r = b * len + t;
    const float s = sigmoid(f[r * in_stride + j]);
    c = s * c + (1.0f - s) * x[r * in_stride + j];
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
    const float s = sigmoid(f[r * in_stride + j]);
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
