// xf's product kernels on 256-bit registers. Chosen by matmul_cpu.cc where cpu_isa() is avx2 (the
// int8 panel kernel at every row count, on 7-bit weights; the f32 panel kernel), avx2_vnni (the
// few-row int8 kernel with vpdpbusd on ymm; the f32 panel kernel) or avx512 without VNNI (the
// few-row int8 kernel up to 16 rows, on 7-bit weights). x86-64 only.
#include "matmul_kernels_cpu.h"

#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace xf::cpu {
namespace {

// matmul_avx512_cpu.cc's few-row VNNI kernel on 256-bit registers, for CPUs without AVX-512 VNNI:
// AVX2 and AVX-VNNI (vpdpbusd on ymm: Alder Lake and later, Zen 5). 16 ymm registers instead of 32
// zmm, so a tile is 8 accumulators (4 x rows by 2 weight rows, 2 by 4, 1 by 8), summed across lanes
// by one hadd tree. Plain AVX2 has no 4-byte dot product: pairs of u8 x s8 products are added in
// int16 (vpmaddubsw), then pairs of those in int32 (vpmaddwd by ones). vpmaddubsw saturates, so
// there the kernel reads the 7-bit weight copy that oneDNN's AVX2 path reads (2 * 255 * 63 fits
// int16): on both paths the int32 dot product of the same bytes is exact, and a row's result is bit
// for bit the same whichever ran.
#define XF_AVX2_TARGET __attribute__((target("avx2,fma")))
#define XF_AVX2_INLINE XF_AVX2_TARGET inline __attribute__((always_inline))

// acc + the dot products of 4-byte groups of u8 and s8 (|s8| <= 63: no int16 saturation).
struct Avx2Dot {
  XF_AVX2_INLINE static __m256i dot(__m256i acc, __m256i u8, __m256i s8) {
    const __m256i pairs = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};
// The same in one instruction (AVX-VNNI's VEX-encoded vpdpbusd), any s8. Inline asm for the
// reason of the AVX-512 dpbusd above; being asm, it needs no "avxvnni" target, which would keep
// GCC from inlining it into the AVX2 code around it.
struct AvxVnniDot {
  XF_AVX2_INLINE static __m256i dot(__m256i acc, __m256i u8, __m256i s8) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u8), "xm"(s8));
    return acc;
  }
};

// Lane j of the result is the sum of the 8 lanes of acc[j].
XF_AVX2_INLINE __m256i sum_each_of_8(const __m256i (&acc)[8]) {
  const __m256i s01 = _mm256_hadd_epi32(acc[0], acc[1]), s23 = _mm256_hadd_epi32(acc[2], acc[3]);
  const __m256i s45 = _mm256_hadd_epi32(acc[4], acc[5]), s67 = _mm256_hadd_epi32(acc[6], acc[7]);
  // Per 128-bit half: the half-sums of acc 0..3 (t0) and 4..7 (t1).
  const __m256i t0 = _mm256_hadd_epi32(s01, s23), t1 = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                          _mm256_permute2x128_si256(t0, t1, 0x31));
}

// kCols int32 or f32 values, repeated to fill 8 lanes.
template <int kCols>
XF_AVX2_INLINE __m256i repeat_to_8(const void* values) {
  static_assert(kCols == 8 || kCols == 4 || kCols == 2, "a tile is 8, 4 or 2 columns");
  if constexpr (kCols == 8) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(values));
  } else if constexpr (kCols == 4) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(values)));
  } else {
    int64_t pair;
    std::memcpy(&pair, values, sizeof pair);
    return _mm256_set1_epi64x(pair);
  }
}

