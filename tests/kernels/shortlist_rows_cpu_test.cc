// The output layer over a lexical shortlist's rows (CPU only, matmul.h): gather_weight_rows from
// f32 and int8 weights, then rows_product, against a double-precision product of the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/matmul.h"

namespace xf::cpu {
namespace {

TEST(ShortlistRows, GatheredRowsProductMatchesADoubleReference) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t vocab = 300, k = 72, rows = 5;
  const std::vector<float> x = random.uniform(rows * k, -1.0f, 1.0f);
  const std::vector<float> w = random.uniform(vocab * k, -1.0f, 1.0f);
  std::vector<int8_t> q(vocab * k);
  std::vector<float> scales(vocab);
  for (int64_t r = 0; r < vocab; ++r) {
    scales[r] = random.uniform(1, 0.001f, 0.02f)[0];
    for (int64_t c = 0; c < k; ++c) q[r * k + c] = static_cast<int8_t>(random.integer(-127, 127));
  }
  for (const int64_t n : {int64_t{1}, int64_t{64}, int64_t{131}}) {  // below, at and past a block of 64
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    for (const bool int8 : {false, true}) {
      for (const int threads : {1, 2}) {
        SCOPED_TRACE("n " + std::to_string(n) + (int8 ? " int8" : " f32") + " threads " + std::to_string(threads));
        const WeightMatrix weights = int8 ? WeightMatrix{DType::int8, q.data(), scales.data(), vocab, k}
                                          : WeightMatrix{DType::f32, w.data(), nullptr, vocab, k};
        std::vector<float> gathered(n * k), y(rows * n, NAN);
        gather_weight_rows(weights, ids.data(), n, gathered.data(), threads);
        rows_product(x.data(), gathered.data(), bias.data(), rows, n, k, y.data(), threads);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = 0; i < n; ++i) {
            double expected = bias[i], magnitude = std::fabs(bias[i]);
            for (int64_t c = 0; c < k; ++c) {
              const double wv = int8 ? static_cast<double>(q[ids[i] * k + c]) * scales[ids[i]] : w[ids[i] * k + c];
              expected += x[r * k + c] * wv;
              magnitude += std::fabs(x[r * k + c] * wv);
            }
            ASSERT_NEAR(y[r * n + i], expected, 1e-6 * magnitude + 1e-7) << "row " << r << " column " << i;
          }
      }
    }
  }
}

}  // namespace
}  // namespace xf::cpu
