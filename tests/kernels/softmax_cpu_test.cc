// log_softmax and log_softmax_top_k against double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"

namespace xf::cpu {
namespace {

std::vector<double> reference_log_softmax(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t c = 0; c < vocab; ++c) sum += std::exp(row[c] - max);
  std::vector<double> out(vocab);
  for (int64_t c = 0; c < vocab; ++c) out[c] = row[c] - max - std::log(sum);
  return out;
}

// f32 log-probabilities: 1e-5 relative, with an absolute floor of 1e-5 times the spread of
// the logits (entries near the maximum are near 0; their error scales with the logits).
double tolerance(double expected, double logit_range) {
  return 1e-5 * (std::fabs(expected) + logit_range);
}

TEST(LogSoftmax, MatchesReference) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (int64_t vocab : {1, 7, 1000, 32000}) {
    const int64_t rows = 5;
    const std::vector<float> logits = random.uniform(rows * vocab, -10.0f, 10.0f);
    std::vector<float> out = logits;
    log_softmax(out.data(), rows, vocab, 2);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<double> expected = reference_log_softmax(&logits[r * vocab], vocab);
      for (int64_t c = 0; c < vocab; ++c) {
        ASSERT_NEAR(out[r * vocab + c], expected[c], tolerance(expected[c], 10.0))
            << "vocab " << vocab << " row " << r << " column " << c;
      }
    }
  }
}

TEST(LogSoftmax, HugeLogitsDoNotOverflow) {
  std::vector<float> row{1000.0f, 999.0f, -1000.0f};
  const std::vector<float> logits = row;
  log_softmax(row.data(), 1, 3, 1);
  const std::vector<double> expected = reference_log_softmax(logits.data(), 3);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(row[c], expected[c], tolerance(expected[c], 2000.0));
}

// The k best (log-probability + offset, column) of each row: descending, ties to the lower
// column. Ordering uses the float logits themselves, as the kernel does (log_softmax is
// monotonic, and a double recomputation could order two float-equal entries differently).
void check_top_k(const std::vector<float>& logits, const std::vector<float>& offsets, int64_t rows,
                 int64_t vocab, int64_t k, int threads) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " k " +
               std::to_string(k));
  std::vector<float> values(rows * k);
  std::vector<int32_t> indices(rows * k);
  log_softmax_top_k(logits.data(), offsets.empty() ? nullptr : offsets.data(), rows, vocab, k,
                    values.data(), indices.data(), threads);
  double range = 0.0;
  for (float x : logits) range = std::max(range, static_cast<double>(std::fabs(x)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &logits[r * vocab];
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [row](int32_t a, int32_t b) { return row[a] > row[b]; });
    const std::vector<double> log_probabilities = reference_log_softmax(row, vocab);
    const double offset = offsets.empty() ? 0.0 : offsets[r];
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_EQ(indices[r * k + i], order[i]) << "row " << r << " rank " << i;
      const double expected = log_probabilities[order[i]] + offset;
      ASSERT_NEAR(values[r * k + i], expected, tolerance(expected, 2.0 * range))
          << "row " << r << " rank " << i;
    }
  }
}

TEST(LogSoftmaxTopK, BestEntriesInDescendingOrder) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t rows = 6;
  for (int64_t vocab : {5, 300, 32000}) {
    const std::vector<float> logits = random.uniform(rows * vocab, -8.0f, 8.0f);
    const std::vector<float> offsets = random.uniform(rows, -20.0f, 0.0f);
    for (int64_t k : {int64_t{1}, int64_t{4}, std::min<int64_t>(16, vocab)}) {
      check_top_k(logits, offsets, rows, vocab, k, 2);
      check_top_k(logits, {}, rows, vocab, k, 1);
    }
  }
}

TEST(LogSoftmaxTopK, KEqualToVocabSortsTheWholeRow) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const std::vector<float> logits = random.uniform(3 * 9, -3.0f, 3.0f);
  check_top_k(logits, {}, 3, 9, 9, 2);
}

TEST(LogSoftmaxTopK, TiesGoToTheLowerColumn) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  // Few distinct values, many repeats: every rank is decided by a tie.
  const int64_t rows = 4, vocab = 200;
  std::vector<float> logits(rows * vocab);
  for (float& x : logits) x = static_cast<float>(random.integer(0, 4));
  check_top_k(logits, {}, rows, vocab, 16, 2);
  // Ties straddling the 64-column blocks the kernel skips by.
  std::vector<float> flat(vocab, 1.0f);
  flat[150] = 2.0f;
  check_top_k(flat, {}, 1, vocab, 8, 1);
}

}  // namespace
}  // namespace xf::cpu
