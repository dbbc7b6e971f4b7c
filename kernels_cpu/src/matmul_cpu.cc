// Matrix products through oneDNN: static-shape primitives with a user scratchpad (runtime),
// dnnl_sgemm (trainer), and the one execute() wrapper.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "onednn_isa.h"
#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"
#include "xf/dtype.h"
#include "xf/kernels_cpu/isa.h"
#include "xf/kernels/convert.h"     // the int8 product quantizes its input and scales its rows
#include "xf/kernels/layer_norm.h"  // bias_backward, in linear_backward
#include "xf/kernels/matmul.h"

namespace xf::cpu {
namespace {

using DataType = dnnl::memory::data_type;

// Threads inside run_primitive(), process-wide: oneDNN's OpenMP workers allocate too, and a
// thread-local flag would not see them.
std::atomic<int> g_backend_depth{0};

struct BackendCallScope {
  BackendCallScope() { g_backend_depth.fetch_add(1, std::memory_order_relaxed); }
  ~BackendCallScope() { g_backend_depth.fetch_sub(1, std::memory_order_relaxed); }
};

constexpr size_t kWorkspaceAlignment = 64;
size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// A stored weight matrix [N, K] row-major seen as the matmul's B = [K, N] (strides {1, K}).
dnnl::memory::desc stored_weights_desc(int64_t n, int64_t k, DataType type) {
  return dnnl::memory::desc({k, n}, type, {1, k});
}

dnnl::memory::desc row_major_desc(int64_t rows, int64_t cols, DataType type) {
  return dnnl::memory::desc({rows, cols}, type, {cols, 1});
}

// One row of f32 into bf16: an AVX-512 build of this loop where the CPU has it.
XF_VECTORIZED_BODY void round_row_to_bf16_body(const float* from, int64_t count, uint16_t* to) {
  for (int64_t i = 0; i < count; ++i) to[i] = float_to_bfloat16(from[i]);
}
XF_DISPATCH_BY_ISA(round_row_to_bf16)

// rows x cols of a row-major f32 matrix (leading dimension ld) into a compact bf16 copy.
void round_rows_to_bf16(const float* from, int64_t rows, int64_t cols, int64_t ld, uint16_t* to,
                        int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) round_row_to_bf16(from + r * ld, cols, to + r * cols);
}

}  // namespace

// oneDNN's int8 products on CPUs without VNNI (AVX2, AVX-512 before Cascade Lake) add pairs of
// u8 x s8 products in int16 with saturation (vpmaddubsw): 2 * 255 * 127 overflows, and a row of
// aligned large values came out 32640 instead of 4129024 (oneDNN 2.6.3, AMD EPYC with AVX2).
// Weights of 7 bits (|w| <= 63) keep every pair inside int16 (2 * 255 * 63 = 32130).
bool int8_products_saturate() {
#if defined(__aarch64__)
  return false;  // every int8 product runs xf's NEON kernel, which is exact on full-range weights
#else
  return !onednn_allows(dnnl_cpu_isa_avx512_core_vnni) && !onednn_allows(dnnl_cpu_isa_avx2_vnni);
#endif
}

bool bf16_products_in_hardware() { return onednn_allows(dnnl_cpu_isa_avx512_core_bf16); }

const char* onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

