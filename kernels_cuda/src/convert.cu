// f32 <-> f16, element-wise.
#include "device_utils.cuh"
#include "xf/kernels/convert.h"

namespace xf::cuda {
namespace {

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

void convert(const float* in, int64_t count, half* out, cudaStream_t stream) {
  convert_impl(in, count, out, stream);
}
void convert(const half* in, int64_t count, float* out, cudaStream_t stream) {
  convert_impl(in, count, out, stream);
}

}  // namespace xf::cuda
