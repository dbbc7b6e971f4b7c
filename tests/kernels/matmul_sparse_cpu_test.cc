// SparseInputMatmul (matmul.h): the product over a ReLU's output, against a scalar chain of
// fused multiply-adds over each row's terms in the order of k (bit for bit, whichever of its two
// ways a row ran), and a row's result alone, in any batch and at 1 or 2 threads. Runs at every
// level tests/run_at_isa.sh gives (kernels_test@AVX2 ...); where the level has no kernel,
// available() must say so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels_cpu/isa.h"

namespace xf::cpu {
namespace {

bool level_has_kernels() {
#if defined(__x86_64__)
  return cpu_isa() >= CpuIsa::avx2 && cpu_isa() <= CpuIsa::avx512_vnni;
#else
  return false;
#endif
}

struct Workspace {
  explicit Workspace(size_t bytes) : storage(bytes + 64) {}
  void* get() { return storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64; }
  std::vector<char> storage;
};

// ReLU-like rows: row r keeps each value with chance density[r % size], the rest exactly 0.
std::vector<float> relu_rows(test::RandomInputs& random, int64_t rows, int64_t k, const std::vector<double>& density) {
  std::vector<float> x = random.uniform(static_cast<size_t>(rows * k), 0.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const double keep = density[static_cast<size_t>(r) % density.size()];
    for (int64_t j = 0; j < k; ++j)
      if (random.uniform(1, 0.0f, 1.0f)[0] >= keep) x[r * k + j] = 0.0f;
  }
  return x;
}

// y[r][c] = fma over the nonzero x[r][j] in the order of j, from 0: what the kernel promises.
std::vector<float> fma_chain(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t n,
                             int64_t k) {
  std::vector<float> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        if (x[r * k + j] != 0.0f) sum = std::fma(x[r * k + j], w[c * k + j], sum);
      y[r * n + c] = sum;
    }
  return y;
}

// y of rows x N, from a buffer with 64 guard values behind it that must stay as they were.
std::vector<float> run(const SparseInputMatmul& product, const std::vector<float>& x, int64_t rows) {
  const size_t size = static_cast<size_t>(rows * product.n()), guard = 64;
  std::vector<float> y(size + guard, -1.0f);
  Workspace workspace(product.workspace_bytes());
  product.run(x.data(), y.data(), rows, workspace.get());
  for (size_t i = size; i < size + guard; ++i) EXPECT_EQ(y[i], -1.0f) << "written past the output at " << i - size;
  y.resize(size);
  return y;
}

TEST(SparseInputMatmul, EachRowIsTheFmaChainOverItsNonzerosWhicheverWayItRan) {
  if (!level_has_kernels()) GTEST_SKIP() << "no sparse kernel at " << cpu_isa_name(cpu_isa());
  test::RandomInputs random;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{256, 1024}, {128, 48}, {64, 16}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
    const std::vector<float> w = random.uniform(static_cast<size_t>(n * k), -1.0f, 1.0f);
    const WeightMatrix weights{DType::f32, w.data(), nullptr, n, k};
    ASSERT_TRUE(SparseInputMatmul::available(weights));
    // Sparse rows (5%), dense ones (60%, 100%), an all-zero row and one at the threshold, mixed
    // so that dense rows fill tiles of 1 to 4 and some blocks of 8 have none.
    const int64_t rows = 37;
    std::vector<float> x = relu_rows(random, rows, k, {0.05, 0.6, 0.05, 1.0, 0.6, 0.0, 0.25, 0.6, 0.05});
    for (const int threads : {1, 2}) {
      SparseInputMatmul product(weights, threads);
      EXPECT_EQ(run(product, x, rows), fma_chain(x, w, rows, n, k)) << threads << " threads";
    }
  }
}

TEST(SparseInputMatmul, ARowAloneEqualsItsRowInABatch) {
  if (!level_has_kernels()) GTEST_SKIP() << "no sparse kernel at " << cpu_isa_name(cpu_isa());
  test::RandomInputs random;
  const int64_t n = 256, k = 1024, rows = 20;
  const std::vector<float> w = random.uniform(static_cast<size_t>(n * k), -1.0f, 1.0f);
  const WeightMatrix weights{DType::f32, w.data(), nullptr, n, k};
  const std::vector<float> x = relu_rows(random, rows, k, {0.08, 0.5, 0.08, 0.9});
  SparseInputMatmul product(weights, 2);
  const std::vector<float> batch = run(product, x, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> alone = run(product, row, 1);
    ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + r * n, n * sizeof(float))) << "row " << r;
  }
}

TEST(SparseInputMatmul, TakesF32RowsOfWholeTilesAtAvx2AndAvx512Only) {
  const std::vector<float> w(128 * 32, 0.5f);
  const std::vector<int8_t> q(128 * 32, 1);
  const std::vector<float> scales(128, 1.0f);
  EXPECT_EQ(SparseInputMatmul::available({DType::f32, w.data(), nullptr, 128, 32}), level_has_kernels());
  EXPECT_FALSE(SparseInputMatmul::available({DType::int8, q.data(), scales.data(), 128, 32}));
  EXPECT_FALSE(SparseInputMatmul::available({DType::f32, w.data(), nullptr, 96, 32}));   // n not of 64
  EXPECT_FALSE(SparseInputMatmul::available({DType::f32, w.data(), nullptr, 128, 24}));  // k not of 16
  if (!level_has_kernels()) {
    EXPECT_THROW(SparseInputMatmul({DType::f32, w.data(), nullptr, 128, 32}, 1), std::exception);
  }
}

}  // namespace
}  // namespace xf::cpu
