#pragma once
// The counter-based hash behind the trainer's dropout masks: splitmix64's finalizer, exactly as
// xf::trainer::make_dropout_mask (trainer/src/layers.cc) uses it, so the CPU and CUDA trainers
// draw the same masks (tests/cuda/trainer_backward_test.cc holds the two equal).
#include <cstdint>

namespace xf::cuda::detail {

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Whether dropout keeps element `index` of the site whose stream and threshold are given
// (xf::cuda::DropoutRule).
__host__ __device__ __forceinline__ bool dropout_keeps(uint64_t stream, uint32_t threshold,
                                                       int64_t index) {
  return (mix64(stream + static_cast<uint64_t>(index)) >> 40) >= threshold;
}

}  // namespace xf::cuda::detail
