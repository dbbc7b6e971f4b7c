// The output layer over a lexical shortlist's rows (CPU only, matmul.h): gather_weight_rows from
// f32 and int8 weights, then gathered_rows_product, against a double-precision product of the
// same rows; and, for int8 weights where xf's int8 kernels run, against the whole product's
// columns (StaticMatmul), bit for bit, at every row count the decoder gives it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "matmul_kernels_cpu.h"
#include "random_inputs.h"
#include "xf/kernels/matmul.h"
#include "xf/weight_layout.h"

namespace xf::cpu {
namespace {

// A buffer of `bytes` starting at a 64-byte boundary (the runtime's arena aligns its buffers).
struct AlignedBytes {
  explicit AlignedBytes(size_t bytes) : storage(bytes + 64) {}
  void* get() { return storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64; }
  std::vector<char> storage;
};

struct Int8Weights {
  std::vector<int8_t> values;
  std::vector<float> scales;
  WeightMatrix matrix(int64_t vocab, int64_t k) const { return {DType::int8, values.data(), scales.data(), vocab, k}; }
};

Int8Weights random_int8_weights(test::RandomInputs& random, int64_t vocab, int64_t k) {
  Int8Weights w;
  w.values.resize(vocab * k);
  w.scales.resize(vocab);
  for (int64_t r = 0; r < vocab; ++r) {
    w.scales[r] = random.uniform(1, 0.001f, 0.02f)[0];
    for (int64_t c = 0; c < k; ++c) w.values[r * k + c] = static_cast<int8_t>(random.integer(-127, 127));
  }
  return w;
}

std::vector<float> gathered_product(const WeightMatrix& weights, const std::vector<int32_t>& ids,
                                    const std::vector<float>& x, const float* bias, int64_t rows, int threads) {
  const int64_t n = static_cast<int64_t>(ids.size());
  AlignedBytes gathered(gathered_rows_bytes(weights, n)), workspace(gathered_product_workspace_bytes(weights, rows));
  // Garbage where the gather must write (panel padding included): it may not be read as zeros.
  std::memset(gathered.storage.data(), 0x5a, gathered.storage.size());
  std::vector<float> y(rows * n, NAN);
  gather_weight_rows(weights, ids.data(), n, gathered.get(), threads);
  gathered_rows_product(weights, x.data(), gathered.get(), bias, rows, n, y.data(), workspace.get(), threads);
  return y;
}

TEST(ShortlistRows, GatheredRowsProductMatchesADoubleReference) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t vocab = 300, k = 72, rows = 5;
  const std::vector<float> x = random.uniform(rows * k, -1.0f, 1.0f);
  const std::vector<float> w = random.uniform(vocab * k, -1.0f, 1.0f);
  const Int8Weights q = random_int8_weights(random, vocab, k);
  for (const int64_t n : {int64_t{1}, int64_t{64}, int64_t{131}}) {  // below, at and past a block of 64
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    for (const bool int8 : {false, true}) {
      for (const int threads : {1, 2}) {
        SCOPED_TRACE("n " + std::to_string(n) + (int8 ? " int8" : " f32") + " threads " + std::to_string(threads));
        const WeightMatrix weights = int8 ? q.matrix(vocab, k) : WeightMatrix{DType::f32, w.data(), nullptr, vocab, k};
        const std::vector<float> y = gathered_product(weights, ids, x, bias.data(), rows, threads);
        // int8 by xf's kernels: x quantized per row (half a step of max|x| / 127 off), the
        // weights perhaps as their 7-bit copy (one step of their scale off); else f32 sums.
        const bool quantized = int8 && int8_row_kernel_available();
        for (int64_t r = 0; r < rows; ++r) {
          double x_max = 0;
          for (int64_t c = 0; c < k; ++c) x_max = std::max(x_max, std::fabs(static_cast<double>(x[r * k + c])));
          for (int64_t i = 0; i < n; ++i) {
            double expected = bias[i], magnitude = std::fabs(bias[i]), quantization = 0;
            for (int64_t c = 0; c < k; ++c) {
              const double wv = int8 ? static_cast<double>(q.values[ids[i] * k + c]) * q.scales[ids[i]] : w[ids[i] * k + c];
              expected += x[r * k + c] * wv;
              magnitude += std::fabs(x[r * k + c] * wv);
              if (int8) quantization += std::fabs(wv) * x_max / 254 + std::fabs(x[r * k + c]) * q.scales[ids[i]];
            }
            const double tolerance = 1e-6 * magnitude + 1e-7 + (quantized ? 1.01 * quantization : 0.0);
            ASSERT_NEAR(y[r * n + i], expected, tolerance) << "row " << r << " column " << i;
          }
        }
      }
    }
  }
}

// pack_int8_panels (the load's copy and the shortlist's gather) writes the format's panels
// (pack_panels of the listed rows, padding zero, over garbage) and each row's 128 * sum of the
// values written, with and without the 7-bit halving, at fixed-k and generic lengths and counts
// within and across panels.
TEST(ShortlistRows, PackedInt8PanelsAreTheFormatsWithTheirRowSums) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t vocab = 90;
  for (const int64_t k : {int64_t{256}, int64_t{72}, int64_t{30}, int64_t{1030}}) {
    const Int8Weights q = random_int8_weights(random, vocab, k);
    for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}}) {
      std::vector<int32_t> ids(n);
      for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
      for (const bool listed : {false, true}) {
        std::vector<int8_t> rows(n * k);  // the rows packed, in order
        for (int64_t i = 0; i < n; ++i) std::memcpy(&rows[i * k], &q.values[(listed ? ids[i] : i) * k], k);
        for (const bool seven_bits : {false, true}) {
          for (const int threads : {1, 2}) {
            SCOPED_TRACE("k " + std::to_string(k) + " n " + std::to_string(n) + (listed ? " listed" : " first rows") +
                         (seven_bits ? " 7-bit" : "") + " threads " + std::to_string(threads));
            std::vector<int8_t> expected_rows = rows;
            if (seven_bits)
              for (int8_t& v : expected_rows) v = to_seven_bits(v);
            const size_t bytes = layout_bytes(DType::int8, WeightLayout::panels, n, k);
            std::vector<int8_t> expected(bytes), packed(bytes, 0x5a);
            pack_panels(DType::int8, expected_rows.data(), n, k, expected.data());
            std::vector<int32_t> sums(padded_to_panels(n), 0x5a5a5a5a);
            pack_int8_panels(q.values.data(), k, listed ? ids.data() : nullptr, n, seven_bits, packed.data(),
                             sums.data(), threads);
            ASSERT_EQ(packed, expected);
            for (int64_t i = 0; i < padded_to_panels(n); ++i) {
              int32_t sum = 0;
              for (int64_t c = 0; i < n && c < k; ++c) sum += expected_rows[i * k + c];
              ASSERT_EQ(sums[i], 128 * sum) << "row " << i;
            }
          }
        }
      }
    }
  }
}

