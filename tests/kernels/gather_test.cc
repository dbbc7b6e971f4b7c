// Row copies: gather_rows (the beam search's reorder of caches and states, any row stride) for
// every element type a device has, and CUDA's f32 <-> f16 conversion; all exact.
#include <gtest/gtest.h>

#include <vector>

#include "kernel_device.h"
#include "xf/format/dtype_convert.h"

namespace xf::test {
namespace {

using Gather = KernelTest;

TEST_P(Gather, CopiesTheIndexedRowsWithStrides) {
  for (auto [row_len, src_stride, dst_stride] :
       {std::tuple<int64_t, int64_t, int64_t>{33, 40, 35}, {300, 310, 305}}) {
    const int64_t src_rows = 8, count = 12;
    const std::vector<float> src = uniform(src_rows * src_stride, -100.0f, 100.0f);
    std::vector<int32_t> indices(count);
    for (int32_t& index : indices) index = static_cast<int32_t>(random.integer(0, src_rows - 1));
    indices[1] = indices[0];  // a beam may be chosen twice
    const float untouched = -7.0f;  // the gaps between dst rows must stay as they were
    std::vector<double> expected(count * dst_stride, untouched);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < row_len; ++c) expected[i * dst_stride + c] = src[indices[i] * src_stride + c];
    const std::vector<float> got = device().gather_rows(
        src, src_stride, indices, row_len, std::vector<float>(count * dst_stride, untouched), dst_stride);
    EXPECT_EQ(to_double(got), expected) << "row_len " << row_len;  // a copy: exact
    if (!device().has(Feature::gather_int32)) continue;
    std::vector<int32_t> src_int(src.size());
    for (size_t i = 0; i < src.size(); ++i) src_int[i] = static_cast<int32_t>(src[i] * 1000.0f);
    const std::vector<int32_t> got_int = device().gather_rows_int32(
        src_int, src_stride, indices, row_len, std::vector<int32_t>(count * dst_stride, -7), dst_stride);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < dst_stride; ++c)
        ASSERT_EQ(got_int[i * dst_stride + c], c < row_len ? src_int[indices[i] * src_stride + c] : -7)
            << "int32 row " << i << " column " << c;
  }
}

XF_KERNEL_TEST_DEVICES(Gather, all_devices());

using Convert = KernelTest;

// f32 -> f16 rounds as the format's float_to_half (nearest even, saturating, subnormals), and
// back exactly.
TEST_P(Convert, F32ToF16MatchesHostRoundingAndBack) {
  std::vector<float> values = random.uniform(5000, -70000.0f, 70000.0f);  // some beyond f16's max
  const std::vector<float> small = random.uniform(5000, -1e-4f, 1e-4f);   // f16 subnormals
  values.insert(values.end(), small.begin(), small.end());
  std::vector<uint16_t> bits;
  std::vector<float> back;
  device().convert(values, bits, back);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(bits[i], float_to_half(values[i])) << "value " << values[i];
    ASSERT_EQ(back[i], half_to_float(float_to_half(values[i]))) << "value " << values[i];
  }
}

XF_KERNEL_TEST_DEVICES(Convert, devices_with(Feature::convert));

}  // namespace
}  // namespace xf::test
