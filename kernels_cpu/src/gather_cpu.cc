// Row gathers: a plain gather, and the beam search's cache reorder in place.
#include "xf/kernels/gather.h"

#include <omp.h>

#include <cstring>
#include <string>

#include "parallel_cpu.h"
#include "xf/error.h"

namespace xf::cpu {
namespace {

// Moves one group's rows from their parents; every parent lies in `source_group`.
void reorder_group(float* rows, int64_t stride, const int32_t* parents, int64_t first, int64_t group,
                   int64_t row_len, float* scratch) {
  const size_t bytes = sizeof(float) * row_len;
  // Save each row of this group that is overwritten here and read by another row of it.
  for (int64_t j = 0; j < group; ++j) {
    const int64_t r = first + j;
    if (parents[r] == r) continue;
    for (int64_t k = 0; k < group; ++k) {
      if (k != j && parents[first + k] == r) {
        std::memcpy(scratch + j * row_len, rows + r * stride, bytes);
        break;
      }
    }
  }
  for (int64_t j = 0; j < group; ++j) {
    const int64_t i = first + j, p = parents[i];
    if (p == i) continue;
    const bool saved = p >= first && p < first + group && parents[p] != p;
    std::memcpy(rows + i * stride, saved ? scratch + (p - first) * row_len : rows + p * stride, bytes);
  }
}

}  // namespace

void reorder_rows_in_place(float* rows, int64_t slabs, int64_t slab_stride, int64_t stride,
                           const int32_t* parents, int64_t count, int64_t group, int64_t row_len,
                           float* scratch, int threads) {
  if (group < 1 || count % group != 0) throw Error("reorder_rows_in_place: rows do not form whole groups");
  // Each group draws from one group at or after it; any group drawing from another makes the
  // order matter (a later group is read before it is written), so a slab's groups then run in
  // order, on one thread.
  bool across_groups = false;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t source_group = parents[i] / group, own = i / group;
    if (parents[i] < 0 || parents[i] / group != parents[i - i % group] / group || source_group < own)
      throw Error("reorder_rows_in_place: parent " + std::to_string(parents[i]) + " of row " +
                  std::to_string(i) + " is not in one group at or after the row's own");
    across_groups |= source_group != own;
  }
  const int64_t groups = count / group;
  const bool worth_sharing = slabs * count * row_len > (1 << 14);
  auto own_scratch = [&](int thread) { return scratch + static_cast<int64_t>(thread) * group * row_len; };
  if (across_groups) {
    detail::parallel_for_on_threads(slabs, threads, worth_sharing, [&](int64_t slab, int thread) {
      float* slab_scratch = own_scratch(thread);
      for (int64_t g = 0; g < groups; ++g)
        reorder_group(rows + slab * slab_stride, stride, parents, g * group, group, row_len, slab_scratch);
    });
    return;
  }
  detail::parallel_for_on_threads(slabs * groups, threads, worth_sharing, [&](int64_t item, int thread) {
    const int64_t slab = item / groups, g = item % groups;
    reorder_group(rows + slab * slab_stride, stride, parents, g * group, group, row_len, own_scratch(thread));
  });
}

void gather_rows(const float* src, int64_t src_stride, const int32_t* indices, int64_t count,
                 int64_t row_len, float* dst, int64_t dst_stride, int threads) {
  detail::parallel_for(count, threads, count * row_len > detail::kMinSharedWork, [&](int64_t i) {
    std::memcpy(dst + i * dst_stride, src + indices[i] * src_stride, row_len * sizeof(float));
  });
}

}  // namespace xf::cpu
