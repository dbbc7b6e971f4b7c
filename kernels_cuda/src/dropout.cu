// Dropout from the counter-based hash: no mask is stored, forward and backward recompute it.
#include <string>

#include "device_utils.cuh"
#include "xf/kernels/dropout.h"

namespace xf::cuda {
namespace {

__global__ void dropout_kernel(float* x, int64_t count, uint64_t stream, uint32_t threshold,
                               float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = dropout_hash::keeps(stream, threshold, i) ? x[i] * scale : 0.0f;
  }
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

}  // namespace xf::cuda