// One register tile of kRows x rows by kCols weight rows (kRows * kCols = 8), as int8_tile_vnni;
// the k % 32 bytes past the last full step are added in scalar code.
template <typename Dot, int kRows, int kCols>
XF_AVX2_INLINE void int8_tile_ymm(const uint8_t* x, const int8_t* w, int64_t k,
                                  const int32_t* shift_sums, const float* row_scales, float* y,
                                  int64_t ldy) {
  static_assert(kRows * kCols == 8, "a tile is 8 accumulators");
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  const int64_t full = k / 32 * 32;
  for (int64_t c = 0; c < full; c += 32) {
    __m256i xv[kRows];
    for (int i = 0; i < kRows; ++i) {
      xv[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * k + c));
    }
    for (int j = 0; j < kCols; ++j) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * k + c));
      for (int i = 0; i < kRows; ++i) acc[i * kCols + j] = Dot::dot(acc[i * kCols + j], xv[i], wv);
    }
  }
  alignas(32) int32_t dots[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(dots),
                     _mm256_sub_epi32(sum_each_of_8(acc), repeat_to_8<kCols>(shift_sums)));
  if (full < k) {
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kCols; ++j) {
        int32_t tail = 0;
        for (int64_t c = full; c < k; ++c) tail += int32_t{x[i * k + c]} * w[j * k + c];
        dots[i * kCols + j] += tail;
      }
    }
  }
  alignas(32) float results[8];
  _mm256_store_ps(results,
                  _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(dots))),
                                _mm256_castsi256_ps(repeat_to_8<kCols>(row_scales))));
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) y[i * ldy + j] = results[i * kCols + j];
  }
}

// int8_row_products_vnni's loops on 256-bit tiles: weight rows in blocks of 8, x rows 4, 2 or 1
// at a time, the last rows % 8 weight rows one at a time (a tile of one x row and one weight row
// repeated would waste 7 accumulators; this is the rare case of N % 8).
template <typename Dot, int64_t kFixedK>
XF_AVX2_INLINE void int8_row_products_ymm(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                          int64_t run_time_k, int64_t rows,
                                          const int32_t* shift_sums, const float* row_scales,
                                          float* y, int64_t ldy) {
  const int64_t k = kFixedK != 0 ? kFixedK : run_time_k;
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      for (int64_t j = 0; j < 8; j += 2) {
        int8_tile_ymm<Dot, 4, 2>(x_shifted + i * k, w + (r + j) * k, k, shift_sums + r + j,
                                 row_scales + r + j, y + i * ldy + r + j, ldy);
      }
    }
    for (; i + 2 <= m; i += 2) {
      for (int64_t j = 0; j < 8; j += 4) {
        int8_tile_ymm<Dot, 2, 4>(x_shifted + i * k, w + (r + j) * k, k, shift_sums + r + j,
                                 row_scales + r + j, y + i * ldy + r + j, ldy);
      }
    }
    if (i < m) {
      int8_tile_ymm<Dot, 1, 8>(x_shifted + i * k, w + r * k, k, shift_sums + r, row_scales + r,
                               y + i * ldy + r, ldy);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      int32_t dot = -shift_sums[r];
      for (int64_t c = 0; c < k; ++c) dot += int32_t{x_shifted[i * k + c]} * w[r * k + c];
      y[i * ldy + r] = static_cast<float>(dot) * row_scales[r];
    }
  }
}

// The kernel with the dot product of the CPU at hand (Avx2Dot or AvxVnniDot).
template <typename Dot, int64_t kFixedK>
XF_AVX2_TARGET void int8_row_products_avx2(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                           int64_t k, int64_t rows, const int32_t* shift_sums,
                                           const float* row_scales, float* y, int64_t ldy) {
  int8_row_products_ymm<Dot, kFixedK>(x_shifted, m, w, k, rows, shift_sums, row_scales, y, ldy);
}

