// Marian's SSRU cell, one decoding step (xf/kernels/recurrent.h).
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
    const float s = 1.0f / (1.0f + expf(-f));  // exp overflowing to inf gives 0, never NaN
    T* c = cell + (state_rows != nullptr ? state_rows[r] : r) * dim + j;
    const float next = s * (first ? 0.0f : to_float(*c)) + (1.0f - s) * x;
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

}  // namespace

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, cudaStream_t stream) {
  ssru_step_impl(in, cell, state_rows, first, rows, dim, out, stream);
}
void ssru_step(const half* in, half* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               half* out, cudaStream_t stream) {
  ssru_step_impl(in, cell, state_rows, first, rows, dim, out, stream);
}

}  // namespace xf::cuda
