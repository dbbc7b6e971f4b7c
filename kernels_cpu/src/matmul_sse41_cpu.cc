// xf's int8 product kernel on 128-bit registers, for x86-64 CPUs below AVX2 (cpu_isa() baseline,
// with SSE4.1, as oneDNN's lowest level): the panel kernel of matmul_avx2_cpu.cc on xmm
// registers, every row count, on the 7-bit panels (pmaddubsw saturates as vpmaddubsw does). It
// replaces oneDNN's gemm:jit at that level, which allocated while translating (452,408 times in
// a batch-1 run of the bundled model) and held 8 MB more at its peak (docs/BENCHMARKS.md).
// x86-64 only.
#include "matmul_kernels_cpu.h"

#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace xf::cpu {
namespace {

#define XF_SSE41_TARGET __attribute__((target("sse4.1")))
#define XF_SSE41_INLINE XF_SSE41_TARGET inline __attribute__((always_inline))

// A panel's 16 columns (weight rows) as 4 registers of 4 int32 sums each.
constexpr int kQuarters = kPanelColumns / 4;

// acc[i] += x row i's 4 bytes (x_bytes[i]) times the group's 64 bytes at `group`: pairs of
// u8 x s8 products in int16 (pmaddubsw; |s8| <= 63, so no saturation), pairs of those in int32.
template <int kRows>
XF_SSE41_INLINE void int8_panel_group_sse41(const int8_t* group, const int32_t (&x_bytes)[kRows],
                                            __m128i (&acc)[kRows][kQuarters]) {
  const __m128i ones = _mm_set1_epi16(1);
  __m128i w[kQuarters];
  for (int q = 0; q < kQuarters; ++q) w[q] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 16 * q));
  for (int i = 0; i < kRows; ++i) {
    const __m128i xb = _mm_set1_epi32(x_bytes[i]);
    for (int q = 0; q < kQuarters; ++q)
      acc[i][q] = _mm_add_epi32(acc[i][q], _mm_madd_epi16(_mm_maddubs_epi16(xb, w[q]), ones));
  }
}

// y[i][j] for kRows x rows and the `columns` (<= 16) weight rows of one panel: as the AVX2
// tile, float(dot) * row scale, then times x's row scale plus the bias (a multiply and an add:
// no FMA below AVX2).
template <int kRows>
XF_SSE41_INLINE void int8_panel_tile_sse41(const uint8_t* x, int64_t k, const int8_t* panel,
                                           const int32_t* shift_sums, const float* row_scales,
                                           const float* x_scales, const float* bias, float* y, int64_t ldy,
                                           int64_t columns) {
  __m128i acc[kRows][kQuarters];
  for (auto& row : acc)
    for (auto& quarter : row) quarter = _mm_setzero_si128();
  const int64_t groups = panel_groups(k);
  for (int64_t g = 0; g < groups; ++g) {
    int32_t x_bytes[kRows] = {};
    const int64_t bytes = std::min<int64_t>(4, k - 4 * g);  // the last group zero-extended
    for (int i = 0; i < kRows; ++i) std::memcpy(&x_bytes[i], x + i * k + 4 * g, bytes);
    int8_panel_group_sse41<kRows>(panel + g * 64, x_bytes, acc);
  }
  for (int i = 0; i < kRows; ++i) {
    const __m128 x_scale = _mm_set1_ps(x_scales[i]);
    alignas(16) float row[kPanelColumns];
    for (int q = 0; q < kQuarters; ++q) {
      const __m128i sums = _mm_loadu_si128(reinterpret_cast<const __m128i*>(shift_sums + 4 * q));
      __m128 result = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(acc[i][q], sums)), _mm_loadu_ps(row_scales + 4 * q));
      result = _mm_mul_ps(result, x_scale);
      if (bias != nullptr) result = _mm_add_ps(result, _mm_loadu_ps(bias + 4 * q));
      _mm_store_ps(row + 4 * q, result);
    }
    std::memcpy(y + i * ldy, row, columns * sizeof(float));
  }
}

// Int8PanelProducts over 7-bit panels: tiles of 2 x rows (8 accumulators, 4 weight registers).
template <int64_t kFixedK>
XF_SSE41_TARGET void int8_panel_products_sse41(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                               int64_t run_time_k, int64_t rows, const int32_t* shift_sums,
                                               const float* row_scales, const float* x_scales, const float* bias,
                                               float* y, int64_t ldy) {
  const int64_t k = kFixedK != 0 ? kFixedK : run_time_k;
  for (int64_t r = 0; r < rows; r += kPanelColumns) {
    const int64_t columns = std::min(kPanelColumns, rows - r);
    const int8_t* panel = w + r / kPanelColumns * panel_bytes(k);
    alignas(16) float padded[kPanelColumns];
    const float* panel_bias = panel_bias_of(bias, r, columns, padded);
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
      int8_panel_tile_sse41<2>(x_shifted + i * k, k, panel, shift_sums + r, row_scales + r, x_scales + i, panel_bias,
                               y + i * ldy + r, ldy, columns);
    }
    if (i < m) {
      int8_panel_tile_sse41<1>(x_shifted + i * k, k, panel, shift_sums + r, row_scales + r, x_scales + i, panel_bias,
                               y + i * ldy + r, ldy, columns);
    }
  }
}

template <int64_t kFixedK>
struct Sse41Panels { static constexpr Int8PanelProducts run = int8_panel_products_sse41<kFixedK>; };

}  // namespace

Int8PanelProducts sse41_int8_panel_kernel(int64_t k) { return for_row_length<Sse41Panels>(k); }

bool cpu_has_sse41() { return __builtin_cpu_supports("sse4.1"); }

}  // namespace xf::cpu

#endif