// Plain AVX2, any row count: the 7-bit weight copy laid out in panels (panel_bytes; made at plan
// time instead of the row-major copy). Each x row's 4 bytes of a group are broadcast and
// multiplied with the group's 64 bytes (vpmaddubsw, then vpmaddwd by ones), so the 8 int32 lanes
// of an accumulator are 8 output columns: a tile of 4 x rows by 16 columns is 8 accumulators,
// with no sums across lanes (the row kernel's hadd tree) and one contiguous store a row.
// x is 7-bit too at this level (int8_x_max_level() 63, shifted by 64 to u8 1..127): a pair
// product is at most 2 * 127 * 63 = 16,002, so a tile adds two groups' pair products in int16
// (vpaddw) before one vpmaddwd widens them: 3 multiplies a row and 2 groups in place of 4.
// The int32 dot products stay exact. shift_sums are every kernel's 128 * sum(w): halved here.

// acc += pairs of u8 x s8 products (vpmaddubsw), added in pairs into int32 (vpmaddwd by ones).
// Inline asm so that acc is updated in its register: with intrinsics GCC 12 copied accumulators
// between registers and spilled one to the stack in the 4-row tile.
XF_AVX2_INLINE void add_byte_products(__m256i& acc, __m256i u8, __m256i s8, __m256i ones) {
  __m256i pairs;
  asm(XF_ADD_BYTE_PRODUCTS_ASM
      : [acc] "+x"(acc), [pairs] "=&x"(pairs)
      : [u8] "x"(u8), [s8] "x"(s8), [ones] "x"(ones));
}

// acc[i] += x row i's 4 bytes (x_bytes[i]) times the group's 64 bytes at `group`.
template <int kRows>
XF_AVX2_INLINE void int8_panel_group(const int8_t* group, const int32_t (&x_bytes)[kRows],
                                     __m256i (&acc)[kRows][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32));
  for (int i = 0; i < kRows; ++i) {
    const __m256i xb = _mm256_set1_epi32(x_bytes[i]);
    add_byte_products(acc[i][0], xb, w0, ones);
    add_byte_products(acc[i][1], xb, w1, ones);
  }
}

// acc[i] += x row i's bytes of two consecutive groups (x_bytes[i][0], [1]) times the two groups'
// 128 bytes at `groups`, each group's pair products added to the other's in int16 (7-bit x and
// weights: no overflow) and widened once.
template <int kRows>
XF_AVX2_INLINE void int8_panel_group_pair(const int8_t* groups, const int32_t (&x_bytes)[kRows][2],
                                          __m256i (&acc)[kRows][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i w[4];
  for (int q = 0; q < 4; ++q) w[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(groups + 32 * q));
  for (int i = 0; i < kRows; ++i) {
    const __m256i first = _mm256_set1_epi32(x_bytes[i][0]), second = _mm256_set1_epi32(x_bytes[i][1]);
    for (int h = 0; h < 2; ++h) {
      const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(first, w[h]),
                                             _mm256_maddubs_epi16(second, w[h + 2]));
      acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(pairs, ones));
    }
  }
}