namespace {

std::mutex g_implementations_mutex;
std::map<std::string, int64_t>& implementations_made() {
  static std::map<std::string, int64_t> made;
  return made;
}

// Counts a StaticMatmul by implementation; oneDNN's names get the ISA oneDNN runs at ("gemm:jit"
// does not say it).
void record_implementation(const std::string& name, bool by_onednn) {
  std::lock_guard<std::mutex> lock(g_implementations_mutex);
  ++implementations_made()[by_onednn ? "onednn:" + name + " @" + onednn_isa_name() : name];
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> matmul_implementations() {
  std::lock_guard<std::mutex> lock(g_implementations_mutex);
  return {implementations_made().begin(), implementations_made().end()};
}

namespace {

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
// zeros), the 4 bytes of each of the 16 rows.
constexpr int64_t kPanelColumns = 16;
// f32 panels are read in blocks of this many k by tiles of 3 or more rows, so that the block
// (16 columns x 256 x 4 bytes = 16 KB) stays in L1 while every tile passes over it: a whole
// panel at k = 1024 (FFN's second product) is 64 KB, which each tile read from L2 (7% slower).
// A tile's sums go through y from block to block: the same additions in the same order.
constexpr int64_t kPanelBlockK = 256;
constexpr int64_t panel_groups(int64_t k) { return (k + 3) / 4; }
constexpr int64_t panel_bytes(int64_t k) { return panel_groups(k) * 4 * kPanelColumns; }
constexpr int64_t padded_to_panels(int64_t n) {
  return (n + kPanelColumns - 1) / kPanelColumns * kPanelColumns;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XF_INT8_ROW_KERNEL 1
#define XF_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
// The tile's helpers are inlined so that its 16 accumulators stay in registers (GCC 12 otherwise
// writes them to the stack after every multiply).
#define XF_VNNI_INLINE XF_VNNI_TARGET inline __attribute__((always_inline))

// GCC 12's AVX-512 headers build some intrinsics (_mm512_reduce_add_epi32, the 128-bit lane
// shuffles and broadcasts among them) on an "undefined" operand that -Wmaybe-uninitialized and
// -Wuninitialized then report inside the header.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// acc += pairs of u8 x s8 products (vpmaddubsw), added in pairs into int32 (vpmaddwd by ones):
// the 4-byte dot product without VNNI, on ymm (AVX2) or zmm (AVX-512 BW) operands.
#define XF_ADD_BYTE_PRODUCTS_ASM                \
  "vpmaddubsw %[s8], %[u8], %[pairs]\n\t"      \
  "vpmaddwd %[ones], %[pairs], %[pairs]\n\t"   \
  "vpaddd %[pairs], %[acc], %[acc]"

// acc + the dot products of 4-byte groups of u8 and s8, as _mm512_dpbusd_epi32, but updating acc
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

// The same kernel on 256-bit registers, for CPUs without AVX-512 VNNI: AVX2 and AVX-VNNI
// (vpdpbusd on ymm: Alder Lake and later, Zen 5). 16 ymm registers instead of 32 zmm, so a tile
// is 8 accumulators (4 x rows by 2 weight rows, 2 by 4, 1 by 8), summed across lanes by one
// hadd tree. Plain AVX2 has no 4-byte dot product: pairs of u8 x s8 products are added in int16
// (vpmaddubsw), then pairs of those in int32 (vpmaddwd by ones). vpmaddubsw saturates, so there
// the kernel reads the 7-bit weight copy that oneDNN's AVX2 path reads (2 * 255 * 63 fits int16):
// on both paths the int32 dot product of the same bytes is exact, and a row's result is bit for
// bit the same whichever ran.
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
// with no sums across lanes (the row kernel's hadd tree) and one contiguous store a row. The
// int32 dot products are exact, as in the row kernel: the same results bit for bit.
// acc += pairs of u8 x s8 products (vpmaddubsw), added in pairs into int32 (vpmaddwd by ones).
// Inline asm so that acc is updated in its register: with intrinsics GCC 12 copied accumulators
// between registers and spilled one to the stack in the 4-row tile.
XF_AVX2_INLINE void add_byte_products(__m256i& acc, __m256i u8, __m256i s8, __m256i ones) {
  __m256i pairs;
  asm(XF_ADD_BYTE_PRODUCTS_ASM
      : [acc] "+x"(acc), [pairs] "=&x"(pairs)
      : [u8] "x"(u8), [s8] "x"(s8), [ones] "x"(ones));
}

// The bias of the panel of `columns` output columns at r (null without a bias): in place, or for a
// last panel of fewer than 16 columns copied into `padded` and zero-filled, since a tile loads 16.
inline const float* panel_bias_of(const float* bias, int64_t r, int64_t columns,
                                  float (&padded)[kPanelColumns]) {
  if (bias == nullptr || columns == kPanelColumns) return bias != nullptr ? bias + r : nullptr;
  std::fill(padded, padded + kPanelColumns, 0.0f);
  std::memcpy(padded, bias + r, columns * sizeof(float));
  return padded;
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

// The 4-row tile's loop over the first `groups` groups, in one asm block: with intrinsics (and
// with add_byte_products alone in asm) GCC 12 copied accumulators between registers, reloaded
// weights and spilled one accumulator to the stack each group, and the loop ran at 0.7 of the
// speed of MKL's AVX2 s8u8s32 kernel on the same instructions (perf, 2-core Xeon, AVX2 cap).
// Here each group is 2 weight loads, 4 broadcasts and 8 x (vpmaddubsw, vpmaddwd, vpaddd), with
// weights, broadcasts and products in ymm0-5 and the 8 accumulators and `ones` where GCC puts them.
// `prefetch` walks a panel's bytes beside `panel`, one line a group (int8_panel_products_avx2).
XF_AVX2_INLINE void int8_panel_groups_4_rows(const uint8_t* x, int64_t k, const int8_t* panel,
                                             const int8_t* prefetch, int64_t groups,
                                             __m256i (&acc)[4][2]) {
  if (groups <= 0) return;
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* x0 = x;
  const uint8_t* x2 = x + 2 * k;
  const uint8_t* x_end = x + 4 * groups;
  asm volatile(
      "1:\n\t"
      "prefetcht2 (%[prefetch])\n\t"
      "vmovdqu (%[w]), %%ymm0\n\t"
      "vmovdqu 32(%[w]), %%ymm1\n\t"
      "vpbroadcastd (%[x0]), %%ymm2\n\t"
      "vpbroadcastd (%[x0],%[k]), %%ymm3\n\t"
      "vpmaddubsw %%ymm0, %%ymm2, %%ymm4\n\t"
      "vpmaddubsw %%ymm1, %%ymm2, %%ymm5\n\t"
      "vpmaddwd %[ones], %%ymm4, %%ymm4\n\t"
      "vpmaddwd %[ones], %%ymm5, %%ymm5\n\t"
      "vpaddd %%ymm4, %[a00], %[a00]\n\t"
      "vpaddd %%ymm5, %[a01], %[a01]\n\t"
      "vpmaddubsw %%ymm0, %%ymm3, %%ymm4\n\t"
      "vpmaddubsw %%ymm1, %%ymm3, %%ymm5\n\t"
      "vpmaddwd %[ones], %%ymm4, %%ymm4\n\t"
      "vpmaddwd %[ones], %%ymm5, %%ymm5\n\t"
      "vpaddd %%ymm4, %[a10], %[a10]\n\t"
      "vpaddd %%ymm5, %[a11], %[a11]\n\t"
      "vpbroadcastd (%[x2]), %%ymm2\n\t"
      "vpbroadcastd (%[x2],%[k]), %%ymm3\n\t"
      "vpmaddubsw %%ymm0, %%ymm2, %%ymm4\n\t"
      "vpmaddubsw %%ymm1, %%ymm2, %%ymm5\n\t"
      "vpmaddwd %[ones], %%ymm4, %%ymm4\n\t"
      "vpmaddwd %[ones], %%ymm5, %%ymm5\n\t"
      "vpaddd %%ymm4, %[a20], %[a20]\n\t"
      "vpaddd %%ymm5, %[a21], %[a21]\n\t"
      "vpmaddubsw %%ymm0, %%ymm3, %%ymm4\n\t"
      "vpmaddubsw %%ymm1, %%ymm3, %%ymm5\n\t"
      "vpmaddwd %[ones], %%ymm4, %%ymm4\n\t"
      "vpmaddwd %[ones], %%ymm5, %%ymm5\n\t"
      "vpaddd %%ymm4, %[a30], %[a30]\n\t"
      "vpaddd %%ymm5, %[a31], %[a31]\n\t"
      "add $64, %[w]\n\t"
      "add $64, %[prefetch]\n\t"
      "add $4, %[x0]\n\t"
      "add $4, %[x2]\n\t"
      "cmp %[x_end], %[x0]\n\t"
      "jne 1b"
      : [a00] "+x"(acc[0][0]), [a01] "+x"(acc[0][1]), [a10] "+x"(acc[1][0]),
        [a11] "+x"(acc[1][1]), [a20] "+x"(acc[2][0]), [a21] "+x"(acc[2][1]),
        [a30] "+x"(acc[3][0]), [a31] "+x"(acc[3][1]), [w] "+r"(panel), [prefetch] "+r"(prefetch),
        [x0] "+r"(x0), [x2] "+r"(x2)
      : [k] "r"(k), [x_end] "r"(x_end), [ones] "x"(ones)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5");
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
    for (int64_t g = 0; g < full; ++g) {
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
  const __m256i sums[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift_sums)),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift_sums + 8))};
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

#pragma GCC diagnostic pop
#undef XF_VNNI_INLINE
#undef XF_VNNI_TARGET
#undef XF_AVX512_INLINE
#undef XF_AVX512_TARGET
#undef XF_ADD_BYTE_PRODUCTS_ASM
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define XF_INT8_ROW_KERNEL 1
#define XF_NEON_INLINE inline __attribute__((always_inline))

// The kernel on aarch64 (Jetson, Graviton, Apple): NEON, 4 x rows by 4 weight rows in 16
// accumulators of 4 int32 lanes (32 registers). NEON multiplies s8 by s8, so x is shifted back
// to s8 as it is loaded (one eor per x load, shared by 4 weight rows) and the dot product needs
// no shift sums. With the dot-product instructions (ARMv8.2 dotprod: Jetson Xavier and Orin)
// sdot adds 4-byte groups into int32 lanes; without them, pairs of s8 products are added in
// int16 (smull, smlal2: 2 * 127 * 128 fits, x being in [-127, 127]) and then into int32
// (sadalp). Both exact, so every row count runs here: oneDNN 2.6 has no int8 GEMM of its own
// on aarch64 worth calling, and no weight copy is made.
struct NeonDot {
  XF_NEON_INLINE static int32x4_t dot(int32x4_t acc, int8x16_t x, int8x16_t w) {
    int16x8_t pairs = vmull_s8(vget_low_s8(x), vget_low_s8(w));
    pairs = vmlal_high_s8(pairs, x, w);
    return vpadalq_s16(acc, pairs);
  }
};
// sdot as inline asm: the vdotq_s32 intrinsic needs a "+dotprod" target on every function it is
// inlined into (GCC refuses otherwise), and the tile code is shared with the plain build.
struct NeonDotprod {
  XF_NEON_INLINE static int32x4_t dot(int32x4_t acc, int8x16_t x, int8x16_t w) {
    asm(".arch armv8.2-a+dotprod\n\tsdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(x), "w"(w));
    return acc;
  }
};

// x row i . weight row j for kRows x rows (shifted u8, back to s8 here) and 4 weight rows, into
// y[i * ldy + j] as float(dot) * row_scales[j]; the k % 16 bytes past the last step in scalar code.
template <typename Dot, int kRows>
XF_NEON_INLINE void int8_tile_neon(const uint8_t* x, const int8_t* w, int64_t k,
                                   const float* row_scales, float* y, int64_t ldy) {
  int32x4_t acc[kRows][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_s32(0);
  const uint8x16_t sign = vdupq_n_u8(0x80);
  const int64_t full = k / 16 * 16;
  for (int64_t c = 0; c < full; c += 16) {
    int8x16_t xv[kRows];
    for (int i = 0; i < kRows; ++i) xv[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(x + i * k + c), sign));
    for (int j = 0; j < 4; ++j) {
      const int8x16_t wv = vld1q_s8(w + j * k + c);
      for (int i = 0; i < kRows; ++i) acc[i][j] = Dot::dot(acc[i][j], xv[i], wv);
    }
  }
  const float32x4_t scales = vld1q_f32(row_scales);
  for (int i = 0; i < kRows; ++i) {
    int32x4_t dots = vpaddq_s32(vpaddq_s32(acc[i][0], acc[i][1]), vpaddq_s32(acc[i][2], acc[i][3]));
    if (full < k) {
      int32_t tails[4];
      for (int j = 0; j < 4; ++j) {
        tails[j] = 0;
        for (int64_t c = full; c < k; ++c) {
          tails[j] += int32_t{static_cast<int8_t>(x[i * k + c] ^ 0x80)} * w[j * k + c];
        }
      }
      dots = vaddq_s32(dots, vld1q_s32(tails));
    }
    vst1q_f32(y + i * ldy, vmulq_f32(vcvtq_f32_s32(dots), scales));
  }
}

template <typename Dot>
XF_NEON_INLINE void int8_row_products_neon(const uint8_t* x_shifted, int64_t m, const int8_t* w,
                                           int64_t k, int64_t rows, const float* row_scales,
                                           float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      int8_tile_neon<Dot, 4>(x_shifted + i * k, w + r * k, k, row_scales + r, y + i * ldy + r, ldy);
    }
    for (; i < m; ++i) {
      int8_tile_neon<Dot, 1>(x_shifted + i * k, w + r * k, k, row_scales + r, y + i * ldy + r, ldy);
    }
  }
  for (; r < rows; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      int32_t dot = 0;
      for (int64_t c = 0; c < k; ++c) {
        dot += int32_t{static_cast<int8_t>(x_shifted[i * k + c] ^ 0x80)} * w[r * k + c];
      }
      y[i * ldy + r] = static_cast<float>(dot) * row_scales[r];
    }
  }
}

// The shift sums are not used: x goes back to s8.
void int8_row_products_neon_plain(const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k,
                                  int64_t rows, const int32_t*, const float* row_scales, float* y,
                                  int64_t ldy) {
  int8_row_products_neon<NeonDot>(x_shifted, m, w, k, rows, row_scales, y, ldy);
}
void int8_row_products_neon_dotprod(
    const uint8_t* x_shifted, int64_t m, const int8_t* w, int64_t k, int64_t rows, const int32_t*,
    const float* row_scales, float* y, int64_t ldy) {
  int8_row_products_neon<NeonDotprod>(x_shifted, m, w, k, rows, row_scales, y, ldy);
}
#undef XF_NEON_INLINE
#endif

}  // namespace

const char* int8_row_kernel_name() {
#if defined(XF_INT8_ROW_KERNEL)
  switch (cpu_isa()) {
    case CpuIsa::avx512_vnni: return "xf:int8_row_avx512_vnni";
    case CpuIsa::avx512: return "xf:int8_row_avx2";  // AVX-512 without VNNI (Skylake-X)
    case CpuIsa::avx2: return "xf:int8_panels_avx2";
    case CpuIsa::avx2_vnni: return "xf:int8_row_avx2_vnni";
    case CpuIsa::neon: return "xf:int8_row_neon";
    case CpuIsa::neon_dotprod: return "xf:int8_row_neon_dotprod";
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

bool int8_row_kernel_available() { return int8_row_kernel_name() != nullptr; }

// The most x rows the kernel is used for. With AVX-512, 16: above, with VNNI the panel kernel
// (int8_panel_products_for), without it oneDNN, whose 512-bit kernels beat the 256-bit one there
// (at every row count, batch 32 beam 4 took 1.9 times CTranslate2's time, docs/BENCHMARKS.md). At
// AVX2 and AVX-VNNI every row count: there oneDNN 2.6's s8 x s8 product also adds up each weight
// column in a scalar byte loop on every call (15% of a batch-32 translation's time at AVX2), and
// at 32 and 128 rows of the bundled model's shapes the kernel took 0.55-0.7 and 0.9-1.1 (AVX2),
// 0.5-0.55 and 0.8-0.95 (AVX-VNNI) of oneDNN's CPU time (docs/KERNELS_CPU.md). On aarch64 every
// row count (oneDNN 2.6 has no fast int8 product there).
int64_t int8_row_kernel_max_rows() {
  const CpuIsa isa = cpu_isa();
  return isa == CpuIsa::avx512_vnni || isa == CpuIsa::avx512 ? 16
                                                              : std::numeric_limits<int64_t>::max();
}

namespace {

// x + 128 in place, as u8: the VNNI kernel's x. A loop of its own, so that it vectorizes (inline
// in StaticMatmul::run, byte stores that might alias the plan kept it one byte at a time: 5% of
// a translation's time).
XF_VECTORIZED_BODY uint8_t* shift_to_unsigned_body(int8_t* x, int64_t count) {
  auto* shifted = reinterpret_cast<uint8_t*>(x);
  for (int64_t c = 0; c < count; ++c) shifted[c] ^= 0x80;
  return shifted;
}
XF_DISPATCH_BY_ISA(shift_to_unsigned)

#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
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
template <int64_t kFixedK>
struct Vnni512 { static constexpr Int8RowProducts run = int8_row_products_vnni<kFixedK>; };
template <int64_t kFixedK>
struct Avx2 { static constexpr Int8RowProducts run = int8_row_products_avx2<Avx2Dot, kFixedK>; };
template <int64_t kFixedK>
struct Avx2Panels { static constexpr Int8PanelProducts run = int8_panel_products_avx2<kFixedK>; };
template <int64_t kFixedK>
struct Vnni512Panels {
  static constexpr Int8PanelProducts run = int8_panel_products_512<Vnni512Dot, kFixedK>;
};
template <int64_t kFixedK>
struct Avx512Panels {
  static constexpr Int8PanelProducts run = int8_panel_products_512<Avx512BwDot, kFixedK>;
};
template <int64_t kFixedK>
struct AvxVnni {
  static constexpr Int8RowProducts run = int8_row_products_avx2<AvxVnniDot, kFixedK>;
};
#endif

// Whether the kernel at cpu_isa() reads the 7-bit weights in panels (int8_panel_products_avx2):
// plain AVX2, where it serves every row count, so no row-major copy is needed.
bool int8_kernel_reads_panels() {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  return cpu_isa() == CpuIsa::avx2;
#else
  return false;
#endif
}

// Whether f32 products run xf's panel kernel (f32_panel_products_avx2) instead of oneDNN: at
// AVX2 and AVX-VNNI, where oneDNN 2.6 runs gemm:jit.
bool f32_kernel_reads_panels() {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  return cpu_isa() == CpuIsa::avx2 || cpu_isa() == CpuIsa::avx2_vnni;
#else
  return false;
#endif
}

// The panel kernel for m rows of length k at cpu_isa(), or null where there is none: at plain
// AVX2 every row count (7-bit weights), at AVX-512 above int8_row_kernel_max_rows() (the row
// kernel reads the stored weights, or without VNNI their 7-bit copy, below).
Int8PanelProducts int8_panel_products_for(int64_t m, int64_t k) {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  if (int8_kernel_reads_panels()) return for_row_length<Avx2Panels>(k);
  if (cpu_isa() == CpuIsa::avx512_vnni && m > int8_row_kernel_max_rows()) {
    return for_row_length<Vnni512Panels>(k);
  }
  if (cpu_isa() == CpuIsa::avx512 && m > int8_row_kernel_max_rows()) {
    return for_row_length<Avx512Panels>(k);
  }
#endif
  (void)m;
  (void)k;
  return nullptr;
}

// The few-row kernel for row length k at cpu_isa(), or null where there is none (or where it
// reads panels: int8_panel_products_for).
Int8RowProducts int8_row_products_for(int64_t k) {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
  switch (cpu_isa()) {
    case CpuIsa::avx512_vnni: return for_row_length<Vnni512>(k);
    case CpuIsa::avx512: return for_row_length<Avx2>(k);
    case CpuIsa::avx2_vnni: return for_row_length<AvxVnni>(k);
    default: return nullptr;
  }
#elif defined(XF_INT8_ROW_KERNEL) && defined(__aarch64__)
  (void)k;
  return cpu_isa() == CpuIsa::neon_dotprod ? int8_row_products_neon_dotprod
                                           : int8_row_products_neon_plain;
#else
  (void)k;
  return nullptr;
#endif
}

}  // namespace

int8_t to_seven_bits(int8_t value) {
  // Round half away from zero (-127..127 -> -64..64), then clamp the two ends to +-63.
  const int halved = value >= 0 ? (value + 1) / 2 : -((1 - value) / 2);
  return static_cast<int8_t>(std::clamp(halved, -63, 63));
}

// A copy of one weight matrix made at plan time, shared by the StaticMatmuls of every row count
// that asks for it: f32 weights in a oneDNN blocked layout, or int8 weights requantized to 7 bits
// (each value halved, its row's scale doubled) where int8 products saturate.
struct PackedWeights {
  const void* source = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  dnnl::memory::desc desc;
  dnnl::memory memory;            // owns the packed bytes
  std::vector<float> row_scales;  // 7-bit int8 copies: [n]
};

struct CpuEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  bool pack_weights = true;
  std::mutex mutex;  // guards packed
  std::vector<std::weak_ptr<PackedWeights>> packed;

  // The shared copy of `weights` in `desc`, made by `fill` when no StaticMatmul holds one yet.
  template <typename Fill>
  std::shared_ptr<PackedWeights> shared_copy(const WeightMatrix& weights,
                                             const dnnl::memory::desc& desc, Fill fill) {
    std::lock_guard<std::mutex> lock(mutex);
    packed.erase(std::remove_if(packed.begin(), packed.end(),
                                [](const std::weak_ptr<PackedWeights>& p) { return p.expired(); }),
                 packed.end());
    for (const auto& entry : packed) {
      std::shared_ptr<PackedWeights> existing = entry.lock();
      if (existing->source == weights.data && existing->n == weights.rows &&
          existing->k == weights.cols && existing->desc == desc) {
        return existing;
      }
    }
    auto made = std::make_shared<PackedWeights>();
    made->source = weights.data;
    made->n = weights.rows;
    made->k = weights.cols;
    made->desc = desc;
    made->memory = dnnl::memory(desc, engine);  // oneDNN allocates; plan time only
    fill(*made);
    packed.push_back(made);
    return made;
  }

  std::shared_ptr<PackedWeights> packed_copy(const WeightMatrix& weights,
                                             const dnnl::memory::desc& desc) {
    return shared_copy(weights, desc, [&](PackedWeights& made) {
      dnnl::memory stored(stored_weights_desc(weights.rows, weights.cols, DataType::f32), engine,
                          const_cast<void*>(weights.data));
      dnnl::reorder reorder(stored, made.memory);
      run_primitive(reorder, stream, {{DNNL_ARG_FROM, stored}, {DNNL_ARG_TO, made.memory}});
    });
  }

  // 128 * the sum of each int8 weight row (s32 [n]): what the few-row kernel subtracts for its
  // u8 x. Made once per weight matrix, shared by the 16 row counts planned for it.
  std::shared_ptr<PackedWeights> row_shift_sums(const WeightMatrix& weights) {
    const dnnl::memory::desc desc({weights.rows}, DataType::s32, dnnl::memory::format_tag::a);
    return shared_copy(weights, desc, [&](PackedWeights& made) {
      const auto* w = static_cast<const int8_t*>(weights.data);
      auto* sums = static_cast<int32_t*>(made.memory.get_data_handle());
      for (int64_t r = 0; r < weights.rows; ++r) {
        int32_t sum = 0;
        for (int64_t c = 0; c < weights.cols; ++c) sum += w[r * weights.cols + c];
        sums[r] = 128 * sum;
      }
    });
  }

  // f32 weights in panels of 16 rows (f32_panel_products_avx2): for each k, the 16 rows' values;
  // the last panel padded with zero rows.
  std::shared_ptr<PackedWeights> f32_panels(const WeightMatrix& weights) {
    const int64_t n = weights.rows, k = weights.cols, padded_n = padded_to_panels(n);
    const dnnl::memory::desc desc({padded_n * k}, DataType::f32, dnnl::memory::format_tag::a);
    return shared_copy(weights, desc, [&](PackedWeights& made) {
      const auto* from = static_cast<const float*>(weights.data);
      auto* to = static_cast<float*>(made.memory.get_data_handle());
      std::fill(to, to + padded_n * k, 0.0f);
      for (int64_t r = 0; r < n; ++r) {
        float* panel = to + r / kPanelColumns * kPanelColumns * k;
        for (int64_t c = 0; c < k; ++c) panel[c * kPanelColumns + r % kPanelColumns] = from[r * k + c];
      }
    });
  }

  // The weights in the panel layout (panel_bytes), followed by each padded row's 128 * sum(w)
  // (s32); row_scales padded with zeros. The panel kernels read it: int8_panel_products_avx2
  // and int8_panel_products_512 without VNNI the 7-bit copy (seven_bits), with VNNI the stored
  // values. (One process makes one kind, fixed by cpu_isa(), so the two never meet in `packed`.)
  std::shared_ptr<PackedWeights> int8_panels(const WeightMatrix& weights, bool seven_bits) {
    const int64_t n = weights.rows, k = weights.cols, padded_n = padded_to_panels(n);
    const int64_t panels_size = padded_n / kPanelColumns * panel_bytes(k);
    const dnnl::memory::desc desc({panels_size + padded_n * 4}, DataType::s8,
                                  dnnl::memory::format_tag::a);
    return shared_copy(weights, desc, [&](PackedWeights& made) {
      const auto* from = static_cast<const int8_t*>(weights.data);
      auto* to = static_cast<int8_t*>(made.memory.get_data_handle());
      auto* shift_sums = reinterpret_cast<int32_t*>(to + panels_size);
      std::fill(to, to + panels_size, int8_t{0});
      std::fill(shift_sums, shift_sums + padded_n, 0);
      for (int64_t r = 0; r < n; ++r) {
        int8_t* panel = to + r / kPanelColumns * panel_bytes(k);
        int32_t sum = 0;
        for (int64_t c = 0; c < k; ++c) {
          const int8_t value = seven_bits ? to_seven_bits(from[r * k + c]) : from[r * k + c];
          panel[c / 4 * 4 * kPanelColumns + r % kPanelColumns * 4 + c % 4] = value;
          sum += value;
        }
        shift_sums[r] = 128 * sum;
      }
      made.row_scales.assign(padded_n, 0.0f);
      const float scale_factor = seven_bits ? 2.0f : 1.0f;  // a 7-bit value is half the stored
      for (int64_t r = 0; r < n; ++r) made.row_scales[r] = scale_factor * weights.row_scales[r];
    });
  }

  std::shared_ptr<PackedWeights> seven_bit_copy(const WeightMatrix& weights) {
    const auto desc = stored_weights_desc(weights.rows, weights.cols, DataType::s8);
    return shared_copy(weights, desc, [&](PackedWeights& made) {
      const auto* from = static_cast<const int8_t*>(weights.data);
      auto* to = static_cast<int8_t*>(made.memory.get_data_handle());
      const int64_t count = weights.rows * weights.cols;
      for (int64_t i = 0; i < count; ++i) to[i] = to_seven_bits(from[i]);
      made.row_scales.assign(weights.row_scales, weights.row_scales + weights.rows);
      for (float& scale : made.row_scales) scale *= 2.0f;
    });
  }
};

CpuEngine::CpuEngine(int threads) : threads_(std::max(1, threads)), impl_(new Impl) {}
CpuEngine::~CpuEngine() = default;
dnnl::engine& CpuEngine::engine() { return impl_->engine; }
dnnl::stream& CpuEngine::stream() { return impl_->stream; }
void CpuEngine::set_weight_packing(bool enabled) { impl_->pack_weights = enabled; }
bool CpuEngine::weight_packing() const { return impl_->pack_weights; }

size_t CpuEngine::packed_weight_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  size_t bytes = 0;
  for (const auto& entry : impl_->packed) {
    if (auto alive = entry.lock()) bytes += alive->desc.get_size();
  }
  return bytes;
}

struct StaticMatmul::Impl {
  CpuEngine* engine = nullptr;
  int64_t m = 0, n = 0, k = 0;
  bool int8 = false;
  bool with_bias = false;
  dnnl::matmul primitive;
  std::string implementation;
  std::shared_ptr<PackedWeights> packed;  // null when oneDNN reads the stored weights
  // Int8 products of at most int8_row_kernel_max_rows() rows by xf's kernel instead of oneDNN:
  // the weights it reads (stored, or their 7-bit copy), their row scales and each row's
  // 128 * sum of weights (plan time).
  Int8RowProducts int8_row_products = nullptr;
  Int8PanelProducts int8_panel_products = nullptr;  // instead: panels (AVX2; VNNI above 16 rows)
  const int8_t* int8_weights = nullptr;
  int64_t int8_weight_row_bytes = 0;  // k, or in panels panel_bytes(k) / 16
  const float* int8_row_scales = nullptr;
  std::shared_ptr<PackedWeights> shift_sums_copy;  // the engine's, shared across row counts
  bool f32_panels = false;  // f32 by xf's kernel, reading packed (f32_panel_products_avx2)
  const int32_t* shift_sums = nullptr;
  // Memory objects made once; run() only re-points their data handles (no allocation).
  dnnl::memory source, destination, bias, scratchpad;
  std::unordered_map<int, dnnl::memory> args;
  // Workspace layout: int8 only: [m*k int8 quantized x][m f32 row scales of x]; then scratchpad.
  size_t scales_offset = 0;
  size_t scratchpad_offset = 0;
  size_t scratchpad_bytes = 0;
  size_t workspace_bytes = 0;
};

StaticMatmul::StaticMatmul(CpuEngine& engine, int64_t m, const WeightMatrix& weights,
                           bool with_bias)
    : impl_(new Impl) {
  if (weights.dtype == DType::f16 || weights.dtype == DType::bf16) {
    throw Error(std::string("StaticMatmul: ") + dtype_name(weights.dtype) +
                " weights are not supported on the CPU; widen them to f32 when loading");
  }
  if (m <= 0 || weights.rows <= 0 || weights.cols <= 0 || weights.data == nullptr) {
    throw Error("StaticMatmul: empty shape (m " + std::to_string(m) + ", weights " +
                std::to_string(weights.rows) + " x " + std::to_string(weights.cols) + ")");
  }
  if (weights.dtype == DType::int8 && weights.row_scales == nullptr) {
    throw Error("StaticMatmul: int8 weights without row scales");
  }
  Impl& s = *impl_;
  s.engine = &engine;
  s.m = m;
  s.n = weights.rows;
  s.k = weights.cols;
  s.int8 = weights.dtype == DType::int8;
  s.with_bias = with_bias;
  dnnl::engine& eng = engine.engine();
  // oneDNN fixes a primitive's thread partition when it is made, from the calling thread's
  // OpenMP count (the runtime measured 9x slower decoding with primitives made for more threads
  // than run them): make it at the engine's count, as run() runs it.
  if (omp_get_max_threads() != engine.threads()) omp_set_num_threads(engine.threads());

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::memory::desc bias_desc = row_major_desc(1, s.n, DataType::f32);
  const dnnl::memory::desc source_desc =
      row_major_desc(m, s.k, s.int8 ? DataType::s8 : DataType::f32);
  const dnnl::memory::desc destination_desc = row_major_desc(m, s.n, DataType::f32);
  dnnl::matmul::primitive_desc pd;
  dnnl::memory weights_memory;
  if (s.int8) {
    // y[m, n] = x_scale[m] * (row_scale[n] * (q(x) . W^T)[m, n]) + bias[n]. oneDNN applies W's
    // scales as output scales, one per column (runtime scales, pointed at the file's row scales
    // once); the per-row input scales and the bias are our epilogue in run(): oneDNN 2.6 has
    // per-column output scales only, and a per-row binary post-op falls back to its reference
    // kernel (1000x slower, measured).
    attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    // The stored layout is read in place (measured: as fast as a packed copy, docs/KERNELS_CPU.md).
    const dnnl::memory::desc weights_desc = stored_weights_desc(s.n, s.k, DataType::s8);
    pd = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(source_desc, weights_desc, destination_desc), attr, eng);
    if (int8_kernel_reads_panels()) {
      // The kernel serves every row count here: the primitive is made for its name only and
      // never runs, so it is given the stored weights; the kernel reads the panels.
      s.packed = engine.impl_->int8_panels(weights, /*seven_bits=*/true);
      weights_memory = dnnl::memory(weights_desc, eng, const_cast<void*>(weights.data));
    } else if (int8_products_saturate()) {
      s.packed = engine.impl_->seven_bit_copy(weights);
      weights_memory = s.packed->memory;
    } else {
      weights_memory = dnnl::memory(weights_desc, eng, const_cast<void*>(weights.data));
    }
  } else {
    const dnnl::memory::desc stored = stored_weights_desc(s.n, s.k, DataType::f32);
    // With xf's kernel the primitive is made for its name only and never runs: on the stored
    // weights, so that oneDNN makes no packed copy.
    s.f32_panels = engine.weight_packing() && f32_kernel_reads_panels();
    const dnnl::memory::desc wanted =
        engine.weight_packing() && !s.f32_panels
            ? dnnl::memory::desc({s.k, s.n}, DataType::f32, dnnl::memory::format_tag::any)
            : stored;
    pd = with_bias
             ? dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc(source_desc, wanted, bias_desc, destination_desc), attr, eng)
             : dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc(source_desc, wanted, destination_desc), attr, eng);
    if (pd.weights_desc() == stored) {
      weights_memory = dnnl::memory(stored, eng, const_cast<void*>(weights.data));
    } else {
      s.packed = engine.impl_->packed_copy(weights, pd.weights_desc());
      weights_memory = s.packed->memory;
    }
  }
  s.primitive = dnnl::matmul(pd);
  s.implementation = pd.impl_info_str();
  if (s.int8) {
    s.int8_panel_products = int8_panel_products_for(m, s.k);
    if (s.int8_panel_products == nullptr && m <= int8_row_kernel_max_rows()) {
      s.int8_row_products = int8_row_products_for(s.k);
    }
    if (s.int8_panel_products != nullptr && !int8_kernel_reads_panels()) {
      s.packed = engine.impl_->int8_panels(weights, /*seven_bits=*/int8_products_saturate());
    }
  }
  const bool int8_by_xf = s.int8_row_products != nullptr || s.int8_panel_products != nullptr;
  if (int8_by_xf) {
    // The weights oneDNN reads (the 7-bit copy where its products saturate, as the AVX2
    // kernel's vpmaddubsw does too), so that a row's result is the same on either path.
    s.implementation = s.int8_panel_products == nullptr || int8_kernel_reads_panels()
                           ? int8_row_kernel_name()
                       : cpu_isa() == CpuIsa::avx512_vnni ? "xf:int8_panels_avx512_vnni"
                                                          : "xf:int8_panels_avx512";
    if (s.int8_panel_products != nullptr) {
      s.int8_weights = static_cast<const int8_t*>(s.packed->memory.get_data_handle());
      s.int8_weight_row_bytes = panel_bytes(s.k) / kPanelColumns;
      s.int8_row_scales = s.packed->row_scales.data();
      s.shift_sums = reinterpret_cast<const int32_t*>(
          s.int8_weights + padded_to_panels(s.n) / kPanelColumns * panel_bytes(s.k));
    } else {
      WeightMatrix read = weights;
      if (s.packed) {
        read.data = s.packed->memory.get_data_handle();
        read.row_scales = s.packed->row_scales.data();
      }
      s.int8_weights = static_cast<const int8_t*>(read.data);
      s.int8_weight_row_bytes = s.k;
      s.int8_row_scales = read.row_scales;
      s.shift_sums_copy = engine.impl_->row_shift_sums(read);
      s.shift_sums = static_cast<const int32_t*>(s.shift_sums_copy->memory.get_data_handle());
    }
  }
  if (s.f32_panels) {
    s.packed = engine.impl_->f32_panels(weights);
    s.implementation = "xf:f32_panels_avx2";
  }
  record_implementation(s.implementation, !int8_by_xf && !s.f32_panels);

  size_t offset = 0;
  if (s.int8) {
    offset = align_up(static_cast<size_t>(m * s.k));  // quantized x
    s.scales_offset = offset;
    offset += align_up(static_cast<size_t>(m) * sizeof(float));  // its row scales
  }
  s.scratchpad_offset = offset;
  // xf's kernel needs no scratchpad (the oneDNN primitive above is made all the same, unused).
  s.scratchpad_bytes =
      int8_by_xf || s.f32_panels ? 0 : pd.scratchpad_desc().get_size();
  s.workspace_bytes = offset + align_up(s.scratchpad_bytes);

  // DNNL_MEMORY_NONE handles: run() points them at the caller's buffers.
  s.source = dnnl::memory(source_desc, eng, DNNL_MEMORY_NONE);
  s.destination = dnnl::memory(destination_desc, eng, DNNL_MEMORY_NONE);
  s.args = {
      {DNNL_ARG_SRC, s.source}, {DNNL_ARG_WEIGHTS, weights_memory}, {DNNL_ARG_DST, s.destination}};
  if (with_bias && !s.int8) {
    s.bias = dnnl::memory(bias_desc, eng, DNNL_MEMORY_NONE);
    s.args[DNNL_ARG_BIAS] = s.bias;
  }
  if (s.int8) {
    const float* w_scales = s.packed && !int8_kernel_reads_panels() ? s.packed->row_scales.data()
                                                                    : weights.row_scales;
    s.args[DNNL_ARG_ATTR_OUTPUT_SCALES] =
        dnnl::memory({{s.n}, DataType::f32, {1}}, eng, const_cast<float*>(w_scales));
  }
  if (s.scratchpad_bytes > 0) {
    s.scratchpad = dnnl::memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
    s.args[DNNL_ARG_SCRATCHPAD] = s.scratchpad;
  }
}

