#pragma once
// Helpers for the CPU kernels' hot loops: plain scalar code that compilers vectorize inside
// `#pragma omp simd` loops on any architecture (no intrinsics, no libm calls).
// In such loops write maxima and clamps as `a > b ? a : b`: GCC 12 leaves a loop with
// std::max scalar ("control flow in loop"); the ternary it vectorizes.
#include <cstdint>
#include <cstring>

// A hot function is written as NAME_body marked XF_VECTORIZED_BODY, followed by
// XF_DISPATCH_BY_ISA(NAME), which defines NAME. On x86-64 with GCC or Clang the body is then
// compiled three times (x86-64-v4: AVX-512; x86-64-v3: AVX2 + FMA; baseline SSE2) and NAME calls
// the build for cpu_isa() (xf/kernels_cpu/isa.h): the CPU's level capped by oneDNN's
// ONEDNN_MAX_CPU_ISA, so one variable caps oneDNN and these loops alike. (GCC's target_clones,
// used before, choose by the CPU alone, at load time.) So the library needs no -march flag.
// Elsewhere (aarch64: NEON is baseline), or built with -march=native (XF_NO_MULTIVERSION), NAME
// is the body itself.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(XF_NO_MULTIVERSION) && !defined(__AVX512F__)
#include <utility>

#include "xf/kernels_cpu/isa.h"

// Inlined into each build below, so that its loops are compiled for that build's instructions.
#define XF_VECTORIZED_BODY inline __attribute__((always_inline))
#define XF_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define XF_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))

namespace xf::cpu::detail {

// The three builds of Body and the choice among them, made once.
template <auto Body>
struct ByIsa;
template <typename R, typename... A, R (*Body)(A...)>
struct ByIsa<Body> {
  XF_TARGET_AVX512 static R avx512(A... a) { return Body(a...); }
  XF_TARGET_AVX2 static R avx2(A... a) { return Body(a...); }
  static R baseline(A... a) { return Body(a...); }
  static R call(A... a) {
    static R (*const chosen)(A...) = cpu_isa() >= CpuIsa::avx512 ? avx512
                                     : cpu_isa() >= CpuIsa::avx2 ? avx2
                                                                 : baseline;
    return chosen(a...);
  }
};

}  // namespace xf::cpu::detail

#define XF_DISPATCH_BY_ISA(name)                                                   \
  template <typename... Args>                                                      \
  inline decltype(auto) name(Args&&... args) {                                     \
    return ::xf::cpu::detail::ByIsa<name##_body>::call(std::forward<Args>(args)...); \
  }
#else
#include <utility>

#define XF_VECTORIZED_BODY inline
#define XF_DISPATCH_BY_ISA(name)                          \
  template <typename... Args>                             \
  inline decltype(auto) name(Args&&... args) {            \
    return name##_body(std::forward<Args>(args)...);      \
  }
#endif

namespace xf::cpu::detail {

// max |x[i]| over count values (0 for none); convert_cpu.cc, vectorized by level.
float absmax_of(const float* x, int64_t count);

// sum of a[i] * b[i]. Inline, not XF_VECTORIZED: it is inlined into the callers' clones, where a
// call per dot product through the clone dispatcher would cost as much as a 64-term dot.
inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Rounds to the nearest integer, ties to even (the default rounding mode), for |x| < 2^22.
// Adding and subtracting 1.5 * 2^23 does it in two vectorizable instructions where
// std::nearbyint would be a libm call on baseline x86-64.
inline float round_to_nearest(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

// condition ? if_true : if_false by a bit mask. Written as `?:`, the clamps of
// exp_vectorizable became branches (GCC threads each into its own copy of the polynomial, on
// constants), which the AVX2 build cannot turn into selects without -fno-trapping-math: its
// loops stayed scalar (log_softmax_top_k was 19% of an int8 batch-32 beam-4 translation at
// AVX2 under perf, 5-7% after; AVX-512 masks them). The same values, NaN included.
inline float select_bits(bool condition, float if_true, float if_false) {
  const int32_t mask = -static_cast<int32_t>(condition);  // all ones or zero
  return __builtin_bit_cast(float, (__builtin_bit_cast(int32_t, if_true) & mask) |
                                       (__builtin_bit_cast(int32_t, if_false) & ~mask));
}

// Cephes' expf polynomial after reducing by ln 2, for x in [-87, 88].
inline float exp_of_clamped(float clamped) {
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
  const float power_of_two = __builtin_bit_cast(float, exponent_bits);
  return p * power_of_two;
}

// exp(x) for x <= 88, relative error about 2e-7 (Cephes' expf polynomial after reducing by
// ln 2); inputs below -87 give 0 (the true value is under 1.7e-38). Vectorizable.
inline float exp_vectorizable(float x) {
  const float at_least = select_bits(x < -87.0f, -87.0f, x);
  const float clamped = select_bits(at_least > 88.0f, 88.0f, at_least);
  return select_bits(x < -87.0f, 0.0f, exp_of_clamped(clamped));
}

// exp_vectorizable(x) for x <= 0 (or NaN), bit for bit, without the upper clamp that cannot
// apply: a softmax's exp(score - max). Vectorizable.
inline float exp_non_positive(float x) {
  return select_bits(x < -87.0f, 0.0f, exp_of_clamped(select_bits(x < -87.0f, -87.0f, x)));
}

}  // namespace xf::cpu::detail