// The 4-row tile's loop over the first `groups` groups, two groups an iteration, in one asm
// block: with intrinsics (and with add_byte_products alone in asm) GCC 12 copied accumulators
// between registers, reloaded weights and spilled one accumulator to the stack each group, and
// the loop ran at 0.7 of the speed of MKL's AVX2 s8u8s32 kernel on the same instructions (perf,
// 2-core Xeon, AVX2 cap). An iteration is 4 weight loads (ymm0-3: groups g and g + 1, columns
// 0-7 and 8-15), 8 broadcasts (ymm4-5) and for each row and 8 columns 2 vpmaddubsw, a vpaddw of
// the two groups' pair products (7-bit x and weights: no int16 overflow, see above), a vpmaddwd by
// ones (read from memory: all 16 ymm registers are taken) and a vpaddd; products in ymm6-7, the
// 8 accumulators where GCC puts them. An odd last group goes alone. `prefetch` walks a panel's
// bytes beside `panel`, one line a group (int8_panel_products_avx2).
XF_AVX2_INLINE void int8_panel_groups_4_rows(const uint8_t* x, int64_t k, const int8_t* panel,
                                             const int8_t* prefetch, int64_t groups,
                                             __m256i (&acc)[4][2]) {
  const int64_t pairs = groups / 2;
  const uint8_t* x0 = x;
  const uint8_t* x2 = x + 2 * k;
  const int8_t* w = panel;
  if (pairs > 0) {
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t* x_end = x + 8 * pairs;
    asm volatile(
      "1:\n\t"
      "prefetcht2 (%[prefetch])\n\t"
      "prefetcht2 64(%[prefetch])\n\t"
      "vmovdqu (%[w]), %%ymm0\n\t"
      "vmovdqu 32(%[w]), %%ymm1\n\t"
      "vmovdqu 64(%[w]), %%ymm2\n\t"
      "vmovdqu 96(%[w]), %%ymm3\n\t"
      "vpbroadcastd (%[x0]), %%ymm4\n\t"
      "vpbroadcastd 4(%[x0]), %%ymm5\n\t"
      "vpmaddubsw %%ymm0, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm2, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a00], %[a00]\n\t"
      "vpmaddubsw %%ymm1, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm3, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a01], %[a01]\n\t"
      "vpbroadcastd (%[x0],%[k]), %%ymm4\n\t"
      "vpbroadcastd 4(%[x0],%[k]), %%ymm5\n\t"
      "vpmaddubsw %%ymm0, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm2, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a10], %[a10]\n\t"
      "vpmaddubsw %%ymm1, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm3, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a11], %[a11]\n\t"
      "vpbroadcastd (%[x2]), %%ymm4\n\t"
      "vpbroadcastd 4(%[x2]), %%ymm5\n\t"
      "vpmaddubsw %%ymm0, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm2, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a20], %[a20]\n\t"
      "vpmaddubsw %%ymm1, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm3, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a21], %[a21]\n\t"
      "vpbroadcastd (%[x2],%[k]), %%ymm4\n\t"
      "vpbroadcastd 4(%[x2],%[k]), %%ymm5\n\t"
      "vpmaddubsw %%ymm0, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm2, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a30], %[a30]\n\t"
      "vpmaddubsw %%ymm1, %%ymm4, %%ymm6\n\t"
      "vpmaddubsw %%ymm3, %%ymm5, %%ymm7\n\t"
      "vpaddw %%ymm7, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %[ones], %%ymm6, %%ymm6\n\t"
      "vpaddd %%ymm6, %[a31], %[a31]\n\t"
      "add $128, %[w]\n\t"
      "add $128, %[prefetch]\n\t"
      "add $8, %[x0]\n\t"
      "add $8, %[x2]\n\t"
      "cmp %[x_end], %[x0]\n\t"
      "jne 1b"
      : [a00] "+x"(acc[0][0]), [a01] "+x"(acc[0][1]), [a10] "+x"(acc[1][0]),
        [a11] "+x"(acc[1][1]), [a20] "+x"(acc[2][0]), [a21] "+x"(acc[2][1]),
        [a30] "+x"(acc[3][0]), [a31] "+x"(acc[3][1]), [w] "+r"(w), [prefetch] "+r"(prefetch),
        [x0] "+r"(x0), [x2] "+r"(x2)
      : [k] "r"(k), [x_end] "r"(x_end), [ones] "m"(ones)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7");
  }
  if (groups % 2 != 0) {  // w and x0 are at the last group
    int32_t x_bytes[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&x_bytes[i], x0 + i * k, 4);
    int8_panel_group<4>(w, x_bytes, acc);
  }
}

// y[i][j] for kRows x rows and the `columns` (<= 16) weight rows of one panel.
template <int kRows>
XF_AVX2_INLINE void int8_panel_tile(const uint8_t* x, int64_t k, const int8_t* panel,
                                    const int32_t* shift_sums, const float* row_scales,
                                    const float* x_scales, const float* bias, float* y,
                                    int64_t ldy, int64_t columns,
                                    const int8_t* next_panel = nullptr) {
  __m256i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
  const int64_t full = k / 4;
  if constexpr (kRows == 4) {
    // Without a next panel to ask for, the asm's prefetch reads this panel's lines (in L1).
    int8_panel_groups_4_rows(x, k, panel, next_panel != nullptr ? next_panel : panel, full, acc);
  } else {
    int64_t g = 0;
    for (; g + 2 <= full; g += 2) {
      if (next_panel != nullptr) {
        _mm_prefetch(next_panel + g * 64, _MM_HINT_T2);
        _mm_prefetch(next_panel + g * 64 + 64, _MM_HINT_T2);
      }
      int32_t x_bytes[kRows][2];
      for (int i = 0; i < kRows; ++i) std::memcpy(x_bytes[i], x + i * k + 4 * g, 8);
      int8_panel_group_pair<kRows>(panel + g * 64, x_bytes, acc);
    }
    if (g < full) {  // an odd last group alone
      if (next_panel != nullptr) _mm_prefetch(next_panel + g * 64, _MM_HINT_T2);
      int32_t x_bytes[kRows];
      for (int i = 0; i < kRows; ++i) std::memcpy(&x_bytes[i], x + i * k + 4 * g, 4);
      int8_panel_group<kRows>(panel + g * 64, x_bytes, acc);
    }
  }
  if (full * 4 < k) {  // the last k % 4 bytes, zero-extended (their weights are zero-padded)
    int32_t x_bytes[kRows] = {};
    for (int i = 0; i < kRows; ++i) std::memcpy(&x_bytes[i], x + i * k + 4 * full, k - 4 * full);
    int8_panel_group<kRows>(panel + full * 64, x_bytes, acc);
  }
  // 64 * sum(w) for x shifted by 64 (128 * sum(w) is even: the halving is exact).
  const __m256i sums[2] = {
      _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift_sums)), 1),
      _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift_sums + 8)), 1)};
  const __m256 scales[2] = {_mm256_loadu_ps(row_scales), _mm256_loadu_ps(row_scales + 8)};
  // As the row kernel and then scale_rows_add_bias: float(dot) * row scale, then times x's row
  // scale plus the bias (the FMA of scale_rows_add_bias's AVX2 build).
  for (int i = 0; i < kRows; ++i) {
    const __m256 x_scale = _mm256_broadcast_ss(x_scales + i);
    __m256 results[2];
    for (int h = 0; h < 2; ++h) {
      results[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][h], sums[h])), scales[h]);
      results[h] = bias != nullptr
                       ? _mm256_fmadd_ps(results[h], x_scale, _mm256_loadu_ps(bias + 8 * h))
                       : _mm256_mul_ps(results[h], x_scale);
    }
    if (columns == kPanelColumns) {
      _mm256_storeu_ps(y + i * ldy, results[0]);
      _mm256_storeu_ps(y + i * ldy + 8, results[1]);
    } else {
      alignas(32) float row[kPanelColumns];
      _mm256_store_ps(row, results[0]);
      _mm256_store_ps(row + 8, results[1]);
      std::memcpy(y + i * ldy, row, columns * sizeof(float));
    }
  }
}