StaticMatmul::~StaticMatmul() = default;
StaticMatmul::StaticMatmul(StaticMatmul&&) noexcept = default;
StaticMatmul& StaticMatmul::operator=(StaticMatmul&&) noexcept = default;

int64_t StaticMatmul::m() const { return impl_->m; }
int64_t StaticMatmul::n() const { return impl_->n; }
int64_t StaticMatmul::k() const { return impl_->k; }
size_t StaticMatmul::workspace_bytes() const { return impl_->workspace_bytes; }
const char* StaticMatmul::implementation() const { return impl_->implementation.c_str(); }
bool StaticMatmul::reads_weights_in_place() const { return impl_->packed == nullptr; }

bool StaticMatmul::holds_f32_weight_rows() const { return impl_->f32_panels; }

void StaticMatmul::copy_weight_row(int64_t row, int64_t first, int64_t count, float* out) const {
  const Impl& s = *impl_;
  if (!s.f32_panels) throw Error("StaticMatmul::copy_weight_row: no f32 copy of its own");
  if (row < 0 || row >= s.n || first < 0 || count < 0 || first + count > s.k)
    throw Error("StaticMatmul::copy_weight_row: outside the weights");
  // The panel layout (f32_panel_products_avx2): a row's k values are kPanelColumns apart.
  const auto* panels = static_cast<const float*>(s.packed->memory.get_data_handle());
  const float* values = panels + row / kPanelColumns * kPanelColumns * s.k + row % kPanelColumns;
  for (int64_t c = 0; c < count; ++c) out[c] = values[(first + c) * kPanelColumns];
}

