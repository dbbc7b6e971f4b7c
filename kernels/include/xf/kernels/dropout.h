#pragma once
// Dropout from a counter-based hash of (seed, site, element index): the CPU and CUDA trainers draw
// the same mask for the same (seed, site, index), whatever the thread count or launch shape, and
// `--resume` draws the masks a straight run would.
//
// A site's stream is mix64(seed ^ mix64(site)) plus the index of its first element in the global
// batch (a rank's rows of a larger batch start past the others'); element i is kept when the top
// 24 bits of mix64(stream + i) are >= threshold = round(p * 2^24) (0 keeps everything), and a
// kept element is scaled by 1 / (1 - p). The hash below is one definition for g++ and nvcc.
// Applying dropout, x[i] = kept(i) ? x[i] * scale : 0, is its forward and its backward alike.
// The CPU stores the mask (make_dropout_mask, apply_dropout); CUDA stores none and recomputes
// it from a DropoutRule in the forward and the backward.
#include <cmath>

#include "xf/kernels/host_device.h"
#include "xf/kernels/types.h"

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

namespace xf::cpu {

// mask[i] = 1 when element first_index + i of the site is kept.                  mask: [count]
void make_dropout_mask(uint64_t seed, uint64_t site, size_t count, float p, uint8_t* mask,
                       int threads, uint64_t first_index = 0);

// x[i] = mask[i] ? x[i] * scale : 0.                                               x: [count]
template <typename T>
void apply_dropout(T* x, const uint8_t* mask, size_t count, T scale, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// A site's rule: stream = site_stream(seed, site) (a rank adds its first index), threshold, scale.
struct DropoutRule {
  uint64_t stream = 0;
  uint32_t threshold = 0;  // 0: keep everything
  float scale = 1.0f;      // 1 / (1 - p) for kept elements
};
DropoutRule make_dropout_rule(uint64_t seed, uint64_t site, float p);  // host; p in [0, 1)

// x[i] = kept(i) ? x[i] * scale : 0.                                               x: [count]
void dropout(float* x, int64_t count, const DropoutRule& rule, cudaStream_t stream);

}  // namespace xf::cuda