// Int8PanelProducts: w is the first panel of `rows` weight rows, shift_sums and row_scales are
// padded to whole panels, x_scales has m values, bias (when not null) `rows`.
template <int64_t kFixedK>
XF_AVX2_TARGET void int8_panel_products_avx2(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                             int64_t run_time_k, int64_t rows,
                                             const int32_t* shift_sums, const float* row_scales,
                                             const float* x_scales, const float* bias, float* y,
                                             int64_t ldy) {
  const int64_t k = kFixedK != 0 ? kFixedK : run_time_k;
  for (int64_t r = 0; r < rows; r += kPanelColumns) {
    const int64_t columns = std::min(kPanelColumns, rows - r);
    const int8_t* panel = w + r / kPanelColumns * panel_bytes(k);
    alignas(32) float padded[kPanelColumns];
    const float* panel_bias = panel_bias_of(bias, r, columns, padded);
    // The first tile asks for the next panel into L2 when other tiles follow, as in
    // f32_panel_products_avx2.
    const int8_t* next_panel = m > 4 && r + kPanelColumns < rows ? panel + panel_bytes(k) : nullptr;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      int8_panel_tile<4>(x_shifted + i * k, k, panel, shift_sums + r, row_scales + r, x_scales + i,
                         panel_bias, y + i * ldy + r, ldy, columns, i == 0 ? next_panel : nullptr);
    }
    const uint8_t* x_rest = x_shifted + i * k;
    float* y_rest = y + i * ldy + r;
    const int8_t* next = i == 0 ? next_panel : nullptr;
    switch (m - i) {
      case 3:
        int8_panel_tile<3>(x_rest, k, panel, shift_sums + r, row_scales + r, x_scales + i,
                           panel_bias, y_rest, ldy, columns, next);
        break;
      case 2:
        int8_panel_tile<2>(x_rest, k, panel, shift_sums + r, row_scales + r, x_scales + i,
                           panel_bias, y_rest, ldy, columns, next);
        break;
      case 1:
        int8_panel_tile<1>(x_rest, k, panel, shift_sums + r, row_scales + r, x_scales + i,
                           panel_bias, y_rest, ldy, columns, next);
        break;
      default: break;
    }
  }
}