void StaticMatmul::run(const float* x, const float* bias, float* y, void* workspace,
                       int64_t rows) const {
  Impl& s = *impl_;
  if (s.with_bias && bias == nullptr)
    throw Error("StaticMatmul::run: made with a bias, given none");
  if (rows < 0 || rows > s.m) throw Error("StaticMatmul::run: rows outside 0..m (0: all m)");
  // xf's kernels take any row count: only the rows that matter (the rest are the runtime's
  // padding to a planned count).
  const bool by_xf = s.int8_row_products != nullptr || s.int8_panel_products != nullptr || s.f32_panels;
  const int64_t m = by_xf && rows > 0 ? rows : s.m;
  char* bytes = static_cast<char*>(workspace);
  float* x_scales = reinterpret_cast<float*>(bytes + s.scales_offset);  // int8: [m]
  if (s.int8) {
    int8_t* quantized = reinterpret_cast<int8_t*>(bytes);
    quantize_int8_per_row(x, m, s.k, quantized, x_scales, s.engine->threads());
    if (s.int8_row_products != nullptr || s.int8_panel_products != nullptr) {
      uint8_t* shifted = shift_to_unsigned(quantized, m * s.k);
      // One slice of weight rows a thread, a multiple of the kernel's 16 (slices of 256 rows
      // left a 256-row product on one thread of two, and split 768 rows 512 : 256).
      const int threads = s.engine->threads();
      const int64_t slice = (s.n + threads * 16 - 1) / (threads * 16) * 16;
      detail::parallel_for((s.n + slice - 1) / slice, threads,
                           m * s.n * s.k >= (1 << 18), [&](int64_t b) {
        const int64_t first = b * slice, slice_rows = std::min(slice, s.n - first);
        const int8_t* weights = s.int8_weights + first * s.int8_weight_row_bytes;
        if (s.int8_panel_products != nullptr) {  // scales x and adds the bias itself
          s.int8_panel_products(shifted, m, weights, s.k, slice_rows, s.shift_sums + first,
                                s.int8_row_scales + first, x_scales,
                                s.with_bias ? bias + first : nullptr, y + first, s.n);
        } else {
          s.int8_row_products(shifted, m, weights, s.k, slice_rows, s.shift_sums + first,
                              s.int8_row_scales + first, y + first, s.n);
        }
      });
      if (s.int8_panel_products == nullptr) {
        scale_rows_add_bias(y, m, s.n, x_scales, s.with_bias ? bias : nullptr, s.engine->threads());
      }
      return;
    }
    s.source.set_data_handle(quantized);
  } else {
#if defined(XF_INT8_ROW_KERNEL) && defined(__x86_64__)
    if (s.f32_panels) {  // one slice of panels a thread
      const int threads = s.engine->threads();
      if (omp_get_max_threads() != threads) omp_set_num_threads(threads);  // as below
      const int64_t slice =
          (s.n + threads * kPanelColumns - 1) / (threads * kPanelColumns) * kPanelColumns;
      const auto* panels = static_cast<const float*>(s.packed->memory.get_data_handle());
      detail::parallel_for((s.n + slice - 1) / slice, threads, m * s.n * s.k >= (1 << 18),
                           [&](int64_t b) {
        const int64_t first = b * slice, slice_rows = std::min(slice, s.n - first);
        f32_panel_products_avx2(x, m, panels + first * s.k, s.k, slice_rows,
                                s.with_bias ? bias + first : nullptr, y + first, s.n);
      });
      return;
    }
#endif
    s.source.set_data_handle(const_cast<float*>(x));
    if (s.with_bias) s.bias.set_data_handle(const_cast<float*>(bias));
  }
  s.destination.set_data_handle(y);
  if (s.scratchpad_bytes > 0) s.scratchpad.set_data_handle(bytes + s.scratchpad_offset);
  // oneDNN sizes its parallel regions by the calling thread's OpenMP setting. Keep it at the
  // engine's count, which the kernels pass as `threads`: libgomp mallocs a new team whenever
  // consecutive regions differ in size.
  if (omp_get_max_threads() != s.engine->threads()) omp_set_num_threads(s.engine->threads());
  run_primitive(s.primitive, s.engine->stream(), s.args);
  if (s.int8) {
    scale_rows_add_bias(y, s.m, s.n, x_scales, s.with_bias ? bias : nullptr, s.engine->threads());
  }
}

