// xf's int8 product kernels on AVX-512 (zmm registers). Chosen by matmul_cpu.cc where cpu_isa()
// is avx512_vnni (the few-row kernel up to 16 rows, the VNNI panel kernel above) or avx512
// without VNNI, Skylake-X (the BW panel kernel on 7-bit weights above 16 rows; below,
// matmul_avx2_cpu.cc's few-row kernel). x86-64 only.
#include "matmul_kernels_cpu.h"

#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace xf::cpu {
namespace {

// GCC 12's AVX-512 headers build some intrinsics (_mm512_reduce_add_epi32, the 128-bit lane
// shuffles and broadcasts among them) on an "undefined" operand that -Wmaybe-uninitialized and
// -Wuninitialized then report inside the header.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define XF_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
// The tile's helpers are inlined so that its 16 accumulators stay in registers (GCC 12 otherwise
// writes them to the stack after every multiply).
#define XF_VNNI_INLINE XF_VNNI_TARGET inline __attribute__((always_inline))

// in its register: with the intrinsic, GCC 12 copies every accumulator before each multiply in
// a tile's loop (as many register moves as multiplies).
XF_VNNI_INLINE __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
  return acc;
}

// The four 128-bit lanes of a and b summed in pairs: (a0 + a1, a2 + a3, b0 + b1, b2 + b3).
XF_VNNI_INLINE __m512i add_lane_pairs(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane j of the result is the sum of the 16 lanes of acc[j]: a transposing tree (unpack, then
// 128-bit lane shuffles) of 45 instructions for all 16, where 16 separate horizontal sums take
// about 130; with K = 256 a dot product is only 4 dpbusd, so the sums were half the work.
XF_VNNI_INLINE __m512i sum_each_of_16(const __m512i (&acc)[16]) {
  __m512i pairs[8], quads[4];
  for (int j = 0; j < 8; ++j) {  // lane 4q+{0,1,2,3} of 128-bit lane q: partials of 2j, 2j+1
    pairs[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2 * j], acc[2 * j + 1]),
                                _mm512_unpackhi_epi32(acc[2 * j], acc[2 * j + 1]));
  }
  for (int j = 0; j < 4; ++j) {  // each 128-bit lane: partials of 4j .. 4j+3, in order
    quads[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2 * j], pairs[2 * j + 1]),
                                _mm512_unpackhi_epi64(pairs[2 * j], pairs[2 * j + 1]));
  }
  // Lane q of the result: the four 128-bit lanes of quads[q] added.
  return add_lane_pairs(add_lane_pairs(quads[0], quads[1]), add_lane_pairs(quads[2], quads[3]));
}

// kCols int32 or f32 values, repeated to fill 16 lanes.
template <int kCols>
XF_VNNI_INLINE __m512i repeat_to_16(const void* values) {
  static_assert(kCols == 16 || kCols == 8 || kCols == 4, "a tile is 16, 8 or 4 columns");
  if constexpr (kCols == 16) {
    return _mm512_loadu_si512(values);
  } else if constexpr (kCols == 8) {
    return _mm512_broadcast_i32x8(_mm256_loadu_si256(static_cast<const __m256i*>(values)));
  } else {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(values)));
  }
}

// acc[i * kCols + j] += x row i . weight row j over the 64 bytes at c (the bytes in `mask`).
template <int kRows, int kCols>
XF_VNNI_INLINE void int8_tile_step(const uint8_t* x, const int8_t* w, int64_t k, int64_t c,
                                   __mmask64 mask, __m512i (&acc)[16]) {
  __m512i xv[kRows];
  for (int i = 0; i < kRows; ++i) xv[i] = _mm512_maskz_loadu_epi8(mask, x + i * k + c);
  for (int j = 0; j < kCols; ++j) {
    const __m512i wv = _mm512_maskz_loadu_epi8(mask, w + j * k + c);
    for (int i = 0; i < kRows; ++i) {
      acc[i * kCols + j] = dpbusd(acc[i * kCols + j], xv[i], wv);
    }
  }
}

