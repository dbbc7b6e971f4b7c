// The one weight store of every backend (runtime/src/weight_store.h): conversions, the one
// copy per name and dtype, in-place reads on a host device, uploads on a device with memory of
// its own.
#include "weight_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tiny_model.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"

namespace xf::runtime {
namespace {

std::shared_ptr<const ModelFile> tiny_file(DType matrix_dtype) {
  test::TinyModelOptions options;
  options.matrix_dtype = matrix_dtype;
  return ModelFile::open(test::tiny_model_file(options, dtype_name(matrix_dtype)));
}

const TensorView& first_of_rank(const ModelFile& file, uint32_t rank) {
  for (const TensorView& t : file.tensors())
    if (t.rank == rank) return t;
  throw std::runtime_error("no tensor of that rank");
}

std::vector<float> widened(const TensorView& t) {
  std::vector<float> values(t.elements());
  widen_to_f32(t, values.data());
  return values;
}

TEST(WeightStore, HostDeviceReadsTheFileInItsStoredDtypeAndCopiesOnlyWhenAsked) {
  const auto file = tiny_file(DType::f32);
  const TensorView& matrix = first_of_rank(*file, 2);
  const std::string name(matrix.name);
  WeightStore store(*file);
  const WeightView in_place = store.get(name, DType::f32);
  EXPECT_EQ(in_place.data, matrix.data);
  EXPECT_EQ(in_place.rows, static_cast<int64_t>(matrix.rows()));
  EXPECT_EQ(in_place.cols, static_cast<int64_t>(matrix.cols()));
  EXPECT_FALSE(store.has_copy(name, DType::f32));

  const WeightView copy = store.get(name, DType::f32, /*copy=*/true);
  EXPECT_NE(copy.data, matrix.data);
  EXPECT_EQ(std::memcmp(copy.data, matrix.data, sizeof(float) * matrix.elements()), 0);
  EXPECT_TRUE(store.has_copy(name, DType::f32));
  EXPECT_EQ(store.get(name, DType::f32, true).data, copy.data) << "one copy per name and dtype";
}

TEST(WeightStore, ConvertsAsTheConverterDoes) {
  const auto file = tiny_file(DType::f16);
  const TensorView& matrix = first_of_rank(*file, 2);
  ASSERT_EQ(matrix.dtype, DType::f16);
  const std::string name(matrix.name);
  const std::vector<float> values = widened(matrix);
  WeightStore store(*file);

  const WeightView f32 = store.get(name, DType::f32);
  EXPECT_EQ(std::memcmp(f32.data, values.data(), sizeof(float) * values.size()), 0);

  std::vector<int8_t> quantized(values.size());
  std::vector<float> scales(matrix.rows());
  quantize_rows_int8(values.data(), matrix.rows(), matrix.cols(), quantized.data(), scales.data());
  const WeightView int8 = store.get(name, DType::int8);
  ASSERT_NE(int8.row_scales, nullptr);
  EXPECT_EQ(std::memcmp(int8.data, quantized.data(), quantized.size()), 0);
  EXPECT_EQ(std::memcmp(int8.row_scales, scales.data(), sizeof(float) * scales.size()), 0);

  const WeightView bf16 = store.get(name, DType::bf16);
  const auto* bits = static_cast<const uint16_t*>(bf16.data);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(bits[i], float_to_bfloat16(values[i])) << i;

  EXPECT_EQ(store.get(name, DType::f16).data, matrix.data);
  EXPECT_EQ(store.get(name, DType::f32).data, f32.data);
}

// A device with memory of its own: every tensor is uploaded once per dtype, the stored bytes
// included, and int8 scales go up with their values.
TEST(WeightStore, UploadsEachTensorOncePerDtype) {
  const auto file = tiny_file(DType::f16);
  const TensorView& matrix = first_of_rank(*file, 2);
  const TensorView& vector = first_of_rank(*file, 1);
  std::vector<std::unique_ptr<std::vector<std::byte>>> device;
  WeightStore store(*file, [&](const void* bytes, size_t size) {
    device.push_back(std::make_unique<std::vector<std::byte>>(size));
    std::memcpy(device.back()->data(), bytes, size);
    return static_cast<const void*>(device.back()->data());
  });
  const std::string name(matrix.name);
  const WeightView f16 = store.get(name, DType::f16);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_NE(f16.data, matrix.data);
  EXPECT_EQ(std::memcmp(f16.data, matrix.data, 2 * matrix.elements()), 0);
  EXPECT_EQ(store.get(name, DType::f16).data, f16.data);
  EXPECT_EQ(device.size(), 1u);

  store.get(name, DType::int8);
  EXPECT_EQ(device.size(), 3u);
  const WeightView bias = store.get(std::string(vector.name), DType::f32);
  EXPECT_EQ(device.size(), 4u);
  const std::vector<float> expected = widened(vector);
  EXPECT_EQ(std::memcmp(bias.data, expected.data(), sizeof(float) * expected.size()), 0);
}

TEST(WeightStore, UnknownNameIsAnError) {
  const auto file = tiny_file(DType::f32);
  WeightStore store(*file);
  EXPECT_THROW(store.get("no.such.tensor", DType::f32), Error);
}

}  // namespace
}  // namespace xf::runtime