// Where xf's int8 kernels run, a shortlisted logit is the one the whole output layer gives: the
// same int8 values (or 7-bit copy), the same x quantization, int32 sums and f32 operations, at
// row counts the few-row kernel takes (<= 16) and above, row lengths of the fixed-k kernels and
// generic ones (k % 4 != 0: padded panel groups), counts within and across panels.
TEST(ShortlistRows, GatheredInt8RowsGiveTheWholeProductsColumnsBitForBit) {
  if (!int8_row_kernel_available()) GTEST_SKIP() << "no xf int8 kernel at this ISA: f32 rows (the test above)";
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const int64_t vocab = 200;
  // 1024 and 1030: rows gathered in more than one stack chunk (512 values), the last one short.
  for (const int64_t k : {int64_t{256}, int64_t{72}, int64_t{30}, int64_t{1024}, int64_t{1030}}) {
    const Int8Weights q = random_int8_weights(random, vocab, k);
    const WeightMatrix weights = q.matrix(vocab, k);
    const std::vector<float> bias = random.uniform(vocab, -1.0f, 1.0f);
    for (const int64_t rows : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{17}, int64_t{40}}) {
      const std::vector<float> x = random.uniform(rows * k, -2.0f, 2.0f);
      for (const bool with_bias : {false, true}) {
        const StaticMatmul whole(engine, rows, weights, with_bias);
        AlignedBytes workspace(whole.workspace_bytes());
        std::vector<float> y_whole(rows * vocab);
        whole.run(x.data(), with_bias ? bias.data() : nullptr, y_whole.data(), workspace.get());
        for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{131}}) {
          std::vector<int32_t> ids(n);
          for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
          std::sort(ids.begin(), ids.end());  // as the runtime gives them (duplicates allowed here)
          std::vector<float> gathered_bias(n);
          for (int64_t i = 0; i < n; ++i) gathered_bias[i] = bias[ids[i]];
          for (const int threads : {1, 2}) {
            SCOPED_TRACE("k " + std::to_string(k) + " rows " + std::to_string(rows) + " n " + std::to_string(n) +
                         (with_bias ? " bias" : "") + " threads " + std::to_string(threads) + " whole: " +
                         whole.implementation());
            const std::vector<float> y =
                gathered_product(weights, ids, x, with_bias ? gathered_bias.data() : nullptr, rows, threads);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(y[r * n + i], y_whole[r * vocab + ids[i]]) << "row " << r << " column " << i << " (id "
                                                                      << ids[i] << ")";
          }
        }
      }
    }
  }
}

