#pragma once
// How a weight matrix's values are arranged in memory: the model file's per-tensor `layout`
// (format version 4, format/README.md "Weight layouts") and what the CPU kernels read
// (kernels_cpu/src/matmul_kernels_cpu.h). A matrix is [rows, cols] = [n, k] (one row per output
// feature); int8 rows keep their f32 row scales, in row order, whatever the layout.
//
//   rows             row-major, as every file before version 4
//   panels           panels of kPanelRows rows, the last padded with zero rows:
//                      int8: for each group of 4 columns (the last padded with zeros), the 4 bytes
//                            of each of the 16 rows (64 bytes a group; int8_panel_products_*)
//                      f32:  for each column, the 16 rows' values (f32_panel_products_avx2)
//   seven_bit_rows   int8 only: rows holding to_seven_bits(q) with each row scale doubled, the
//                    values the kernels of CPUs without VNNI multiply (they add pairs of byte
//                    products in saturating int16, which 7 bits keep exact)
//   seven_bit_panels int8 only: panels of those 7-bit values
// A 7-bit matrix is still an int8 matrix (value = q * scale): any reader computes it right, as
// the 7-bit model the CPUs without VNNI compute anyway.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xf/dtype.h"

namespace xf {

enum class WeightLayout : uint8_t { rows = 0, panels = 1, seven_bit_rows = 2, seven_bit_panels = 3 };
inline constexpr int kNumWeightLayouts = 4;

// "rows", "panels", "7-bit rows", "7-bit panels".
inline const char* weight_layout_name(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::rows: return "rows";
    case WeightLayout::panels: return "panels";
    case WeightLayout::seven_bit_rows: return "7-bit rows";
    case WeightLayout::seven_bit_panels: return "7-bit panels";
  }
  return "unknown";
}
inline bool in_panels(WeightLayout layout) {
  return layout == WeightLayout::panels || layout == WeightLayout::seven_bit_panels;
}
inline bool in_seven_bits(WeightLayout layout) {
  return layout == WeightLayout::seven_bit_rows || layout == WeightLayout::seven_bit_panels;
}
// Whether `dtype` can be stored in `layout`: rows any; panels int8 and f32; 7-bit int8.
inline bool layout_holds(WeightLayout layout, DType dtype) {
  if (layout == WeightLayout::rows) return true;
  if (layout == WeightLayout::panels) return dtype == DType::int8 || dtype == DType::f32;
  return dtype == DType::int8;
}

// A panel: this many weight rows (the kernels' output columns).
inline constexpr int64_t kPanelRows = 16;
inline constexpr int64_t panel_groups(int64_t k) { return (k + 3) / 4; }
// Bytes of one int8 panel of row length k.
inline constexpr int64_t int8_panel_bytes(int64_t k) { return panel_groups(k) * 4 * kPanelRows; }
inline constexpr int64_t padded_to_panels(int64_t n) { return (n + kPanelRows - 1) / kPanelRows * kPanelRows; }

// Bytes of an [n, k] matrix of `dtype` in `layout` (rows: n * k values; panels: whole panels).
inline uint64_t layout_bytes(DType dtype, WeightLayout layout, uint64_t n, uint64_t k) {
  if (!in_panels(layout)) return n * k * dtype_size(dtype);
  const uint64_t panels = (n + kPanelRows - 1) / kPanelRows;
  return dtype == DType::int8 ? panels * static_cast<uint64_t>(int8_panel_bytes(static_cast<int64_t>(k)))
                              : panels * kPanelRows * k * sizeof(float);
}

// Where value (r, c) of an [n, k] matrix lies in the panel layout, in elements of the dtype.
inline int64_t panel_index(DType dtype, int64_t r, int64_t c, int64_t k) {
  if (dtype == DType::int8)
    return r / kPanelRows * int8_panel_bytes(k) + c / 4 * 4 * kPanelRows + r % kPanelRows * 4 + c % 4;
  return r / kPanelRows * kPanelRows * k + c * kPanelRows + r % kPanelRows;
}

// Round half away from zero (-127..127 -> -64..64), then clamp the two ends to +-63: an int8
// weight for the kernels that add byte products in saturating int16 (its row scale doubled).
// Written on the magnitude (halved rounding up, as an unsigned average with 0) so that a
// compiler vectorizes it: it runs over every gathered row of a shortlist.
inline int8_t to_seven_bits(int8_t value) {
  const int magnitude = value < 0 ? -value : value;
  const int halved = std::min((magnitude + 1) >> 1, 63);
  return static_cast<int8_t>(value < 0 ? -halved : halved);
}

// An [n, k] row-major matrix of `dtype` (int8 or f32) into panels: layout_bytes(.., panels, n, k)
// bytes at `to`, padding zero. seven_bits (int8): each value to_seven_bits() on the way.
inline void pack_panels(DType dtype, const void* from, int64_t n, int64_t k, void* to, bool seven_bits = false) {
  std::memset(to, 0, layout_bytes(dtype, WeightLayout::panels, n, k));
  if (dtype == DType::int8) {
    const auto* in = static_cast<const int8_t*>(from);
    auto* out = static_cast<int8_t*>(to);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int8_t v = in[r * k + c];
        out[panel_index(dtype, r, c, k)] = seven_bits ? to_seven_bits(v) : v;
      }
    return;
  }
  const auto* in = static_cast<const float*>(from);
  auto* out = static_cast<float*>(to);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) out[panel_index(dtype, r, c, k)] = in[r * k + c];
}

// The inverse: panels of an [n, k] matrix back into n * k row-major values at `to`.
inline void unpack_panels(DType dtype, const void* from, int64_t n, int64_t k, void* to) {
  if (dtype == DType::int8) {
    const auto* in = static_cast<const int8_t*>(from);
    auto* out = static_cast<int8_t*>(to);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) out[r * k + c] = in[panel_index(dtype, r, c, k)];
    return;
  }
  const auto* in = static_cast<const float*>(from);
  auto* out = static_cast<float*>(to);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) out[r * k + c] = in[panel_index(dtype, r, c, k)];
}

}  // namespace xf
