// Int8 weight rows into the panel layout of the int8 panel kernels (matmul_kernels_cpu.h), with
// each row's 128 * sum: at load for a whole matrix (CpuEngine::Impl::int8_panels) and once a
// batch for a lexical shortlist's rows (gather_weight_rows). Vectorized by level: the shortlist's
// gather runs once a sentence at batch 1, and its baseline build (SSE2 arithmetic for the 7-bit
// halving) was a tenth of a student's time at AVX2.
#include <algorithm>
#include <cstring>

#include "matmul_kernels_cpu.h"
#include "parallel_cpu.h"
#include "simd_cpu.h"

namespace xf::cpu {
namespace {

// A row goes through a stack chunk of this many values (a multiple of 4: whole panel groups):
// converted or copied, summed, then moved out a 4-byte group at a time.
constexpr int64_t kChunk = 512;
// How many listed rows ahead a gather prefetches.
constexpr int64_t kPrefetchAhead = 4;

// One weight row into its slot of a panel (the row's first 4-byte group); returns its sum.
XF_VECTORIZED_BODY int32_t pack_int8_row_body(const int8_t* row, int64_t k, bool seven_bits, int8_t* slot) {
  int8_t chunk[kChunk];
  int32_t sum = 0;
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int64_t n = std::min(kChunk, k - c0), groups = (n + 3) / 4;
    if (seven_bits) {
      for (int64_t c = 0; c < n; ++c) chunk[c] = to_seven_bits(row[c0 + c]);
    } else {
      std::memcpy(chunk, row + c0, static_cast<size_t>(n));
    }
    for (int64_t c = n; c < groups * 4; ++c) chunk[c] = 0;  // the last group's k padding
    for (int64_t c = 0; c < n; ++c) sum += chunk[c];
    for (int64_t g = 0; g < groups; ++g) std::memcpy(slot + (c0 / 4 + g) * 4 * kPanelColumns, chunk + 4 * g, 4);
  }
  return sum;
}
XF_DISPATCH_BY_ISA(pack_int8_row)

}  // namespace

void pack_int8_panels(const int8_t* w, int64_t k, const int32_t* ids, int64_t count, bool seven_bits,
                      int8_t* panels, int32_t* shift_sums, int threads) {
  const int64_t padded = padded_to_panels(count), stride = panel_bytes(k);
  if (padded > count) {  // the last panel's padding rows: zero values, zero sums
    int8_t* last = panels + (padded / kPanelColumns - 1) * stride;
    for (int64_t g = 0; g < panel_groups(k); ++g)
      std::memset(last + g * 4 * kPanelColumns + count % kPanelColumns * 4, 0,
                  static_cast<size_t>(4 * (padded - count)));
    std::fill(shift_sums + count, shift_sums + padded, 0);
  }
  detail::parallel_for(count, threads, count * k > detail::kMinSharedWork, [&](int64_t i) {
    const int8_t* row = w + (ids != nullptr ? ids[i] : i) * k;
    if (ids != nullptr && i + kPrefetchAhead < count) {  // listed rows lie apart: the prefetcher cannot guess them
      const int8_t* ahead = w + static_cast<int64_t>(ids[i + kPrefetchAhead]) * k;
      for (int64_t c = 0; c < k; c += 64) __builtin_prefetch(ahead + c);
    }
    int8_t* slot = panels + i / kPanelColumns * stride + i % kPanelColumns * 4;
    shift_sums[i] = 128 * pack_int8_row(row, k, seven_bits, slot);
  });
}

}  // namespace xf::cpu