// f32 at AVX2 and AVX-VNNI, any row count: the weights in panels of 16 rows (output columns; the
// last padded with zero rows), for each k the 16 rows' values (64 bytes), made once at plan time
// in place of oneDNN's packed copy. oneDNN 2.6's gemm:jit at AVX2 ran 8,446 x 256 and
// 32,000 x 512 at 30-35 GFLOP/s against 95 at 512 x 512 (xf-kernels-bench, 1 thread); here
// each tile of up to 6 x rows by 16 columns is 12 accumulators fed by one broadcast of x and two
// loads of the panel (16 KB at K = 256, kept in L1 while every x row passes over it).
// y[i][j] = bias[j] + sum_k x[i][k] w[j][k] for kRows x rows and the `columns` (<= 16) rows of
// one panel, by FMA.
// acc[i] += x[i][c] times the panel's 16 values of k = c (x's rows ldx apart).
template <int kRows>
XF_AVX2_INLINE void f32_panel_step(const float* x, int64_t ldx, const float* panel, int64_t c,
                                   __m256 (&acc)[kRows][2]) {
  const __m256 w0 = _mm256_loadu_ps(panel + c * kPanelColumns);
  const __m256 w1 = _mm256_loadu_ps(panel + c * kPanelColumns + 8);
  for (int i = 0; i < kRows; ++i) {
    const __m256 xb = _mm256_broadcast_ss(x + i * ldx + c);
    acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
  }
}