// With column runs (GatheredColumnRuns: a batch's sentences each over their own columns), each
// row's columns inside its list's runs are the product's without runs, bit for bit; the others
// keep what y held (or, where the int8 row kernel runs, the product's values). Lists met twice,
// an empty list, a last partial panel; int8 and f32 weights; 1 and 2 threads.
TEST(ShortlistRows, ColumnRunsGiveTheRowsTheirColumnsOfTheWholeGatheredProduct) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  const int64_t vocab = 300, n = 131;
  const std::vector<int32_t> row_lists = {0, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 3, 3};
  const std::vector<int32_t> run_offsets = {0, 2, 3, 3, 4};           // list 2: no run
  const std::vector<int32_t> runs = {0, 16, 48, 80, 112, 131, 0, 131};  // [begin, end) pairs
  const int64_t rows = static_cast<int64_t>(row_lists.size());
  for (const int64_t k : {int64_t{256}, int64_t{72}}) {
    const Int8Weights q = random_int8_weights(random, vocab, k);
    const std::vector<float> w = random.uniform(vocab * k, -1.0f, 1.0f);
    const std::vector<float> x = random.uniform(rows * k, -1.0f, 1.0f), bias = random.uniform(n, -1.0f, 1.0f);
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = static_cast<int32_t>(random.integer(0, vocab - 1));
    for (const bool int8 : {false, true}) {
      const WeightMatrix weights = int8 ? q.matrix(vocab, k) : WeightMatrix{DType::f32, w.data(), nullptr, vocab, k};
      for (const int threads : {1, 2}) {
        SCOPED_TRACE("k " + std::to_string(k) + (int8 ? " int8" : " f32") + " threads " + std::to_string(threads));
        const std::vector<float> whole = gathered_product(weights, ids, x, bias.data(), rows, threads);
        AlignedBytes gathered(gathered_rows_bytes(weights, n)), workspace(gathered_product_workspace_bytes(weights, rows));
        gather_weight_rows(weights, ids.data(), n, gathered.get(), threads);
        std::vector<float> y(rows * n, -1234.5f);
        const GatheredColumnRuns column_runs{row_lists.data(), run_offsets.data(), runs.data()};
        gathered_rows_product(weights, x.data(), gathered.get(), bias.data(), rows, n, y.data(), workspace.get(), threads,
                              &column_runs);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < n; ++i) {
            bool inside = false;
            for (int32_t j = run_offsets[row_lists[r]]; j < run_offsets[row_lists[r] + 1]; ++j)
              inside |= i >= runs[2 * j] && i < runs[2 * j + 1];
            if (inside)
              ASSERT_EQ(y[r * n + i], whole[r * n + i]) << "row " << r << " column " << i;
            else
              ASSERT_TRUE(y[r * n + i] == -1234.5f || y[r * n + i] == whole[r * n + i]) << "row " << r << " column " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace xf::cpu
