// log_softmax_top_k (the beam search's scores and candidates) and log_softmax against double
// references, with ties, row offsets, every k up to 16, and f16 logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"

namespace xf::test {
namespace {

struct TopK {
  std::vector<double> values;    // [rows, k]
  std::vector<int32_t> indices;  // [rows, k]
};

// Ranks the f32 logits themselves (larger first, ties to the lower column), then reports
// log_softmax + offset of the chosen ones in double.
TopK reference_top_k(const std::vector<float>& logits, const std::vector<float>& offsets,
                     int64_t rows, int64_t vocab, int64_t k) {
  TopK ref;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    const double max = row[order[0]];
    double sum = 0.0;
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(row[c] - max);
    for (int64_t i = 0; i < k; ++i) {
      ref.values.push_back(row[order[i]] - max - std::log(sum) + offsets[r]);
      ref.indices.push_back(order[i]);
    }
  }
  return ref;
}

template <typename T>
void check_top_k(int64_t rows, int64_t vocab, int64_t k, double tolerance) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " k " +
               std::to_string(k));
  std::vector<float> logits = random.uniform(rows * vocab, -8.0f, 8.0f);
  // Ties: several columns share the row's maximum and another value, so the order among equal
  // logits (lower column first) decides the result.
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * vocab;
    const int64_t tied_columns = std::min<int64_t>(5, vocab);
    for (int64_t t = 0; t < tied_columns; ++t) {
      row[random.integer(0, vocab - 1)] = 9.0f;
      row[random.integer(0, vocab - 1)] = 8.5f;
    }
  }
  if constexpr (std::is_same_v<T, __half>) logits = round_to_half(logits);
  const std::vector<float> offsets = random.uniform(rows, -20.0f, 0.0f);
  std::vector<T> device_logits;
  if constexpr (std::is_same_v<T, __half>) {
    device_logits = to_half(logits);
  } else {
    device_logits = logits;
  }
  DeviceBuffer<T> logits_d(device_logits);
  DeviceBuffer<float> offsets_d(offsets), values(rows * k), values_no_offset(rows * k);
  DeviceBuffer<int32_t> indices(rows * k), indices_no_offset(rows * k);
  cuda::log_softmax_top_k(logits_d.get(), offsets_d.get(), rows, vocab, k, values.get(),
                          indices.get(), nullptr);
  cuda::log_softmax_top_k(logits_d.get(), nullptr, rows, vocab, k, values_no_offset.get(),
                          indices_no_offset.get(), nullptr);
  const TopK ref = reference_top_k(logits, offsets, rows, vocab, k);
  EXPECT_EQ(indices.download(), ref.indices);
  EXPECT_EQ(indices_no_offset.download(), ref.indices);
  // Values are f32 log-probabilities of inputs that are exact in f32 (also from f16 logits).
  expect_close(values.download(), ref.values, 1.0, tolerance);
  std::vector<double> without_offset(ref.values);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) without_offset[r * k + i] -= offsets[r];
  expect_close(values_no_offset.download(), without_offset, 1.0, tolerance);
}

TEST(cuda_log_softmax_top_k, F32EveryKWithTiesAndOffsets) {
  XF_SKIP_WITHOUT_GPU();
  for (const int64_t k : {1, 2, 4, 5, 16}) {
    check_top_k<float>(7, 1000, k, kF32Tolerance);
    check_top_k<float>(3, 17, k, kF32Tolerance);  // fewer columns than threads
  }
  check_top_k<float>(2, 16, 16, kF32Tolerance);  // k == vocab
  check_top_k<float>(128, 32000, 4, kF32Tolerance);  // batch 32 x beam 4 over a real vocabulary
}

TEST(cuda_log_softmax_top_k, F16Logits) {
  XF_SKIP_WITHOUT_GPU();
  check_top_k<__half>(9, 5000, 4, kF32Tolerance);
  check_top_k<__half>(2, 300, 16, kF32Tolerance);
}

TEST(cuda_log_softmax, InPlaceMatchesDoubleReference) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (const int64_t vocab : {1, 33, 8000}) {
    const int64_t rows = 5;
    const std::vector<float> logits = random.uniform(rows * vocab, -30.0f, 30.0f);
    std::vector<double> expected(logits.size());
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * vocab;
      const double max = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (int64_t c = 0; c < vocab; ++c) sum += std::exp(row[c] - max);
      for (int64_t c = 0; c < vocab; ++c) expected[r * vocab + c] = row[c] - max - std::log(sum);
    }
    DeviceBuffer<float> logits_d(logits);
    cuda::log_softmax(logits_d.get(), rows, vocab, nullptr);
    expect_close(logits_d.download(), expected, 1.0, kF32Tolerance);
  }
}

}  // namespace
}  // namespace xf::test