// The tile over k values of x (rows ldx apart) and of the panel; with kAccumulate, adding to the
// sums y holds (a block of k after the first: f32_panel_products_avx2), else from zero.
template <int kRows, bool kAccumulate = false>
XF_AVX2_INLINE void f32_panel_tile(const float* x, int64_t ldx, int64_t k, const float* panel,
                                   const float* bias, float* y, int64_t ldy, int64_t columns,
                                   const float* next_panel) {
  // With one or two x rows, 2 or 4 accumulators would wait on each other's FMA latency: k is
  // then split kSplit ways (consecutive k to separate accumulators), added at the end.
  constexpr int kSplit = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
  __m256 acc[kSplit][kRows][2];
  for (auto& split : acc) {
    for (auto& row : split) row[0] = row[1] = _mm256_setzero_ps();
  }
  if constexpr (kAccumulate) {
    static_assert(kSplit == 1, "a split k is added up at the end only");
    for (int i = 0; i < kRows; ++i) {
      if (columns == kPanelColumns) {
        acc[0][i][0] = _mm256_loadu_ps(y + i * ldy);
        acc[0][i][1] = _mm256_loadu_ps(y + i * ldy + 8);
      } else {
        alignas(32) float row[kPanelColumns] = {};
        std::memcpy(row, y + i * ldy, columns * sizeof(float));
        acc[0][i][0] = _mm256_load_ps(row);
        acc[0][i][1] = _mm256_load_ps(row + 8);
      }
    }
  }
  int64_t c = 0;
  for (; c + kSplit <= k; c += kSplit) {
    // One line of the next panel a k (a k's 16 values are one line): see f32_panel_products_avx2.
    if (next_panel != nullptr) {
      for (int split = 0; split < kSplit; ++split) {
        _mm_prefetch(reinterpret_cast<const char*>(next_panel + (c + split) * kPanelColumns),
                     _MM_HINT_T2);
      }
    }
    for (int split = 0; split < kSplit; ++split) f32_panel_step(x, ldx, panel, c + split, acc[split]);
  }
  for (; c < k; ++c) f32_panel_step(x, ldx, panel, c, acc[0]);
  for (int i = 0; i < kRows; ++i) {
    for (int h = 0; h < 2; ++h) {
      if constexpr (kSplit == 4) {
        acc[0][i][h] = _mm256_add_ps(_mm256_add_ps(acc[0][i][h], acc[1][i][h]),
                                     _mm256_add_ps(acc[2][i][h], acc[3][i][h]));
      } else if constexpr (kSplit == 2) {
        acc[0][i][h] = _mm256_add_ps(acc[0][i][h], acc[1][i][h]);
      }
    }
  }
  for (int i = 0; i < kRows; ++i) {
    if (bias != nullptr) {
      acc[0][i][0] = _mm256_add_ps(acc[0][i][0], _mm256_loadu_ps(bias));
      acc[0][i][1] = _mm256_add_ps(acc[0][i][1], _mm256_loadu_ps(bias + 8));
    }
    if (columns == kPanelColumns) {
      _mm256_storeu_ps(y + i * ldy, acc[0][i][0]);
      _mm256_storeu_ps(y + i * ldy + 8, acc[0][i][1]);
    } else {
      alignas(32) float row[kPanelColumns];
      _mm256_store_ps(row, acc[0][i][0]);
      _mm256_store_ps(row + 8, acc[0][i][1]);
      std::memcpy(y + i * ldy, row, columns * sizeof(float));
    }
  }
}

// y = x W^T (+ bias, [rows], when not null) for the m rows of x and `rows` weight rows from the
// panel at w; y's row stride is ldy.
// One block of k (block_k values from x + 0, x's rows ldx apart) for the first `rows` x rows
// (tiles of 3 to 6 rows) and one panel's block `part`; the first tile asks for `next` into L2.
template <bool kAccumulate>
XF_AVX2_INLINE void f32_panel_block(const float* x, int64_t rows, int64_t ldx,
                                    int64_t block_k, const float* part, const float* bias, float* y,
                                    int64_t ldy, int64_t columns, const float* next) {
  int64_t i = 0;
  for (; i + 6 <= rows; i += 6) {
    f32_panel_tile<6, kAccumulate>(x + i * ldx, ldx, block_k, part, bias, y + i * ldy, ldy, columns,
                                   i == 0 ? next : nullptr);
  }
  const float* x_rest = x + i * ldx;
  float* y_rest = y + i * ldy;
  next = i == 0 ? next : nullptr;
  switch (rows - i) {
    case 5: f32_panel_tile<5, kAccumulate>(x_rest, ldx, block_k, part, bias, y_rest, ldy, columns, next); break;
    case 4: f32_panel_tile<4, kAccumulate>(x_rest, ldx, block_k, part, bias, y_rest, ldy, columns, next); break;
    case 3: f32_panel_tile<3, kAccumulate>(x_rest, ldx, block_k, part, bias, y_rest, ldy, columns, next); break;
    default: break;
  }
}

