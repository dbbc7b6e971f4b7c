// Marian's intgemm8 arithmetic (matmul.h: marian_int8_product): what intgemm's AVX2
// Int8::Multiply computes, with its own instructions where the CPU has AVX2 and written out in
// plain C++ elsewhere, so that every ISA level gives the same sums.
#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels_cpu/isa.h"

namespace xf::cpu {
namespace {

constexpr int64_t kBlock = 32;  // bytes of the inner dimension in one AVX2 register
constexpr int kLanes = 16;      // int16 lanes of vpmaddubsw's result

int32_t saturate_int16(int32_t v) { return v > 32767 ? 32767 : (v < -32768 ? -32768 : v); }

// vpsignb(w, a) times |a|: a w, except that w = -128 against a negative a stays -128.
int32_t signed_product(int8_t a, int8_t w) {
  const int32_t magnitude = a < 0 ? -a : a;
  const int32_t sign_applied = a > 0 ? w : (a == 0 ? 0 : (w == -128 ? -128 : -w));
  return magnitude * sign_applied;
}

// The 16 lanes of one 32-value block added into `lanes` (the pairs of vpmaddubsw, then vpaddsw).
inline void add_block(const int8_t* a, const int8_t* w, int32_t* lanes) {
  int32_t products[kBlock];
#pragma omp simd
  for (int64_t i = 0; i < kBlock; ++i) products[i] = signed_product(a[i], w[i]);
#pragma omp simd
  for (int j = 0; j < kLanes; ++j)
    lanes[j] = saturate_int16(lanes[j] + saturate_int16(products[2 * j] + products[2 * j + 1]));
}

// sums[c - first] = intgemm's dot of row a with weight rows c in [first, end).
XF_VECTORIZED_BODY void intgemm_dots_body(const int8_t* a, const int8_t* weights, int64_t k, int64_t first,
                                          int64_t end, int32_t* sums) {
  const int64_t whole = k / kBlock * kBlock;
  int8_t a_tail[kBlock] = {};  // a last partial block: zeros after the end, as intgemm's padded columns
  std::copy(a + whole, a + k, a_tail);
  for (int64_t c = first; c < end; ++c) {
    const int8_t* w = weights + c * k;
    int32_t lanes[kLanes] = {};
    for (int64_t block = 0; block < whole; block += kBlock) add_block(a + block, w + block, lanes);
    if (whole < k) {
      int8_t w_tail[kBlock] = {};
      std::copy(w + whole, w + k, w_tail);
      add_block(a_tail, w_tail, lanes);
    }
    int32_t total = 0;
    for (int32_t lane : lanes) total += lane;  // vpmaddwd with ones, then the horizontal sums: exact
    sums[c - first] = total;
  }
}
XF_DISPATCH_BY_ISA(intgemm_dots)

#if defined(__x86_64__)
#define XF_MARIAN_AVX2 __attribute__((target("avx2")))

// One 32-byte block into the 16 lanes: vpsignb, vpabsb, vpmaddubsw, vpaddsw.
XF_MARIAN_AVX2 inline __attribute__((always_inline)) __m256i add_block_avx2(__m256i lanes, const int8_t* a,
                                                                            const int8_t* w) {
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm256_adds_epi16(lanes, _mm256_maddubs_epi16(_mm256_abs_epi8(av), _mm256_sign_epi8(wv, av)));
}

// intgemm_dots with intgemm's instructions; the lanes summed by vpmaddwd with ones, then across.
XF_MARIAN_AVX2 void intgemm_dots_avx2(const int8_t* a, const int8_t* weights, int64_t k, int64_t first,
                                      int64_t end, int32_t* sums) {
  const int64_t whole = k / kBlock * kBlock;
  int8_t a_tail[kBlock] = {};
  std::copy(a + whole, a + k, a_tail);
  for (int64_t c = first; c < end; ++c) {
    const int8_t* w = weights + c * k;
    __m256i lanes = _mm256_setzero_si256();
    for (int64_t block = 0; block < whole; block += kBlock) lanes = add_block_avx2(lanes, a + block, w + block);
    if (whole < k) {
      int8_t w_tail[kBlock] = {};
      std::copy(w + whole, w + k, w_tail);
      lanes = add_block_avx2(lanes, a_tail, w_tail);
    }
    const __m256i pairs = _mm256_madd_epi16(lanes, _mm256_set1_epi16(1));
    const __m128i half = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    const __m128i quarter = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    sums[c - first] = _mm_cvtsi128_si32(_mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, _MM_SHUFFLE(2, 3, 0, 1))));
  }
}
#endif

