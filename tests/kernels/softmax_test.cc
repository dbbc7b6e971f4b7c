// log_softmax, log_softmax_top_k (the beam search's scores and candidates) and the trainer's
// label-smoothed cross-entropy with its gradient, against double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/kernels/softmax.h"

namespace xf::test {
namespace {

std::vector<double> reference_log_softmax(const float* row, int64_t vocab) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t c = 0; c < vocab; ++c) sum += std::exp(row[c] - max);
  std::vector<double> out(vocab);
  for (int64_t c = 0; c < vocab; ++c) out[c] = row[c] - max - std::log(sum);
  return out;
}

// Log-probabilities are f32 results on every device: 1e-5 relative, 1e-5 absolute near 0.
constexpr double kTolerance = 1e-5;

using LogSoftmax = KernelTest;

TEST_P(LogSoftmax, InPlaceMatchesReference) {
  for (const float range : {10.0f, 30.0f}) {
    for (const int64_t vocab : {1, 7, 33, 1000, 8000, 32000}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " range " + std::to_string(range));
      const int64_t rows = 5;
      const std::vector<float> logits = random.uniform(rows * vocab, -range, range);
      std::vector<double> expected;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double> row = reference_log_softmax(&logits[r * vocab], vocab);
        expected.insert(expected.end(), row.begin(), row.end());
      }
      expect_close(device().log_softmax(logits, rows, vocab), expected, 1.0, kTolerance);
    }
  }
}

TEST_P(LogSoftmax, HugeLogitsDoNotOverflow) {
  const std::vector<float> logits{1000.0f, 999.0f, -1000.0f};
  expect_close(device().log_softmax(logits, 1, 3), reference_log_softmax(logits.data(), 3), 1.0,
               kTolerance);
}

XF_KERNEL_TEST_DEVICES(LogSoftmax, devices_with(Feature::f32_only_ops));

class LogSoftmaxTopK : public KernelTest {
 protected:
  // The k best (log-probability + offset, column) of each row, with and without offsets:
  // descending, ties to the lower column. Ordering uses the logits themselves, as the kernels
  // do (log_softmax is monotonic, and a double recomputation could order two equal entries
  // differently).
  void check(const std::vector<float>& logits, int64_t rows, int64_t vocab, int64_t k) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " k " +
                 std::to_string(k));
    const std::vector<float> offsets = random.uniform(rows, -20.0f, 0.0f);
    for (const bool with_offsets : {true, false}) {
      std::vector<double> expected;
      std::vector<int32_t> expected_indices;
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = &logits[r * vocab];
        std::vector<int32_t> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [row](int32_t a, int32_t b) { return row[a] > row[b]; });
        const std::vector<double> log_probabilities = reference_log_softmax(row, vocab);
        for (int64_t i = 0; i < k; ++i) {
          expected_indices.push_back(order[i]);
          expected.push_back(log_probabilities[order[i]] + (with_offsets ? offsets[r] : 0.0));
        }
      }
      std::vector<float> values;
      std::vector<int32_t> indices;
      device().log_softmax_top_k(logits, with_offsets ? offsets : std::vector<float>(), rows,
                                 vocab, k, values, indices);
      EXPECT_EQ(indices, expected_indices) << "offsets " << with_offsets;
      // f32 log-probabilities of inputs exact in f32 (also from f16 logits).
      expect_close(values, expected, 1.0, kTolerance);
    }
  }
  // Random logits with ties: several columns share the row's maximum and another value.
  std::vector<float> tied_logits(int64_t rows, int64_t vocab) {
    std::vector<float> logits = uniform(rows * vocab, -8.0f, 8.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < std::min<int64_t>(5, vocab); ++t) {
        logits[r * vocab + random.integer(0, vocab - 1)] = 9.0f;
        logits[r * vocab + random.integer(0, vocab - 1)] = 8.5f;
      }
    return logits;
  }
};

TEST_P(LogSoftmaxTopK, BestEntriesInDescendingOrder) {
  for (const int64_t k : {1, 2, 4, 5, 16}) {
    check(tied_logits(7, 1000), 7, 1000, k);
    check(tied_logits(3, 17), 3, 17, k);  // fewer columns than CUDA threads
  }
  for (const int64_t vocab : {5, 300, 32000})
    for (const int64_t k : {int64_t{1}, int64_t{4}, std::min<int64_t>(16, vocab)})
      check(uniform(6 * vocab, -8.0f, 8.0f), 6, vocab, k);
  check(tied_logits(9, 5000), 9, 5000, 4);
  check(tied_logits(128, 32000), 128, 32000, 4);  // batch 32 x beam 4 over a real vocabulary
}