void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl_status_t status;
  {
    BackendCallScope scope;
    status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                        ldb, beta, c, ldc);
  }
  if (status != dnnl_success) {
    throw Error("gemm: dnnl_sgemm failed (status " + std::to_string(static_cast<int>(status)) +
                ") for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                std::to_string(k));
  }
}

struct Bf16Gemm::Impl {
  struct Shape {
    bool transpose_a, transpose_b;
    int64_t m, n, k, ldc;
    float alpha, beta;
    bool operator==(const Shape& o) const {
      return transpose_a == o.transpose_a && transpose_b == o.transpose_b && m == o.m &&
             n == o.n && k == o.k && ldc == o.ldc && alpha == o.alpha && beta == o.beta;
    }
  };
  struct ShapeHash {
    size_t operator()(const Shape& s) const {
      size_t h = std::hash<int64_t>()(s.m);
      for (int64_t v : {s.n, s.k, s.ldc}) h = h * 1000003u ^ std::hash<int64_t>()(v);
      for (float v : {s.alpha, s.beta}) h = h * 1000003u ^ std::hash<float>()(v);
      return h * 4 + (s.transpose_a ? 2 : 0) + (s.transpose_b ? 1 : 0);
    }
  };
  // Enough for every batch shape of a training run; past it the cache starts over.
  static constexpr size_t kMaxPrimitives = 4096;

