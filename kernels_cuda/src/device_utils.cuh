#pragma once
// Helpers shared by the .cu files: dtype conversion, warp and block reductions, launch sizes.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "xf/error.h"
#include "xf/kernels_cuda/check.h"

namespace xf::cuda::detail {

__device__ __forceinline__ float to_float(float value) { return value; }
__device__ __forceinline__ float to_float(__half value) { return __half2float(value); }

template <typename T>
__device__ __forceinline__ T from_float(float value);
template <>
__device__ __forceinline__ float from_float<float>(float value) { return value; }
template <>
__device__ __forceinline__ __half from_float<__half>(float value) {
  return __float2half_rn(value);
}

constexpr unsigned kFullWarpMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, offset));
  return value;
}

// Sum over the whole block, returned to every thread. blockDim.x must be a multiple of 32.
// scratch: 32 floats of shared memory, reusable right after the call returns.
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  value = warp_sum(value);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(value);
}

__device__ __forceinline__ float block_max(float value, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(value);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kThreads = 256;
// Grid-stride element-wise kernels need no more blocks than this to fill any current GPU.
constexpr int64_t kMaxElementwiseBlocks = 4096;

inline unsigned elementwise_blocks(int64_t count) {
  const int64_t blocks = ceil_div(count, kThreads);
  return static_cast<unsigned>(blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks);
}

// Threads for one block per row of `dim` values: a multiple of 32, at most kThreads.
inline unsigned row_threads(int64_t dim) {
  const int64_t threads = ceil_div(dim, 32) * 32;
  return static_cast<unsigned>(threads < kThreads ? threads : kThreads);
}

// Grid sizes are int; xf's sizes are int64_t. Refuse rather than truncate.
inline unsigned grid_dim(int64_t blocks, const char* kernel, int64_t limit = 2147483647) {
  if (blocks < 1 || blocks > limit)
    throw Error(std::string(kernel) + ": " + std::to_string(blocks) +
                " blocks are outside the grid limit");
  return static_cast<unsigned>(blocks);
}

inline void require(bool condition, const char* kernel, const std::string& what) {
  if (!condition) throw Error(std::string(kernel) + ": " + what);
}

}  // namespace xf::cuda::detail

namespace xf::cuda {
using namespace detail;  // the .cu files name these helpers unqualified
}  // namespace xf::cuda