// One register tile: y[i][j] for the kRows x rows i from x and the kCols weight rows j from w
// (both of row stride k), kRows * kCols = 16 accumulators. Several x rows share each weight load
// (and several weight rows each x load), so that a product of a few rows is bound by the
// multiplies rather than the loads.
template <int kRows, int kCols>
XF_VNNI_INLINE void int8_tile_vnni(const uint8_t* x, const int8_t* w, int64_t k,
                                   const int32_t* shift_sums, const float* row_scales, float* y,
                                   int64_t ldy) {
  static_assert(kRows * kCols == 16, "a tile is 16 accumulators");
  __m512i acc[16];
  for (auto& v : acc) v = _mm512_setzero_si512();
  const int64_t full = k / 64 * 64;
  for (int64_t c = 0; c < full; c += 64) int8_tile_step<kRows, kCols>(x, w, k, c, ~0ull, acc);
  if (full < k) int8_tile_step<kRows, kCols>(x, w, k, full, ~0ull >> (64 - k % 64), acc);

  // Lane i * kCols + j holds x row i . weight row j; the kCols shifts and scales are repeated
  // for each x row.
  const __m512i dots = _mm512_sub_epi32(sum_each_of_16(acc), repeat_to_16<kCols>(shift_sums));
  alignas(64) float results[16];
  _mm512_store_ps(results, _mm512_mul_ps(_mm512_cvtepi32_ps(dots),
                                         _mm512_castsi512_ps(repeat_to_16<kCols>(row_scales))));
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) y[i * ldy + j] = results[i * kCols + j];
  }
}

// y[i][r] = float(x[i] . w[r]) * row_scales[r] for the m rows of x (shifted to u8) and `rows`
// weight rows, both of row stride k; y's row stride is ldy. Weight rows go in blocks of 16 (16 KB
// at K = 1024, kept in L1 while every x row passes over them), x rows 4, 2 or 1 at a time; the
// last rows % 16 weight rows one at a time. kFixedK, when not 0, is k known at compile time: the
// 16 weight rows are then one pointer with constant offsets, where a run-time k needs a register
// for each, more than x86-64 has (GCC then reloads them from the stack: 1.4-1.7 times slower at
// one row, xf-kernels-bench BM_StaticMatmulBundledInt8).
template <int64_t kFixedK>
XF_VNNI_TARGET void int8_row_products_vnni(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                           int64_t run_time_k, int64_t rows,
                                           const int32_t* shift_sums, const float* row_scales,
                                           float* y, int64_t ldy) {
  const int64_t k = kFixedK != 0 ? kFixedK : run_time_k;
  int64_t r = 0;
  for (; r + 16 <= rows; r += 16) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      for (int64_t j = 0; j < 16; j += 4) {
        int8_tile_vnni<4, 4>(x_shifted + i * k, w + (r + j) * k, k, shift_sums + r + j,
                             row_scales + r + j, y + i * ldy + r + j, ldy);
      }
    }
    for (; i + 2 <= m; i += 2) {
      for (int64_t j = 0; j < 16; j += 8) {
        int8_tile_vnni<2, 8>(x_shifted + i * k, w + (r + j) * k, k, shift_sums + r + j,
                             row_scales + r + j, y + i * ldy + r + j, ldy);
      }
    }
    if (i < m) {
      int8_tile_vnni<1, 16>(x_shifted + i * k, w + r * k, k, shift_sums + r, row_scales + r,
                            y + i * ldy + r, ldy);
    }
  }
  const int64_t full = k / 64 * 64;
  for (; r < rows; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      __m512i sum = _mm512_setzero_si512();
      for (int64_t c = 0; c < full; c += 64) {
        sum = _mm512_dpbusd_epi32(sum, _mm512_loadu_si512(x_shifted + i * k + c),
                                  _mm512_loadu_si512(w + r * k + c));
      }
      if (full < k) {
        const __mmask64 tail = ~0ull >> (64 - (k - full));
        sum = _mm512_dpbusd_epi32(sum, _mm512_maskz_loadu_epi8(tail, x_shifted + i * k + full),
                                  _mm512_maskz_loadu_epi8(tail, w + r * k + full));
      }
      const int32_t dot = _mm512_reduce_add_epi32(sum) - shift_sums[r];
      y[i * ldy + r] = static_cast<float>(dot) * row_scales[r];
    }
  }
}

