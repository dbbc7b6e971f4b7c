// Row gathers (the beam search's cache, scores and token history).
#include "device_utils.cuh"
#include "xf/kernels/gather.h"

namespace xf::cuda {
namespace {

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

}  // namespace

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

}  // namespace xf::cuda