TEST_P(LogSoftmaxTopK, KEqualToVocabSortsTheWholeRow) {
  check(uniform(3 * 9, -3.0f, 3.0f), 3, 9, 9);
  check(tied_logits(2, 16), 2, 16, 16);
}

TEST_P(LogSoftmaxTopK, TiesGoToTheLowerColumn) {
  // Few distinct values, many repeats: every rank is decided by a tie.
  const int64_t rows = 4, vocab = 200;
  std::vector<float> logits(rows * vocab);
  for (float& x : logits) x = static_cast<float>(random.integer(0, 4));
  check(logits, rows, vocab, 16);
  // Ties straddling the 64-column blocks the CPU kernel skips by.
  std::vector<float> flat(vocab, 1.0f);
  flat[150] = 2.0f;
  check(flat, 1, vocab, 8);
}

XF_KERNEL_TEST_DEVICES(LogSoftmaxTopK, all_devices());

// A lexical shortlist's top-k (CPU): each row over its sentence's list of columns, bit for bit as
// log_softmax_top_k over the values gathered in that order, columns mapped back; the same with
// any thread count (each thread gathers into its own scratch row).
TEST(LogSoftmaxTopKColumns, EachRowOverItsListAsTheGatheredValues) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t vocab = 700, rows = 13, k = 5, lists = 3;
  std::vector<float> logits = random.uniform(rows * vocab, -8.0f, 8.0f);
  for (int64_t r = 0; r < rows; ++r) logits[r * vocab + random.integer(0, vocab - 1)] = 9.0f;  // ties, some listed
  for (int64_t r = 0; r < rows; ++r) logits[r * vocab + random.integer(0, vocab - 1)] = 9.0f;
  std::vector<int32_t> columns(lists * vocab, -1), sizes(lists);
  for (int64_t g = 0; g < lists; ++g)
    for (int32_t c = 0; c < vocab; ++c)
      if (random.integer(0, 2 + g) == 0) columns[g * vocab + sizes[g]++] = c;
  std::vector<int32_t> row_lists(rows);
  for (int64_t r = 0; r < rows; ++r) row_lists[r] = static_cast<int32_t>(random.integer(0, lists - 1));
  const std::vector<float> offsets = random.uniform(rows, -20.0f, 0.0f);

  std::vector<float> expected_values(rows * k);
  std::vector<int32_t> expected_columns(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* list = &columns[row_lists[r] * vocab];
    std::vector<float> gathered;
    for (int32_t j = 0; j < sizes[row_lists[r]]; ++j) gathered.push_back(logits[r * vocab + list[j]]);
    cpu::log_softmax_top_k(gathered.data(), &offsets[r], 1, static_cast<int64_t>(gathered.size()), k,
                           &expected_values[r * k], &expected_columns[r * k], 1);
    for (int64_t i = 0; i < k; ++i) expected_columns[r * k + i] = list[expected_columns[r * k + i]];
  }
  for (const int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::vector<float> values(rows * k), scratch(threads * vocab);
    std::vector<int32_t> top(rows * k);
    cpu::log_softmax_top_k_columns(logits.data(), vocab, row_lists.data(), columns.data(), sizes.data(), vocab,
                                   offsets.data(), rows, k, values.data(), top.data(), scratch.data(), threads);
    EXPECT_EQ(top, expected_columns);
    EXPECT_EQ(values, expected_values);  // exactly (no NaN among them)
  }
}

// ---- the trainer's cross-entropy --------------------------------------------------------------