  int threads = 1;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<uint16_t> a, b;  // bf16 copies of this product's A and B, compact
  struct Product {
    dnnl::matmul primitive;
    dnnl::memory::desc a, b, c;
  };
  std::unordered_map<Shape, Product, ShapeHash> products;
  std::string implementation;

  const Product& product(const Shape& s) {
    auto found = products.find(s);
    if (found != products.end()) return found->second;
    if (products.size() >= kMaxPrimitives) products.clear();
    // A [m, k] and B [k, n] as the compact copies lay them out: a transposed operand is a
    // column-major view of its stored rows.
    using Desc = dnnl::memory::desc;
    const Desc a_desc = s.transpose_a ? Desc({s.m, s.k}, DataType::bf16, {1, s.m})
                                      : Desc({s.m, s.k}, DataType::bf16, {s.k, 1});
    const Desc b_desc = s.transpose_b ? Desc({s.k, s.n}, DataType::bf16, {1, s.k})
                                      : Desc({s.k, s.n}, DataType::bf16, {s.n, 1});
    const Desc c_desc({s.m, s.n}, DataType::f32, {s.ldc, 1});
    dnnl::primitive_attr attr;
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    if (s.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(s.beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, engine);
    implementation = pd.impl_info_str();
    return products.emplace(s, Product{dnnl::matmul(pd), a_desc, b_desc, c_desc}).first->second;
  }
};

Bf16Gemm::Bf16Gemm(int threads) : impl_(new Impl) {
  if (!bf16_products_in_hardware()) {
    throw Error("bf16 matrix products need a CPU with AVX512-BF16 or AMX (oneDNN found neither)");
  }
  impl_->threads = std::max(1, threads);
}

Bf16Gemm::~Bf16Gemm() = default;

const char* Bf16Gemm::implementation() const { return impl_->implementation.c_str(); }

void Bf16Gemm::run(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  Impl& s = *impl_;
  if (k == 0) {  // no products: C = beta C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or, transposed, [n, k].
  const int64_t a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
  const int64_t b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
  if (s.a.size() < static_cast<size_t>(m * k)) s.a.resize(m * k);
  if (s.b.size() < static_cast<size_t>(k * n)) s.b.resize(k * n);
  round_rows_to_bf16(a, a_rows, a_cols, lda, s.a.data(), s.threads);
  round_rows_to_bf16(b, b_rows, b_cols, ldb, s.b.data(), s.threads);
  // As StaticMatmul: oneDNN sizes its parallel regions by the calling thread's OpenMP count.
  if (omp_get_max_threads() != s.threads) omp_set_num_threads(s.threads);
  try {
    const Impl::Product& product =
        s.product({transpose_a, transpose_b, m, n, k, ldc, alpha, beta});
    dnnl::memory a_memory(product.a, s.engine, s.a.data());
    dnnl::memory b_memory(product.b, s.engine, s.b.data());
    dnnl::memory c_memory(product.c, s.engine, c);
    run_primitive(product.primitive, s.stream,
                  {{DNNL_ARG_SRC, a_memory},
                   {DNNL_ARG_WEIGHTS, b_memory},
                   {DNNL_ARG_DST, c_memory}});
  } catch (const dnnl::error& e) {
    throw Error("bf16 gemm: oneDNN failed (" + std::string(e.what()) + ") for m " +
                std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k));
  }
}

void run_primitive(const dnnl::primitive& primitive, dnnl::stream& stream,
                   const std::unordered_map<int, dnnl::memory>& args) {
  BackendCallScope scope;
  primitive.execute(stream, args);
  stream.wait();
}

bool inside_backend_call() { return g_backend_depth.load(std::memory_order_relaxed) > 0; }

}  // namespace xf::cpu

