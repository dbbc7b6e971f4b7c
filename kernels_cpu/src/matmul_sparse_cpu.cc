// Products over a ReLU's output (SparseInputMatmul, xf/kernels/matmul.h): y = x W^T where most
// of x is exactly zero (91.6% of the bundled model's FFN hidden values on test.tsv). A row with
// few nonzeros adds up W's columns for them alone, one fused multiply-add each; a row with many
// runs with other dense rows over every column of W (a register tile of 6 rows at AVX-512, 3 at
// AVX2, as a dense product does). Both add
// each output's terms in the order of k with one FMA each from 0, and a zero term leaves such a
// sum as it is, so a row's result is the same whichever way it ran, whatever its batch and
// thread. x86-64 with AVX2 + FMA or AVX-512; available() is false elsewhere.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "matmul_kernels_cpu.h"  // record_implementation
#include "parallel_cpu.h"
#include "xf/error.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels_cpu/isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define XF_SPARSE_KERNELS 1
#endif

namespace xf::cpu {
namespace {

constexpr int64_t kColumnBlock = 64;  // N is a multiple of it: whole tiles and sparse blocks
// A row whose nonzeros are at most k / kSparseShare runs alone over them; above, the dense tile
// (at a quarter, one row's pass over its nonzeros costs about what its share of a dense tile
// does: the tile loads each weight once for 4 rows).
constexpr int64_t kSparseShare = 4;

#if defined(XF_SPARSE_KERNELS)
// For each 8-bit mask, the positions of its set bits in ascending order (then zeros).
struct BitPositions {
  alignas(32) int32_t of[256][8];
};
constexpr BitPositions bit_positions() {
  BitPositions table{};
  for (int mask = 0; mask < 256; ++mask) {
    int count = 0;
    for (int bit = 0; bit < 8; ++bit)
      if (mask & (1 << bit)) table.of[mask][count++] = bit;
  }
  return table;
}
constexpr BitPositions kBitPositions = bit_positions();

// matmul_sparse_body_cpu.inc, built twice: for AVX-512 with zmm vectors, for AVX2 with ymm ones.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#endif
namespace avx512 {
struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kWideVectors = 16;  // 256 columns: 16 of the 32 registers hold the sums
  static constexpr int kTileRows = 6, kTileVectors = 4;  // 24 sums, 6 broadcasts, 1 column
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V broadcast(float v) { return _mm512_set1_ps(v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // Writes first + i for each x[i] (16 values) that is not zero (NaN counts as not zero), in
  // order, into the 16 ints at out; returns how many.
  static int store_nonzero_indices(const float* x, int32_t first, int32_t* out) {
    const __mmask16 nonzero = _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(first),
                                           _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    // The register form: vpcompressd to memory is microcoded on Zen 4.
    _mm512_storeu_si512(out, _mm512_maskz_compress_epi32(nonzero, index));
    return __builtin_popcount(nonzero);
  }
};
#include "matmul_sparse_body_cpu.inc"
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
struct Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kWideVectors = 12;  // 96 columns: 12 of the 16 registers hold the sums
  static constexpr int kTileRows = 3, kTileVectors = 4;  // 12 sums, 3 broadcasts, 1 column
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V broadcast(float v) { return _mm256_set1_ps(v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // As Avx512's, for 8 values: the positions of a mask's bits from a table (AVX2 has no compress).
  static int store_nonzero_indices(const float* x, int32_t first, int32_t* out) {
    const int nonzero = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    const __m256i positions = _mm256_load_si256(reinterpret_cast<const __m256i*>(kBitPositions.of[nonzero]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi32(_mm256_set1_epi32(first), positions));
    return __builtin_popcount(static_cast<unsigned>(nonzero));
  }
};
#include "matmul_sparse_body_cpu.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

bool level_has_kernels() {
#if defined(XF_SPARSE_KERNELS)
  const CpuIsa isa = cpu_isa();
  return isa >= CpuIsa::avx2 && isa <= CpuIsa::avx512_vnni;
#else
  return false;
#endif
}

}  // namespace

bool SparseInputMatmul::available(const WeightMatrix& weights) {
  return level_has_kernels() && weights.dtype == DType::f32 && weights.layout == WeightLayout::rows &&
         weights.rows > 0 && weights.rows % kColumnBlock == 0 && weights.cols > 0 && weights.cols % 16 == 0;
}

SparseInputMatmul::SparseInputMatmul(const WeightMatrix& weights, int threads)
    : n_(weights.rows), k_(weights.cols), threads_(threads) {
  if (!available(weights))
    throw Error("SparseInputMatmul: needs f32 weights in rows, a multiple of 64 rows and of 16 columns, "
                "at AVX2 or AVX-512");
  // W [N, K] -> W^T [K, N]: a nonzero x[j] then reads one contiguous run of N weights.
  transposed_.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n_ * k_) * sizeof(float))));
  if (!transposed_) throw Error("SparseInputMatmul: out of memory for the transposed weights");
  const float* w = static_cast<const float*>(weights.data);
  for (int64_t j = 0; j < k_; ++j)
    for (int64_t c = 0; c < n_; ++c) transposed_.get()[j * n_ + c] = w[c * k_ + j];
  record_implementation(cpu_isa() >= CpuIsa::avx512 ? "xf:sparse_input_avx512" : "xf:sparse_input_avx2", false);
}

size_t SparseInputMatmul::workspace_bytes() const {
  return static_cast<size_t>(std::max(threads_, 1)) * static_cast<size_t>(k_ + 16) * sizeof(int32_t);
}

void SparseInputMatmul::run(const float* x, float* y, int64_t rows, void* workspace) const {
#if defined(XF_SPARSE_KERNELS)
  // One contiguous share of the rows a thread (a row's sums are the same in any share).
  const int64_t shares = std::min<int64_t>(std::max(threads_, 1), rows);
  const bool avx512 = cpu_isa() >= CpuIsa::avx512;
  detail::parallel_for_on_threads(shares, threads_, rows * n_ * k_ > detail::kMinSharedWork,
                                  [&](int64_t share, int thread) {
                                    int32_t* indices = static_cast<int32_t*>(workspace) + thread * (k_ + 16);
                                    const int64_t first = rows * share / shares, end = rows * (share + 1) / shares;
                                    (avx512 ? avx512::product_rows : avx2::product_rows)(
                                        x, first, end, k_, transposed_.get(), n_, y, indices);
                                  });
#else
  (void)x, (void)y, (void)rows, (void)workspace;
  throw Error("SparseInputMatmul: no kernel on this architecture");
#endif
}

}  // namespace xf::cpu
