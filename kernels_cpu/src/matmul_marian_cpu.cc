// Marian's intgemm8 arithmetic (matmul.h: marian_int8_product): what intgemm's Int8::Multiply
// computes on AVX2, AVX512BW or AVX512VNNI, with its own instructions where the CPU has AVX2
// and written out in plain C++ elsewhere, so that every ISA level gives the same sums.
#include <algorithm>
#include <cmath>
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

constexpr int64_t kChunk = 32;  // bytes of the inner dimension in one AVX2 register
constexpr int kLanes = 16;      // int16 lanes of vpmaddubsw's result on it

int32_t saturate_int16(int32_t v) { return v > 32767 ? 32767 : (v < -32768 ? -32768 : v); }

// vpsignb(w, a) times |a|: a w, except that w = -128 against a negative a stays -128.
int32_t signed_product(int8_t a, int8_t w) {
  const int32_t magnitude = a < 0 ? -a : a;
  const int32_t sign_applied = a > 0 ? w : (a == 0 ? 0 : (w == -128 ? -128 : -w));
  return magnitude * sign_applied;
}

// How intgemm's kernels add a dot product's pair products (vpmaddubsw on |a| and W signed by a):
// AVX2 into 16 int16 lanes, one 32-byte chunk after another, each addition saturating (vpaddsw);
// AVX512BW the same on 64-byte registers, i.e. even chunks into lanes 0-15 and odd ones into
// lanes 16-31; AVX512VNNI in int32 (vpdpbusds), exactly. Then every lane is summed in int32.
struct Summing {
  int lane_sets;  // 1 (AVX2) or 2 (AVX512BW)
  bool saturate;  // false: AVX512VNNI
};
Summing summing_of(IntgemmKernel kernel) {
  switch (kernel) {
    case IntgemmKernel::avx2: return {1, true};
    case IntgemmKernel::avx512bw: return {2, true};
    case IntgemmKernel::avx512vnni: return {1, false};
  }
  throw Error("marian_int8_product: unknown intgemm kernel");
}

// sums[c - first] = intgemm's dot of row a with weight rows c in [first, end), written out (CPUs
// below AVX2; the same sums as the instructions).
void intgemm_dots_plain(Summing summing, const int8_t* a, const int8_t* weights, int64_t k, int64_t first,
                        int64_t end, int32_t* sums) {
  for (int64_t c = first; c < end; ++c) {
    const int8_t* w = weights + c * k;
    int32_t lanes[2][kLanes] = {};
    int32_t exact = 0;
    for (int64_t chunk = 0; chunk * kChunk < k; ++chunk) {
      int32_t* set = lanes[chunk % summing.lane_sets];
      for (int j = 0; j < kLanes; ++j) {
        int32_t pair = 0;  // zeros past the end, as intgemm's padded columns
        for (int64_t i = chunk * kChunk + 2 * j; i < std::min(chunk * kChunk + 2 * j + 2, k); ++i)
          pair += signed_product(a[i], w[i]);
        if (summing.saturate) {
          set[j] = saturate_int16(set[j] + pair);
        } else {
          exact += pair;
        }
      }
    }
    int32_t total = exact;
    for (const auto& set : lanes)
      for (int32_t lane : set) total += lane;  // vpmaddwd with ones, then the horizontal sums: exact
    sums[c - first] = total;
  }
}

#if defined(__x86_64__)
#define XF_MARIAN_AVX2 __attribute__((target("avx2")))

// The pair products of one 32-byte chunk: vpsignb, vpabsb, vpmaddubsw (which cannot saturate
// here: 2 x 127 x 128 fits int16).
XF_MARIAN_AVX2 inline __attribute__((always_inline)) __m256i chunk_pairs(const int8_t* a, const int8_t* w) {
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm256_maddubs_epi16(_mm256_abs_epi8(av), _mm256_sign_epi8(wv, av));
}