// AVX-512 at more than 16 rows: the weights in the panel layout of int8_panel_products_avx2
// (panel_bytes), where one group of 4 columns of K is 64 bytes, one zmm. A tile is kRows x rows (up to 8) by kPanels panels (1 or 2: 32 output columns): each
// group, kPanels weight loads and kRows broadcasts of 4 x bytes feed kRows * kPanels vpdpbusd,
// whose 16 int32 lanes are 16 output columns (no sums across lanes, one store a row). Replaces
// oneDNN 2.6's gemm:jit, which added the u8 shift's compensation in a scalar loop over the
// output on every call (20% of a batch-32 beam-4 translation of a base model) and allocated.
// The epilogue is int8_panel_tile's: the same f32 operations as the row kernel followed by
// scale_rows_add_bias, so a row's result does not depend on the row count. Dot::add adds the
// 4-byte dot products: VNNI's vpdpbusd on the full-range weights, or without VNNI (Skylake-X)
// vpmaddubsw and vpmaddwd by ones on the 7-bit copy, as at AVX2. Both in asm, so that one build
// (AVX-512 BW, no VNNI in the compiler's target) serves both; both return acc rather than take
// it by reference, with which GCC 12 kept every accumulator on the stack.
#define XF_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq")))
#define XF_AVX512_INLINE XF_AVX512_TARGET inline __attribute__((always_inline))
struct Vnni512Dot {
  XF_AVX512_INLINE static __m512i add(__m512i acc, __m512i u8, __m512i s8, __m512i) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
    return acc;
  }
};
struct Avx512BwDot {
  XF_AVX512_INLINE static __m512i add(__m512i acc, __m512i u8, __m512i s8, __m512i ones) {
    __m512i pairs;
    asm(XF_ADD_BYTE_PRODUCTS_ASM
        : [acc] "+v"(acc), [pairs] "=&v"(pairs)
        : [u8] "v"(u8), [s8] "v"(s8), [ones] "v"(ones));
    return acc;
  }
};
template <typename Dot, int kRows, int kPanels>
XF_AVX512_INLINE void int8_512_panel_tile(const uint8_t* x, int64_t k, const int8_t* panel,
                                          const int32_t* shift_sums, const float* row_scales,
                                          const float* x_scales, const float* bias, float* y,
                                          int64_t ldy, int64_t columns) {
  __m512i acc[kRows][kPanels];
  for (auto& row : acc) {
    for (auto& v : row) v = _mm512_setzero_si512();
  }
  const __m512i ones = _mm512_set1_epi16(1);
  const int64_t stride = panel_bytes(k);
  const int64_t full = k / 4;
  for (int64_t g = 0; g < full; ++g) {
    __m512i w[kPanels];
    for (int p = 0; p < kPanels; ++p) w[p] = _mm512_loadu_si512(panel + p * stride + g * 64);
    for (int i = 0; i < kRows; ++i) {
      int32_t bytes;
      std::memcpy(&bytes, x + i * k + 4 * g, 4);
      const __m512i xb = _mm512_set1_epi32(bytes);
      for (int p = 0; p < kPanels; ++p) acc[i][p] = Dot::add(acc[i][p], xb, w[p], ones);
    }
  }
  if (full * 4 < k) {  // the last k % 4 bytes, zero-extended (their weights are zero-padded)
    __m512i w[kPanels];
    for (int p = 0; p < kPanels; ++p) w[p] = _mm512_loadu_si512(panel + p * stride + full * 64);
    for (int i = 0; i < kRows; ++i) {
      int32_t bytes = 0;
      std::memcpy(&bytes, x + i * k + 4 * full, k - 4 * full);
      const __m512i xb = _mm512_set1_epi32(bytes);
      for (int p = 0; p < kPanels; ++p) acc[i][p] = Dot::add(acc[i][p], xb, w[p], ones);
    }
  }
  for (int p = 0; p < kPanels; ++p) {
    const int64_t first = p * kPanelColumns;
    const int64_t count = std::clamp<int64_t>(columns - first, 0, kPanelColumns);
    const __mmask16 store = static_cast<__mmask16>((1u << count) - 1);
    const __m512i sums = _mm512_loadu_si512(shift_sums + first);
    const __m512 scales = _mm512_loadu_ps(row_scales + first);
    const __m512 bias_values = bias != nullptr ? _mm512_maskz_loadu_ps(store, bias + first)
                                               : _mm512_setzero_ps();
    for (int i = 0; i < kRows; ++i) {
      const __m512 x_scale = _mm512_set1_ps(x_scales[i]);
      __m512 result = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][p], sums)), scales);
      result = bias != nullptr ? _mm512_fmadd_ps(result, x_scale, bias_values)
                               : _mm512_mul_ps(result, x_scale);
      _mm512_mask_storeu_ps(y + i * ldy + first, store, result);
    }
  }
}