// The double reference itself: its gradient against finite differences of its loss, and one
// case by hand.
TEST(CrossEntropyReference, GradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 4, vocab = 7;
  auto logits = trainer::testing::random_values(rng, rows * vocab, -3, 3);
  const std::vector<int32_t> targets = {2, -1, 6, 0};  // row 1 is padding
  std::vector<double> row_loss(rows), row_nll(rows);
  auto loss = [&] {
    auto copy = logits;
    cpu::label_smoothed_cross_entropy<double>(copy.data(), targets.data(), rows, vocab, 0.1, -1,
                                              false, row_loss.data(), row_nll.data(), 1);
    double sum = 0;
    for (double l : row_loss) sum += l;
    return sum;
  };
  auto gradient = logits;
  cpu::label_smoothed_cross_entropy<double>(gradient.data(), targets.data(), rows, vocab, 0.1, -1,
                                            true, row_loss.data(), row_nll.data(), 2);
  trainer::testing::expect_gradient(loss, logits.data(), logits.size(), gradient.data(), "dlogits");
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(gradient[1 * vocab + j], 0.0);
}

TEST(CrossEntropyReference, ByHand) {
  // logits (0, ln 2, ln 4): softmax = (1/7, 2/7, 4/7). Target 1, smoothing 0.1, vocab 3:
  // q = (0.1/3, 0.9 + 0.1/3, 0.1/3); loss = -sum q log p.
  std::vector<double> logits = {0.0, std::log(2.0), std::log(4.0)};
  const int32_t target = 1;
  double loss = 0, nll = 0;
  cpu::label_smoothed_cross_entropy<double>(logits.data(), &target, 1, 3, 0.1, -1, true, &loss,
                                            &nll, 1);
  const double expected_nll = std::log(3.5);
  const double expected_loss =
      0.9 * std::log(3.5) + 0.1 / 3 * (std::log(7.0) + std::log(3.5) + std::log(1.75));
  EXPECT_NEAR(nll, expected_nll, 1e-12);
  EXPECT_NEAR(loss, expected_loss, 1e-12);
  // Gradient softmax - q.
  EXPECT_NEAR(logits[0], 1.0 / 7 - 0.1 / 3, 1e-12);
  EXPECT_NEAR(logits[1], 2.0 / 7 - 0.9 - 0.1 / 3, 1e-12);
  EXPECT_NEAR(logits[2], 4.0 / 7 - 0.1 / 3, 1e-12);

  // Without smoothing the loss is the plain NLL; float agrees with double.
  std::vector<float> logits_f = {0.0f, std::log(2.0f), std::log(4.0f)};
  cpu::label_smoothed_cross_entropy<float>(logits_f.data(), &target, 1, 3, 0.0f, -1, false, &loss,
                                           &nll, 1);
  EXPECT_NEAR(loss, std::log(3.5), 1e-6);
  EXPECT_NEAR(nll, std::log(3.5), 1e-6);
}

using CrossEntropy = KernelTest;

TEST_P(CrossEntropy, LossAndScaledGradientMatchDoubleReference) {
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{9, 37}, {6, 5003}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab));
    const float smoothing = 0.1f, gradient_scale = 1024.0f;
    const std::vector<float> logits = uniform(rows * vocab, -6.0f, 6.0f);
    std::vector<int32_t> targets(rows);
    for (int32_t& t : targets) t = static_cast<int32_t>(random.integer(0, vocab - 1));
    targets[1] = -1;  // padding: scores nothing
    std::vector<double> expected = to_double(logits), loss(rows), nll(rows);
    cpu::label_smoothed_cross_entropy<double>(expected.data(), targets.data(), rows, vocab,
                                              smoothing, -1, true, loss.data(), nll.data(), 1);
    for (double& g : expected) g *= gradient_scale;
    EXPECT_EQ(loss[1], 0.0);

    std::vector<float> got = logits;
    std::vector<double> got_loss, got_nll;
    device().cross_entropy(got, targets, rows, vocab, smoothing, -1, false, gradient_scale,
                           got_loss, got_nll);
    EXPECT_EQ(got, logits) << "loss only: logits untouched";
    device().cross_entropy(got, targets, rows, vocab, smoothing, -1, true, gradient_scale,
                           got_loss, got_nll);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_NEAR(got_loss[r], loss[r], tolerance() * (std::fabs(loss[r]) + 1)) << "row " << r;
      EXPECT_NEAR(got_nll[r], nll[r], tolerance() * (std::fabs(nll[r]) + 1)) << "row " << r;
    }
    // Relative error, with entries below 1 (a thousandth of gradient_scale) held to 1e-5
    // absolute.
    expect_close(got, expected, 1.0, tolerance());
  }
}

XF_KERNEL_TEST_DEVICES(CrossEntropy, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