// intgemm_dots_plain with intgemm's instructions on 256-bit registers (each of its kernels' sums
// are made of these: an AVX512BW register is two chunks side by side).
template <int kLaneSets, bool kSaturate>
XF_MARIAN_AVX2 void intgemm_dots_avx2(const int8_t* a, const int8_t* weights, int64_t k, int64_t first,
                                      int64_t end, int32_t* sums) {
  const int64_t whole = k / kChunk;  // chunks before a partial last one
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  int8_t a_tail[kChunk] = {};
  std::copy(a + whole * kChunk, a + k, a_tail);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t c = first; c < end; ++c) {
    const int8_t* w = weights + c * k;
    int8_t w_tail[kChunk] = {};
    std::copy(w + whole * kChunk, w + k, w_tail);
    __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256(), exact = _mm256_setzero_si256();
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const __m256i pairs = chunk < whole ? chunk_pairs(a + chunk * kChunk, w + chunk * kChunk) : chunk_pairs(a_tail, w_tail);
      if constexpr (!kSaturate) {
        exact = _mm256_add_epi32(exact, _mm256_madd_epi16(pairs, ones));
      } else if (kLaneSets == 2 && chunk % 2 == 1) {
        odd = _mm256_adds_epi16(odd, pairs);
      } else {
        even = _mm256_adds_epi16(even, pairs);
      }
    }
    const __m256i total = kSaturate ? _mm256_add_epi32(_mm256_madd_epi16(even, ones), _mm256_madd_epi16(odd, ones)) : exact;
    const __m128i half = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    const __m128i quarter = _mm_add_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    sums[c - first] = _mm_cvtsi128_si32(_mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, _MM_SHUFFLE(2, 3, 0, 1))));
  }
}
#endif

// The instructions where the CPU has them (AVX2 and up), else the same sums written out.
void intgemm_dots(IntgemmKernel kernel, const int8_t* a, const int8_t* weights, int64_t k, int64_t first,
                  int64_t end, int32_t* sums) {
#if defined(__x86_64__)
  if (cpu_isa() != CpuIsa::baseline) {
    switch (kernel) {
      case IntgemmKernel::avx2: return intgemm_dots_avx2<1, true>(a, weights, k, first, end, sums);
      case IntgemmKernel::avx512bw: return intgemm_dots_avx2<2, true>(a, weights, k, first, end, sums);
      case IntgemmKernel::avx512vnni: return intgemm_dots_avx2<1, false>(a, weights, k, first, end, sums);
    }
  }
#endif
  intgemm_dots_plain(summing_of(kernel), a, weights, k, first, end, sums);
}

// Marian's activation quantization: nearbyint(x q) clipped to +-127 (intgemm's PrepareA), by
// std::nearbyint (vroundps, frinti) rather than the kernels' round_to_nearest, whose add a
// compiler would fuse with x q into one FMA (GCC does across statements, on x86 where the CPU
// has FMA and always on aarch64), rounding x q once with it.
XF_VECTORIZED_BODY void quantize_with_multiplier_body(const float* x, int64_t count, float multiplier,
                                                      int8_t* quantized) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    float q = std::nearbyint(x[i] * multiplier);
    q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
    quantized[i] = static_cast<int8_t>(q);
  }
}
XF_DISPATCH_BY_ISA(quantize_with_multiplier)


}  // namespace

size_t marian_int8_workspace_bytes(int64_t rows, int64_t k) {
  return static_cast<size_t>((rows * k + 63) / 64 * 64);
}

void marian_int8_product(const WeightMatrix& w, const float* x, int64_t rows, const float* bias, float* y,
                         void* workspace, int threads, IntgemmKernel kernel) {
  if (w.dtype != DType::int8 || w.layout != WeightLayout::rows)
    throw Error("marian_int8_product: int8 weights in rows expected");
  const int64_t k = w.cols, n = w.rows;
  // Marian's multiplier, 127 / max|x|; an all-zero x quantizes to zeros (y = bias).
  const float x_absmax = detail::absmax_of(x, rows * k);
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
    intgemm_dots(kernel, quantized + r * k, weights, k, first, end, sums);
    float* out = y + r * n;
    for (int64_t c = first; c < end; ++c)
      out[c] = static_cast<float>(sums[c - first]) * (1.0f / (multiplier * (1.0f / w.row_scales[c])));
    // The bias in a second pass over the stored products, as intgemm adds it after its multiply:
    // in one expression a compiler would fuse the two into an FMA (GCC does across statements).
    if (bias != nullptr)
      for (int64_t c = first; c < end; ++c) out[c] += bias[c];
  });
}

}  // namespace xf::cpu