template <int64_t kFixedK>
struct Avx2 { static constexpr Int8RowProducts run = int8_row_products_avx2<Avx2Dot, kFixedK>; };
template <int64_t kFixedK>
struct AvxVnni {
  static constexpr Int8RowProducts run = int8_row_products_avx2<AvxVnniDot, kFixedK>;
};
template <int64_t kFixedK>
struct Avx2Panels { static constexpr Int8PanelProducts run = int8_panel_products_avx2<kFixedK>; };

}  // namespace

Int8RowProducts avx2_int8_row_kernel(int64_t k) { return for_row_length<Avx2>(k); }
Int8RowProducts avx_vnni_int8_row_kernel(int64_t k) { return for_row_length<AvxVnni>(k); }
Int8PanelProducts avx2_int8_panel_kernel(int64_t k) { return for_row_length<Avx2Panels>(k); }

XF_AVX2_TARGET void f32_panel_products_avx2(const float* x, int64_t m, const float* w, int64_t k,
                                            int64_t rows, const float* bias, float* y,
                                            int64_t ldy) {
  for (int64_t r = 0; r < rows; r += kPanelColumns) {
    const int64_t columns = std::min(kPanelColumns, rows - r);
    const float* panel = w + r * k;
    alignas(32) float padded[kPanelColumns];
    const float* panel_bias = panel_bias_of(bias, r, columns, padded);
    // The first tile over a panel asks for the next panel into L2: fetched while the other
    // tiles run, it is not waited on line by line when its own first tile starts (weights cold
    // in L3 or memory, as each step of a decoder reads them, ran 15% slower than warm ones).
    // Not with a single tile: nothing else runs meanwhile, and a lone row, which streams the
    // weights at memory speed, ran 6% slower with the second stream (f32 batch 1 greedy).
    const float* next_panel = m > 6 && r + kPanelColumns < rows ? panel + kPanelColumns * k : nullptr;
    // Tiles of 3 to 6 rows take k in blocks of kPanelBlockK, carrying their sums through y.
    const int64_t blocked_rows = m % 6 >= 3 ? m : m / 6 * 6;
    for (int64_t block = 0; block < k && blocked_rows > 0; block += kPanelBlockK) {
      const int64_t block_k = std::min(kPanelBlockK, k - block);
      const bool last = block + block_k == k;
      // Prefetched as next_panel is (several tiles only): the panel's next block, or the next panel.
      const float* next = m <= 6 ? nullptr : last ? next_panel : panel + (block + block_k) * kPanelColumns;
      if (block == 0) {
        f32_panel_block<false>(x + block, blocked_rows, k, block_k, panel + block * kPanelColumns,
                               last ? panel_bias : nullptr, y + r, ldy, columns, next);
      } else {
        f32_panel_block<true>(x + block, blocked_rows, k, block_k, panel + block * kPanelColumns,
                              last ? panel_bias : nullptr, y + r, ldy, columns, next);
      }
    }
    // 1 or 2 rows left: the whole k at once (their k is split across accumulators).
    const float* x_rest = x + blocked_rows * k;
    float* y_rest = y + blocked_rows * ldy + r;
    const float* next = blocked_rows == 0 ? next_panel : nullptr;
    switch (m - blocked_rows) {
      case 2: f32_panel_tile<2>(x_rest, k, k, panel, panel_bias, y_rest, ldy, columns, next); break;
      case 1: f32_panel_tile<1>(x_rest, k, k, panel, panel_bias, y_rest, ldy, columns, next); break;
      default: break;
    }
  }
}
#undef XF_AVX2_INLINE
#undef XF_AVX2_TARGET

}  // namespace xf::cpu
#endif