// The instructions where the CPU has them (AVX2 and up), else the same sums written out.
void dots(const int8_t* a, const int8_t* weights, int64_t k, int64_t first, int64_t end, int32_t* sums) {
#if defined(__x86_64__)
  if (cpu_isa() != CpuIsa::baseline) return intgemm_dots_avx2(a, weights, k, first, end, sums);
#endif
  intgemm_dots(a, weights, k, first, end, sums);
}

// Marian's activation quantization: nearbyint(x q) clipped to +-127 (intgemm's PrepareA).
XF_VECTORIZED_BODY void quantize_with_multiplier_body(const float* x, int64_t count, float multiplier,
                                                      int8_t* quantized) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    float q = detail::round_to_nearest(x[i] * multiplier);
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
    quantized[i] = static_cast<int8_t>(q);
  }
}
XF_DISPATCH_BY_ISA(quantize_with_multiplier)

XF_VECTORIZED_BODY float absmax_body(const float* x, int64_t count) {
  float absmax = 0.0f;
#pragma omp simd reduction(max : absmax)
  for (int64_t i = 0; i < count; ++i) {
    const float magnitude = x[i] < 0.0f ? -x[i] : x[i];
    absmax = magnitude > absmax ? magnitude : absmax;
  }
  return absmax;
}
XF_DISPATCH_BY_ISA(absmax)

}  // namespace

size_t marian_int8_workspace_bytes(int64_t rows, int64_t k) {
  return static_cast<size_t>((rows * k + 63) / 64 * 64);
}

void marian_int8_product(const WeightMatrix& w, const float* x, int64_t rows, const float* bias, float* y,
                         void* workspace, int threads) {
  if (w.dtype != DType::int8 || w.layout != WeightLayout::rows)
    throw Error("marian_int8_product: int8 weights in rows expected");
  const int64_t k = w.cols, n = w.rows;
  // Marian's multiplier, 127 / max|x|; an all-zero x quantizes to zeros (y = bias).
  const float x_absmax = absmax(x, rows * k);
  const float multiplier = x_absmax > 0.0f ? 127.0f / x_absmax : 1.0f;
  auto* quantized = static_cast<int8_t*>(workspace);
  quantize_with_multiplier(x, rows * k, multiplier, quantized);
  const auto* weights = static_cast<const int8_t*>(w.data);
  // Blocks of 64 outputs of one row a task: each output is computed whole by one thread.
  constexpr int64_t kColumns = 64;
  const int64_t column_blocks = (n + kColumns - 1) / kColumns;
  detail::parallel_for(rows * column_blocks, threads, rows * n * k >= 65536, [&](int64_t task) {
    const int64_t r = task / column_blocks, first = task % column_blocks * kColumns;
    const int64_t end = std::min(n, first + kColumns);
    int32_t sums[kColumns];
    dots(quantized + r * k, weights, k, first, end, sums);
    for (int64_t c = first; c < end; ++c) {
      const float unquantize = 1.0f / (multiplier * (1.0f / w.row_scales[c]));
      const float value = static_cast<float>(sums[c - first]) * unquantize;
      y[r * n + c] = bias != nullptr ? value + bias[c] : value;
    }
  });
}

}  // namespace xf::cpu