// ---- The trainer's products (float: gemm() or Bf16Gemm; double: plain loops) ----
namespace xf::cpu {
namespace {

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major.
template <typename T>
void general_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
                  int threads, Bf16Gemm* bf16) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // oneDNN runs on the OpenMP pool the caller sized (Bf16Gemm: at its own thread count).
    if (bf16) bf16->run(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else xf::cpu::gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    if (bf16) throw Error("gemm: bf16 products are for float");
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const T av = transpose_a ? a[p * lda + i] : a[i * lda + p];
          const T bv = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
          sum += av * bv;
        }
        c[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
      }
    }
  }
}

}  // namespace

template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                    int64_t out, T* y, int threads, Bf16Gemm* bf16) {
  // The bias is written first and the product added onto it (beta = 1): one pass over y.
  T beta = 0;
  if (bias) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
    beta = 1;
  }
  general_gemm<T>(false, true, rows, out, in, T(1), x, in, weight, in, beta, y, out, threads, bf16);
}

template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                     int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias, int threads,
                     Bf16Gemm* bf16) {
  if (dx)  // dx[rows, in] = dy[rows, out] W[out, in]
    general_gemm<T>(false, false, rows, in, out, T(1), dy, out, weight, in, accumulate_dx ? T(1) : T(0),
            dx, in, threads, bf16);
  // dW[out, in] += dy^T[out, rows] x[rows, in]
  general_gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dweight, in, threads, bf16);
  if (dbias) bias_backward(dy, rows, out, dbias, threads);
}

#define XF_INSTANTIATE(T) \
  template void linear_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                  int, Bf16Gemm*); \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                   bool, T*, T*, int, Bf16Gemm*);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
