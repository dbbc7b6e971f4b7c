#pragma once
// Helpers for the CPU kernels' hot loops: plain scalar code that compilers vectorize inside
// `#pragma omp simd` loops on any architecture (no intrinsics, no libm calls).
// In such loops write maxima and clamps as `a > b ? a : b`: GCC 12 leaves a loop with
// std::max scalar ("control flow in loop"); the ternary it vectorizes.
#include <cstdint>
#include <cstring>

// XF_VECTORIZED marks a hot function. On x86-64 with GCC or Clang it is compiled three times
// (AVX-512, AVX2+FMA, baseline SSE2) and the loader picks the best for the CPU at hand, so the
// library needs no -march flag. Elsewhere (aarch64: NEON is baseline) it is a plain function.
// Not under ASan or TSan: their instrumented ifunc resolvers run before the sanitizer starts
// (the TSan build of the threads test crashed at start).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(XF_NO_MULTIVERSION) && !defined(__AVX512F__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define XF_VECTORIZED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define XF_VECTORIZED
#endif

namespace xf::cpu::detail {

// Rounds to the nearest integer, ties to even (the default rounding mode), for |x| < 2^22.
// Adding and subtracting 1.5 * 2^23 does it in two vectorizable instructions where
// std::nearbyint would be a libm call on baseline x86-64.
inline float round_to_nearest(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

// exp(x) for x <= 88, relative error about 2e-7 (Cephes' expf polynomial after reducing by
// ln 2); inputs below -87 give 0 (the true value is under 1.7e-38). Vectorizable.
inline float exp_vectorizable(float x) {
  const float clamped = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = round_to_nearest(clamped * 1.44269504088896341f);
  // ln 2 split in two so that n * ln2_high is exact.
  float r = clamped - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  float power_of_two;
  std::memcpy(&power_of_two, &exponent_bits, sizeof(float));
  return x < -87.0f ? 0.0f : p * power_of_two;
}

}  // namespace xf::cpu::detail
