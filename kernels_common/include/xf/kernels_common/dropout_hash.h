#pragma once
// The counter-based hash behind the trainer's dropout masks, one definition for the CPU kernels
// (g++) and the CUDA kernels (nvcc): both trainers draw the same mask for the same (seed, site,
// element index), whatever the thread count or launch shape.
//
// A site's stream is mix64(seed ^ mix64(site)) plus the index of its first element in the global
// batch; element i is kept when the top 24 bits of mix64(stream + i) are >= p * 2^24, and a kept
// element is scaled by 1 / (1 - p).
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define XF_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define XF_HOST_DEVICE inline
#endif

namespace xf::dropout_hash {

XF_HOST_DEVICE uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream of a site's first element (before adding the batch's first index).
XF_HOST_DEVICE uint64_t site_stream(uint64_t seed, uint64_t site) {
  return mix64(seed ^ mix64(site));
}

// p * 2^24, rounded: the keep threshold of the hash's top 24 bits (0 keeps everything). Host only.
inline uint32_t threshold(float p) {
  return static_cast<uint32_t>(std::llround(static_cast<double>(p) * double(1 << 24)));
}

// Whether dropout keeps element `index` of the site whose stream and threshold are given.
XF_HOST_DEVICE bool keeps(uint64_t stream, uint32_t threshold, int64_t index) {
  return (mix64(stream + static_cast<uint64_t>(index)) >> 40) >= threshold;
}

}  // namespace xf::dropout_hash