// kRows x rows against the one or two panels (`columns` <= 32 output columns) at panel.
template <typename Dot, int kRows>
XF_AVX512_INLINE void int8_512_panel_rows(const uint8_t* x, int64_t k, const int8_t* panel,
                                          const int32_t* shift_sums, const float* row_scales,
                                          const float* x_scales, const float* bias, float* y,
                                          int64_t ldy, int64_t columns) {
  if (columns > kPanelColumns) {
    int8_512_panel_tile<Dot, kRows, 2>(x, k, panel, shift_sums, row_scales, x_scales, bias, y,
                                       ldy, columns);
  } else {
    int8_512_panel_tile<Dot, kRows, 1>(x, k, panel, shift_sums, row_scales, x_scales, bias, y,
                                       ldy, columns);
  }
}

// Int8PanelProducts: w is the first panel of `rows` weight rows, shift_sums and row_scales are
// padded to whole panels, x_scales has m values, bias (when not null) `rows`.
template <typename Dot, int64_t kFixedK>
XF_AVX512_TARGET void int8_panel_products_512(const uint8_t* x_shifted, int64_t m,
                                              const int8_t* w, int64_t run_time_k, int64_t rows,
                                              const int32_t* shift_sums, const float* row_scales,
                                              const float* x_scales, const float* bias, float* y,
                                              int64_t ldy) {
  const int64_t k = kFixedK != 0 ? kFixedK : run_time_k;
  for (int64_t r = 0; r < rows; r += 2 * kPanelColumns) {
    const int64_t columns = std::min(2 * kPanelColumns, rows - r);
    const int8_t* panel = w + r / kPanelColumns * panel_bytes(k);
    const float* panel_bias = bias != nullptr ? bias + r : nullptr;
    float* y_panel = y + r;
    const int32_t* sums = shift_sums + r;
    const float* scales = row_scales + r;
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
      int8_512_panel_rows<Dot, 8>(x_shifted + i * k, k, panel, sums, scales, x_scales + i, panel_bias,
                              y_panel + i * ldy, ldy, columns);
    }
    const uint8_t* x_rest = x_shifted + i * k;
    const float* x_scales_rest = x_scales + i;
    float* y_rest = y_panel + i * ldy;
    switch (m - i) {
#define XF_VNNI_PANEL_REST(rest)                                                                \
  case rest:                                                                                    \
    int8_512_panel_rows<Dot, rest>(x_rest, k, panel, sums, scales, x_scales_rest, panel_bias, y_rest, \
                               ldy, columns);                                                   \
    break;
      XF_VNNI_PANEL_REST(7)
      XF_VNNI_PANEL_REST(6)
      XF_VNNI_PANEL_REST(5)
      XF_VNNI_PANEL_REST(4)
      XF_VNNI_PANEL_REST(3)
      XF_VNNI_PANEL_REST(2)
      XF_VNNI_PANEL_REST(1)
#undef XF_VNNI_PANEL_REST
      default: break;
    }
  }
}

template <int64_t kFixedK>
struct Vnni512 { static constexpr Int8RowProducts run = int8_row_products_vnni<kFixedK>; };
template <int64_t kFixedK>
struct Vnni512Panels {
  static constexpr Int8PanelProducts run = int8_panel_products_512<Vnni512Dot, kFixedK>;
};
template <int64_t kFixedK>
struct Avx512Panels {
  static constexpr Int8PanelProducts run = int8_panel_products_512<Avx512BwDot, kFixedK>;
};

#pragma GCC diagnostic pop
#undef XF_VNNI_INLINE
#undef XF_VNNI_TARGET
#undef XF_AVX512_INLINE
#undef XF_AVX512_TARGET

}  // namespace

Int8RowProducts avx512_vnni_int8_row_kernel(int64_t k) { return for_row_length<Vnni512>(k); }
Int8PanelProducts avx512_vnni_int8_panel_kernel(int64_t k) {
  return for_row_length<Vnni512Panels>(k);
}
Int8PanelProducts avx512_bw_int8_panel_kernel(int64_t k) { return for_row_length<Avx512Panels>(k); }

}  // namespace xf::cpu
#endif
