// xf's own matrix-product kernels as the dispatcher (matmul_cpu.cc) sees them: the signatures
// of the int8 kernels, the panel layout the panel kernels read, and the kernels each
// instruction-set file offers for a row length k. The kernels themselves: matmul_avx2_cpu.cc
// (AVX2 and AVX-VNNI), matmul_avx512_cpu.cc (AVX-512, with and without VNNI),
// matmul_neon_cpu.cc (aarch64). Which one runs is matmul_cpu.cc's choice.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "xf/weight_layout.h"

#if (defined(__x86_64__) || defined(__aarch64__)) && (defined(__GNUC__) || defined(__clang__))
#define XF_INT8_ROW_KERNEL 1  // xf's kernels are built (GCC and Clang, x86-64 and aarch64)
#endif

namespace xf::cpu {

// Counts a product made, by implementation, for matmul_implementations(); oneDNN's names get the
// ISA oneDNN runs at ("gemm:jit" does not say it).
void record_implementation(const std::string& name, bool by_onednn);

// A few rows of int8 x against int8 weight rows, for the small products of translating one
// sentence (the decoder's step: one row a hypothesis; the encoder: one row a source token).
// oneDNN 2.6 runs an s8 x s8 product of a few rows through its general GEMM, which copies the
// weights into its own layout on every call (measured: the 8,446 x 256 output layer at 10 GB/s,
// 0.22 ms a token); here each block of weight rows is read once, in place, for all x rows.
// AVX-512 VNNI multiplies u8 by s8, so x comes shifted by 128 and each row's 128 * sum(w) is
// subtracted: the int32 dot product is exact, as oneDNN's, and y = float(dot) * row_scale is
// the same f32 operation it does, so a row's result does not depend on which path ran.
using Int8RowProducts = void (*)(const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k,
                                 int64_t rows, const int32_t* shift_sums, const float* row_scales,
                                 float* y, int64_t ldy);
// The panel kernel's: also applies x's row scales and adds the bias (when not null) as it stores.
using Int8PanelProducts = void (*)(const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k,
                                   int64_t rows, const int32_t* shift_sums, const float* row_scales,
                                   const float* x_scales, const float* bias, float* y, int64_t ldy);

// The panel layout of int8 weights (int8_panel_products_avx2): panels of 16 weight rows, the
// last padded with zero rows; in a panel, for each group of 4 columns of K (the last padded with
// zeros), the 4 bytes of each of the 16 rows. f32 panels: for each k, the 16 rows' values. Both
// are the model file's `panels` layout (xf/weight_layout.h), which the kernels read in place.
constexpr int64_t kPanelColumns = kPanelRows;
// f32 panels are read in blocks of this many k by tiles of 3 or more rows, so that the block
// (16 columns x 256 x 4 bytes = 16 KB) stays in L1 while every tile passes over it: a whole
// panel at k = 1024 (FFN's second product) is 64 KB, which each tile read from L2 (7% slower).
// A tile's sums go through y from block to block: the same additions in the same order.
constexpr int64_t kPanelBlockK = 256;
constexpr int64_t panel_bytes(int64_t k) { return int8_panel_bytes(k); }
using xf::padded_to_panels;
using xf::panel_groups;

// Rows of an int8 [.., k] row-major matrix w (ids: the listed rows in order; null: rows 0 to
// count - 1) into panels at `panels` (padded_to_panels(count) / kPanelColumns * panel_bytes(k)
// bytes, padding zero), each value to_seven_bits() where seven_bits, and each row's 128 * sum of
// the values written (the kernels' shift_sums; padding rows 0) at shift_sums.
// int8_panels_cpu.cc, vectorized by level.
void pack_int8_panels(const int8_t* w, int64_t k, const int32_t* ids, int64_t count, bool seven_bits,
                      int8_t* panels, int32_t* shift_sums, int threads);

// The bias of the panel of `columns` output columns at r (null without a bias): in place, or for a
// last panel of fewer than 16 columns copied into `padded` and zero-filled, since a tile loads 16.
inline const float* panel_bias_of(const float* bias, int64_t r, int64_t columns,
                                  float (&padded)[kPanelColumns]) {
  if (bias == nullptr || columns == kPanelColumns) return bias != nullptr ? bias + r : nullptr;
  std::fill(padded, padded + kPanelColumns, 0.0f);
  std::memcpy(padded, bias + r, columns * sizeof(float));
  return padded;
}

#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
// acc += pairs of u8 x s8 products (vpmaddubsw), added in pairs into int32 (vpmaddwd by ones):
// the 4-byte dot product without VNNI, on ymm (AVX2) or zmm (AVX-512 BW) operands.
#define XF_ADD_BYTE_PRODUCTS_ASM                \
  "vpmaddubsw %[s8], %[u8], %[pairs]\n\t"      \
  "vpmaddwd %[ones], %[pairs], %[pairs]\n\t"   \
  "vpaddd %[pairs], %[acc], %[acc]"


// The kernel `Kernel` instantiated for row length k: compiled for the Transformer's usual d_model
// and d_ff, or generic.
template <template <int64_t> class Kernel>
auto for_row_length(int64_t k) {
  switch (k) {
    case 256: return Kernel<256>::run;
    case 512: return Kernel<512>::run;
    case 1024: return Kernel<1024>::run;
    case 2048: return Kernel<2048>::run;
    default: return Kernel<0>::run;
  }
}

// matmul_avx512_cpu.cc: the few-row kernel with VNNI; the panel kernels above 16 rows, with VNNI
// on the stored weights and without it (AVX-512 BW) on their 7-bit copy.
Int8RowProducts avx512_vnni_int8_row_kernel(int64_t k);
Int8PanelProducts avx512_vnni_int8_panel_kernel(int64_t k);
Int8PanelProducts avx512_bw_int8_panel_kernel(int64_t k);

// matmul_avx2_cpu.cc: the few-row kernel on ymm registers, with plain AVX2 (also AVX-512 without
// VNNI, on the 7-bit copy) or AVX-VNNI; the int8 panel kernel of plain AVX2 (every row count,
// 7-bit panels); the f32 panel kernel (AVX2 and AVX-VNNI).
Int8RowProducts avx2_int8_row_kernel(int64_t k);
Int8RowProducts avx_vnni_int8_row_kernel(int64_t k);
Int8PanelProducts avx2_int8_panel_kernel(int64_t k);

// matmul_sse41_cpu.cc: the int8 panel kernel on xmm registers (7-bit panels, every row count),
// for x86-64 CPUs below AVX2 that have SSE4.1 (cpu_has_sse41()).
Int8PanelProducts sse41_int8_panel_kernel(int64_t k);
bool cpu_has_sse41();
// y[i][r] = x[i] . w[r] (+ bias[r]) for m rows of x (row stride k) and `rows` f32 weight rows in
// 16-row panels (CpuEngine::Impl::f32_panels); y's row stride is ldy.
void f32_panel_products_avx2(const float* x, int64_t m, const float* w, int64_t k, int64_t rows,
                             const float* bias, float* y, int64_t ldy);
#endif

#if defined(XF_INT8_ROW_KERNEL) && defined(__aarch64__)
// matmul_neon_cpu.cc: the kernel for every row count, without and with the dot-product
// instructions (ARMv8.2 dotprod).
void int8_row_products_neon_plain(const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k,
                                  int64_t rows, const int32_t* shift_sums, const float* row_scales,
                                  float* y, int64_t ldy);
void int8_row_products_neon_dotprod(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                    int64_t k, int64_t rows, const int32_t* shift_sums,
                                    const float* row_scales, float* y, int64_t ldy);
#endif

}  // namespace xf::cpu
