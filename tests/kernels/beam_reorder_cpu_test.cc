// The in-place beam reorder against an out-of-place gather of the same rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "random_inputs.h"
#include "xf/error.h"
#include "xf/kernels/gather.h"

namespace xf::cpu {
namespace {

// rows [count, stride] after reorder_rows_in_place must equal: row i's first row_len elements
// from row parents[i] of the original, the rest unchanged.
void expect_reordered(const std::vector<float>& before, const std::vector<float>& after,
                      const std::vector<int32_t>& parents, int64_t stride, int64_t row_len) {
  for (size_t i = 0; i < parents.size(); ++i)
    for (int64_t c = 0; c < stride; ++c) {
      const float expected = c < row_len ? before[parents[i] * stride + c] : before[i * stride + c];
      ASSERT_EQ(after[i * stride + c], expected) << "row " << i << " column " << c;
    }
}

TEST(ReorderRowsInPlace, BeamStepsMatchAGather) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t group = 4, groups = 9, count = group * groups, stride = 40, row_len = 33;
  for (int threads : {1, 2}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<float> before = random.uniform(count * stride, -1.0f, 1.0f);
      std::vector<int32_t> parents(count);
      for (int64_t i = 0; i < count; ++i)
        parents[i] = static_cast<int32_t>(i / group * group + random.integer(0, group - 1));
      // Cases a random draw rarely gives: a swap, a rotation, everything from one row, no change.
      for (int64_t j = 0; j < group; ++j) {
        parents[j] = static_cast<int32_t>(j ^ 1);
        parents[group + j] = static_cast<int32_t>(group + (j + 1) % group);
        parents[2 * group + j] = static_cast<int32_t>(2 * group + 3);
        parents[3 * group + j] = static_cast<int32_t>(3 * group + j);
      }
      std::vector<float> rows = before;
      std::vector<float> scratch(threads * group * row_len);
      reorder_rows_in_place(rows.data(), 1, 0, stride, parents.data(), count, group, row_len, scratch.data(), threads);
      expect_reordered(before, rows, parents, stride, row_len);
    }
  }
}

TEST(ReorderRowsInPlace, DroppedSentencesMoveForward) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  // Six sentences of beam 3 before; sentences 1, 3 and 4 are kept (rows move to 0..8), each
  // also reordering its beam.
  const int64_t group = 3, stride = 20, row_len = 17;
  const std::vector<float> before = random.uniform(6 * group * stride, -1.0f, 1.0f);
  const std::vector<int32_t> kept = {1, 3, 4};
  std::vector<int32_t> parents;
  for (int32_t sentence : kept)
    for (int64_t j = 0; j < group; ++j)
      parents.push_back(static_cast<int32_t>(sentence * group + random.integer(0, group - 1)));
  parents[6] = 4 * group + 1;  // the last kept sentence also swaps its first two rows
  parents[7] = 4 * group + 0;
  std::vector<float> rows = before;
  std::vector<float> scratch(2 * group * row_len);
  reorder_rows_in_place(rows.data(), 1, 0, stride, parents.data(), static_cast<int64_t>(parents.size()), group,
                        row_len, scratch.data(), 2);
  expect_reordered(before, rows, parents, stride, row_len);
}

TEST(ReorderRowsInPlace, EverySlabIsReordered) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  // 6 rows after, up to 12 before (the parents of dropped sentences' rows index the rows before).
  const int64_t group = 2, count = 6, stride = 9, row_len = 7, slabs = 5, slab_stride = 12 * stride + 3;
  for (const std::vector<int32_t>& parents : {std::vector<int32_t>{1, 1, 2, 2, 5, 4},      // beam steps
                                              std::vector<int32_t>{2, 3, 9, 8, 10, 10}}) {  // sentences dropped
    const std::vector<float> before = random.uniform(slabs * slab_stride, -1.0f, 1.0f);
    std::vector<float> rows = before;
    std::vector<float> scratch(2 * group * row_len);
    reorder_rows_in_place(rows.data(), slabs, slab_stride, stride, parents.data(), count, group, row_len,
                          scratch.data(), 2);
    for (int64_t slab = 0; slab < slabs; ++slab) {
      SCOPED_TRACE("slab " + std::to_string(slab));
      const auto first = before.begin() + slab * slab_stride;
      const std::vector<float> slab_before(first, first + slab_stride);
      const std::vector<float> slab_after(rows.begin() + slab * slab_stride, rows.begin() + (slab + 1) * slab_stride);
      expect_reordered(slab_before, slab_after, parents, stride, row_len);
      for (int64_t c = count * stride; c < slab_stride; ++c) ASSERT_EQ(slab_after[c], slab_before[c]);
    }
  }
}

TEST(ReorderRowsInPlace, RefusesParentsOutsideTheRule) {
  const int64_t group = 2, stride = 4, row_len = 4;
  std::vector<float> rows(4 * stride, 1.0f), scratch(group * row_len);
  const std::vector<float> before = rows;
  const std::vector<std::vector<int32_t>> bad = {
      {2, 1, 2, 3},   // row 0 from a later group, row 1 from its own: two groups
      {0, 1, 0, 1},   // the second group from an earlier one
      {0, -1, 2, 3},  // negative
  };
  for (const std::vector<int32_t>& parents : bad) {
    EXPECT_THROW(reorder_rows_in_place(rows.data(), 1, 0, stride, parents.data(), 4, group, row_len, scratch.data(), 1),
                 Error);
    EXPECT_EQ(rows, before);
  }
  const std::vector<int32_t> fine = {0, 1, 2, 3};
  EXPECT_THROW(reorder_rows_in_place(rows.data(), 1, 0, stride, fine.data(), 3, group, row_len, scratch.data(), 1), Error)
      << "3 rows are not whole groups of 2";
}

}  // namespace
}  // namespace xf::cpu
