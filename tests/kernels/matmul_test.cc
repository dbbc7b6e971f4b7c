// Matrix products against double-precision references: y = x W^T (the runtime's projections)
// and the trainer's gemm on every device; the CPU's StaticMatmul (packing, threads, int8 with its
// few-row kernel, bias) and Bf16Gemm.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "random_inputs.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels_cpu/isa.h"

namespace xf::cpu {
namespace {

// Caller-provided memory, 64-byte aligned as run() requires.
class Workspace {
 public:
  explicit Workspace(size_t bytes) : storage_(bytes + 64) {}
  void* data() {
    const uintptr_t address = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + ((64 - address % 64) % 64);
  }

 private:
  std::vector<char> storage_;
};

// matmul over x (its first `rows`, 0: all) in fresh workspace; the output starts as NaN, so an
// element left unwritten shows.
std::vector<float> run(const StaticMatmul& matmul, const float* x, const float* bias, int64_t rows = 0) {
  Workspace workspace(matmul.workspace_bytes());
  std::vector<float> y(matmul.m() * matmul.n(), std::nanf(""));
  matmul.run(x, bias, y.data(), workspace.data(), rows);
  return y;
}

// Tolerance for one f32 dot product of length K: rounding errors of the K partial sums add up
// like a random walk, so about sqrt(K) roundings of eps times the typical partial sum, itself
// about sqrt(sum_k (x_k w_k)^2). Four times that, as a margin; an error in the product (a wrong
// layout, a missed bias) is orders of magnitude larger.
double dot_tolerance(int64_t k, double sum_of_squared_terms) {
  return 4.0 * FLT_EPSILON * std::sqrt(static_cast<double>(k) * sum_of_squared_terms) + 1e-30;
}

// y = x W^T (+ bias) in double; the allowance of an f32 sum (dot_tolerance) and sum |x w|.
struct ProductReference {
  std::vector<double> y, rounding_bound, magnitude;
  ProductReference(const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>* bias, int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = bias ? (*bias)[j] : 0.0, squares = 0.0, sum_of_magnitudes = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          const double term = static_cast<double>(x[i * k + c]) * w[j * k + c];
          sum += term, squares += term * term, sum_of_magnitudes += std::fabs(term);
        }
        y.push_back(sum);
        rounding_bound.push_back(dot_tolerance(k, squares) + 4.0 * FLT_EPSILON * std::fabs(sum));
        magnitude.push_back(sum_of_magnitudes);
      }
  }
};

void check_f32(CpuEngine& engine, int64_t m, int64_t n, int64_t k, bool with_bias,
               test::RandomInputs& random) {
  SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
               " bias " + std::to_string(with_bias) + " packing " +
               std::to_string(engine.weight_packing()));
  const std::vector<float> weights = random.uniform(n * k, -1.0f, 1.0f);  // [n, k]
  const std::vector<float> x = random.uniform(m * k, -1.0f, 1.0f);        // [m, k]
  const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
  StaticMatmul matmul(engine, m, WeightMatrix{DType::f32, weights.data(), nullptr, n, k},
                      with_bias);
  EXPECT_EQ(matmul.m(), m);
  EXPECT_EQ(matmul.n(), n);
  EXPECT_EQ(matmul.k(), k);
  const std::vector<float> y = run(matmul, x.data(), with_bias ? bias.data() : nullptr);
  const ProductReference ref(x, weights, with_bias ? &bias : nullptr, m, n, k);
  test::expect_within(y, ref.y, [&](size_t i) { return ref.rounding_bound[i]; });
}

// check(m, n, k, with_bias) over the shapes both dtypes' reference tests take: row counts of
// each register tile and of several, a small and a square product, with and without a bias.
template <typename Check>
void over_reference_shapes(Check check) {
  for (int64_t m : {1, 3, 17, 64}) {
    for (bool with_bias : {false, true}) {
      check(m, 33, 19, with_bias);
      check(m, 512, 512, with_bias);
    }
  }
}

TEST(StaticMatmul, F32MatchesReference) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  for (bool packing : {true, false}) {
    engine.set_weight_packing(packing);
    over_reference_shapes([&](int64_t m, int64_t n, int64_t k, bool with_bias) {
      check_f32(engine, m, n, k, with_bias, random);
    });
    check_f32(engine, 5, 100, 2048, true, random);
  }
}

TEST(StaticMatmul, PackedWeightsAreSharedAcrossRowCounts) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const int64_t n = 256, k = 128;
  const std::vector<float> weights = random.uniform(n * k, -1.0f, 1.0f);
  const WeightMatrix matrix{DType::f32, weights.data(), nullptr, n, k};
  std::vector<StaticMatmul> matmuls;
  matmuls.emplace_back(engine, 1, matrix, false);
  const size_t one_copy = engine.packed_weight_bytes();
  EXPECT_GE(one_copy, n * k * sizeof(float));
  for (int64_t m : {2, 7, 32, 128}) matmuls.emplace_back(engine, m, matrix, false);
  EXPECT_EQ(engine.packed_weight_bytes(), one_copy);
  matmuls.clear();
  EXPECT_EQ(engine.packed_weight_bytes(), 0u);  // the last user frees the copy
}

// oneDNN's primitives are made and run at one OpenMP thread (the worker pool runs one per slice
// of the weight rows; oneDNN fixes a primitive's thread partition when it is made), whatever the
// engine's thread count and the caller's OpenMP setting.
TEST(StaticMatmul, RunsOneDnnAtOneOpenMpThread) {
  const std::vector<float> weights(40 * 8, 1.0f), x(2 * 8, 1.0f);
  CpuEngine engine(2);
  omp_set_num_threads(3);
  StaticMatmul matmul(engine, 2, WeightMatrix{DType::f32, weights.data(), nullptr, 40, 8}, false);
  if (std::string(matmul.implementation()).rfind("xf:", 0) == 0) {
    GTEST_SKIP() << "xf's own f32 kernel at this level (" << matmul.implementation() << "): no oneDNN";
  }
  EXPECT_EQ(omp_get_max_threads(), 1);
  omp_set_num_threads(3);
  const std::vector<float> y = run(matmul, x.data(), nullptr);
  EXPECT_EQ(omp_get_max_threads(), 1);
  for (float value : y) EXPECT_EQ(value, 8.0f);
}

TEST(StaticMatmul, RejectsF16AndBf16Weights) {
  const std::vector<uint16_t> weights(4 * 4, 0);
  CpuEngine engine(1);
  for (DType dtype : {DType::f16, DType::bf16}) {
    try {
      StaticMatmul matmul(engine, 2, WeightMatrix{dtype, weights.data(), nullptr, 4, 4}, false);
      ADD_FAILURE() << "no error for " << dtype_name(dtype);
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(dtype_name(dtype)), std::string::npos)
          << error.what();
    }
  }
}

TEST(StaticMatmul, RunWithoutTheBiasItWasMadeWithIsAnError) {
  const std::vector<float> weights(4 * 4, 1.0f), x(4, 1.0f);
  CpuEngine engine(1);
  StaticMatmul matmul(engine, 1, WeightMatrix{DType::f32, weights.data(), nullptr, 4, 4}, true);
  EXPECT_THROW(run(matmul, x.data(), nullptr), Error);
}

struct Int8Case {
  std::vector<float> weights;     // [n, k] the f32 matrix before quantization
  std::vector<int8_t> quantized;  // [n, k]
  std::vector<float> row_scales;  // [n]
};

Int8Case make_int8_weights(int64_t n, int64_t k, test::RandomInputs& random) {
  Int8Case c;
  c.weights = random.uniform(n * k, -1.0f, 1.0f);
  // Rows of different magnitudes, so that the per-row scales matter.
  for (int64_t j = 0; j < n; ++j) {
    const float row_magnitude = static_cast<float>(random.integer(1, 100)) / 10.0f;
    for (int64_t c2 = 0; c2 < k; ++c2) c.weights[j * k + c2] *= row_magnitude;
  }
  c.quantized.resize(n * k);
  c.row_scales.resize(n);
  quantize_rows_int8(c.weights.data(), n, k, c.quantized.data(), c.row_scales.data());
  return c;
}

void check_int8(CpuEngine& engine, int64_t m, int64_t n, int64_t k, bool with_bias,
                test::RandomInputs& random) {
  SCOPED_TRACE("int8 m " + std::to_string(m) + " n " + std::to_string(n) + " k " +
               std::to_string(k) + " bias " + std::to_string(with_bias));
  Int8Case w = make_int8_weights(n, k, random);
  const std::vector<float> x = random.uniform(m * k, -2.0f, 2.0f);
  const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
  StaticMatmul matmul(engine, m,
                      WeightMatrix{DType::int8, w.quantized.data(), w.row_scales.data(), n, k},
                      with_bias);
  const std::vector<float> y = run(matmul, x.data(), with_bias ? bias.data() : nullptr);

  // The weights the product reads: the 7-bit copy where int8 products saturate.
  if (int8_products_saturate()) {
    for (int8_t& value : w.quantized) value = to_seven_bits(value);
    for (float& scale : w.row_scales) scale *= 2.0f;
  }
  // x as the kernel quantizes it, one scale per row (quantize_int8_per_row has its own test).
  std::vector<int8_t> x_quantized(m * k);
  std::vector<float> x_scales(m);
  quantize_int8_per_row(x.data(), m, k, x_quantized.data(), x_scales.data(), 1, int8_x_max_level());
  for (int64_t i = 0; i < m; ++i) {
    const float x_scale = x_scales[i];
    for (int64_t j = 0; j < n; ++j) {
      // 1. Exact: the integer product is exact in int32; what remains is rounding the scaled
      // result and the bias, a few eps of their magnitudes.
      int64_t integer_dot = 0;
      double exact = 0.0, quantization_bound = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        integer_dot += static_cast<int64_t>(x_quantized[i * k + c]) * w.quantized[j * k + c];
        exact += static_cast<double>(x[i * k + c]) * w.weights[j * k + c];
        // |x w - x~ w~| <= |x| |w - w~| + |x - x~| |w~|, each difference at most half a step.
        quantization_bound += std::fabs(x[i * k + c]) * 0.5 * w.row_scales[j] +
                              0.5 * x_scale * std::fabs(w.quantized[j * k + c] * w.row_scales[j]);
      }
      const double scaled = static_cast<double>(integer_dot) * x_scale * w.row_scales[j];
      const double b = with_bias ? bias[j] : 0.0;
      ASSERT_NEAR(y[i * n + j], scaled + b, 4.0 * FLT_EPSILON * (std::fabs(scaled) + std::fabs(b)))
          << "vs dequantized reference, row " << i << " column " << j;
      // 2. Loose: within the quantization error of the exact f32 product.
      ASSERT_NEAR(y[i * n + j], exact + b,
                  quantization_bound + 4.0 * FLT_EPSILON * (std::fabs(scaled) + std::fabs(b)))
          << "vs f32 product, row " << i << " column " << j;
    }
  }
}

// A row's result depends on that row only: the same row alone (m = 1) or among rows of other
// magnitudes gives bit-identical output (what makes int8 translations batch-independent).
TEST(StaticMatmul, Int8RowsDoNotDependOnEachOther) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const int64_t m = 32, n = 96, k = 64;
  const Int8Case w = make_int8_weights(n, k, random);
  std::vector<float> x = random.uniform(m * k, -2.0f, 2.0f);
  for (int64_t c = 0; c < k; ++c) x[5 * k + c] *= 50.0f;  // one unusual row
  const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
  const WeightMatrix weights{DType::int8, w.quantized.data(), w.row_scales.data(), n, k};
  StaticMatmul batch(engine, m, weights, true), single(engine, 1, weights, true);
  const std::vector<float> y = run(batch, x.data(), bias.data());
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<float> row = run(single, x.data() + i * k, bias.data());
    ASSERT_TRUE(std::equal(row.begin(), row.end(), y.begin() + i * n)) << "row " << i;
  }
}

// Calls check(weights, bias) with random f32 weights and bias at the bundled model's shapes
// (d 256, d_ff 1024, 8,446 target pieces) and the base-size model's FFN.
void over_f32_row_check_shapes(test::RandomInputs& random,
                               const std::function<void(const WeightMatrix&, const float* bias)>& check) {
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {256, 256}, {768, 256}, {1024, 256}, {256, 1024}, {8446, 256}, {2048, 512}, {512, 2048}}) {
    const std::vector<float> w = random.uniform(n * k, -1.0f, 1.0f);
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    check(WeightMatrix{DType::f32, w.data(), nullptr, n, k}, bias.data());
  }
}

// f32 rows do not depend on how many rows share the product: the first rows of a product of
// twice as many rows equal those of the smaller one bit for bit (translating a sentence in a
// bigger batch changes nothing). Three rows or more: see F32RowAloneEqualsItsRowInAProduct.
TEST(StaticMatmul, F32RowsDoNotDependOnTheRowCount) {
#if defined(__aarch64__)
  // oneDNN's aarch64 gemm:jit gives rows 17 of 17 and of 34 other last bits (n 256 k 1024,
  // n 2048 k 512, under qemu): f32 batch independence on aarch64 is an open finding.
  GTEST_SKIP() << "oneDNN's aarch64 f32 gemm depends on the row count (open)";
#endif
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  over_f32_row_check_shapes(random, [&](const WeightMatrix& weights, const float* bias) {
    const int64_t n = weights.rows, k = weights.cols;
    for (int64_t m : {3, 6, 17}) {
      const std::vector<float> x = random.uniform(2 * m * k, -2.0f, 2.0f);
      for (int threads : {1, 2}) {
        CpuEngine engine(threads);
        StaticMatmul small(engine, m, weights, true), big(engine, 2 * m, weights, true);
        const std::vector<float> y_small = run(small, x.data(), bias);
        const std::vector<float> y_big = run(big, x.data(), bias);
        EXPECT_EQ(std::memcmp(y_small.data(), y_big.data(), y_small.size() * sizeof(float)), 0)
            << "n " << n << " k " << k << " m " << m << " vs " << 2 * m << ", " << threads << " threads, "
            << small.implementation() << " / " << big.implementation();
      }
    }
  });
}

// And one or two rows too: every row of an m-row product equals that row's product alone bit for
// bit (a sentence scored or decoded alone or in a batch of two: the Python suite's scoring
// test). oneDNN's products cut into two slices that wrote into y's columns in place failed this
// at AVX-512: oneDNN's gemm:jit, which took them, adds k 1024 up in another order for one row
// than for two (n 256, k 1024, the bundled model's FFN output). Checked at AVX-512 only, where
// oneDNN's brgemm makes the f32 products: below, one row's sums are the products' own (open
// findings): xf's AVX2 panel kernel splits k two or four ways for tiles of two rows or one
// (f32_panel_tile), and at SSE41 oneDNN's gemm:jit sums one row in another order at k 1024.
TEST(StaticMatmul, F32RowAloneEqualsItsRowInAProduct) {
  if (cpu_isa() != CpuIsa::avx512 && cpu_isa() != CpuIsa::avx512_vnni) {
    GTEST_SKIP() << "below AVX-512 one f32 row's sums depend on the row count (open)";
  }
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  over_f32_row_check_shapes(random, [&](const WeightMatrix& weights, const float* bias) {
    const int64_t n = weights.rows, k = weights.cols;
    constexpr int64_t kRows = 34;
    const std::vector<float> x = random.uniform(kRows * k, -2.0f, 2.0f);
    for (int threads : {1, 2}) {
      CpuEngine engine(threads);
      StaticMatmul one_row(engine, 1, weights, true);
      std::vector<std::vector<float>> alone;
      for (int64_t r = 0; r < kRows; ++r) alone.push_back(run(one_row, x.data() + r * k, bias));
      for (int64_t m : {int64_t{2}, int64_t{6}, int64_t{17}, kRows}) {
        StaticMatmul matmul(engine, m, weights, true);
        const std::vector<float> y = run(matmul, x.data(), bias);
        for (int64_t r = 0; r < m; ++r) {
          EXPECT_EQ(std::memcmp(y.data() + r * n, alone[r].data(), n * sizeof(float)), 0)
              << "n " << n << " k " << k << ": row " << r << " of " << m << " vs alone, " << threads
              << " threads, " << matmul.implementation() << " / " << one_row.implementation();
        }
      }
    }
  });
}

// Every product at 2 and 3 threads equals the one-thread product bit for bit, oneDNN's and xf's
// kernels alike, f32 packed and stored, int8, with and without a bias. (oneDNN's products cut
// into one slice per thread failed this: m 1 to 128 at these shapes, packed or not.)
TEST(StaticMatmul, ResultsDoNotDependOnTheThreadCount) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  // A small product, and the base-size model's FFN shapes (oneDNN's k blocking depends on them).
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{100, 70}, {2048, 512}, {512, 2048}}) {
    const std::vector<float> f32_weights = random.uniform(n * k, -1.0f, 1.0f);
    const Int8Case int8 = make_int8_weights(n, k, random);
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    const WeightMatrix f32{DType::f32, f32_weights.data(), nullptr, n, k};
    const WeightMatrix int8_matrix{DType::int8, int8.quantized.data(), int8.row_scales.data(), n, k};
    for (int64_t m : {1, 4, 17, 128}) {
      const std::vector<float> x = random.uniform(m * k, -2.0f, 2.0f);
      for (const WeightMatrix* weights : {&f32, &int8_matrix}) {
        for (bool packing : {true, false}) {
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE("m " + std::to_string(m) + " " + dtype_name(weights->dtype) + " packing " +
                         std::to_string(packing) + " bias " + std::to_string(with_bias));
            std::vector<float> one_thread;
            for (int threads : {1, 2, 3}) {
              CpuEngine engine(threads);
              engine.set_weight_packing(packing);
              StaticMatmul matmul(engine, m, *weights, with_bias);
              const std::vector<float> y = run(matmul, x.data(), with_bias ? bias.data() : nullptr);
              if (threads == 1) {
                one_thread = y;
                continue;
              }
              ASSERT_EQ(y.size(), one_thread.size());
              EXPECT_EQ(std::memcmp(y.data(), one_thread.data(), y.size() * sizeof(float)), 0)
                  << threads << " threads, " << matmul.implementation() << " n " << n << " k " << k;
            }
          }
        }
      }
    }
  }
}

TEST(StaticMatmul, Int8MatchesReference) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  over_reference_shapes([&](int64_t m, int64_t n, int64_t k, bool with_bias) {
    check_int8(engine, m, n, k, with_bias, random);
  });
  check_int8(engine, 4, 64, 2048, true, random);
}

// Up to 16 rows run on xf's few-row kernel (where the CPU has one), 32 on the panel kernel at
// AVX-512 (the weights copied into panels; 7 bits without VNNI), and below AVX-512 through the
// few-row kernel too, in other register tiles (oneDNN where there is none): the same rows give
// bit-identical results, over shapes with a K tail (k % 64), weight rows left
// over from the kernel's blocks of 16, the rows split between two threads (a slice each), the
// output layer's size, the K compiled in (256, 1024) and not (1, 64, 300), and x row counts that
// use each register tile (4, 2 and 1 x rows) alone and together.
TEST(StaticMatmul, Int8FewRowKernelEqualsTheGeneralPathBitForBit) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const int64_t general_rows = 32;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {5, 1}, {7, 64}, {1031, 300}, {8446, 256}, {300, 1024}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k));
    const Int8Case w = make_int8_weights(n, k, random);
    const WeightMatrix weights{DType::int8, w.quantized.data(), w.row_scales.data(), n, k};
    const std::vector<float> x = random.uniform(general_rows * k, -3.0f, 3.0f);
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    std::vector<float> expected;
    std::string general_kernel;
    {  // gone before the few-row products are made: they would read its panel copy (below)
      StaticMatmul general(engine, general_rows, weights, true);
      general_kernel = general.implementation();
      if (cpu_isa() == CpuIsa::avx512_vnni) {
        EXPECT_STREQ(general.implementation(), "xf:int8_panels_avx512_vnni");
      } else if (cpu_isa() == CpuIsa::avx512) {
        EXPECT_STREQ(general.implementation(), "xf:int8_panels_avx512");
      } else if (general_rows > int8_row_kernel_max_rows()) {
        EXPECT_NE(std::string(general.implementation()).rfind("xf:", 0), 0u)
            << general.implementation();
      }
      expected = run(general, x.data(), bias.data());
      // Made while the panel copy lives (the runtime plans its largest count first): the few
      // rows read it too, with the same results.
      StaticMatmul beside(engine, 3, weights, true);
      if (cpu_isa() == CpuIsa::avx512_vnni || cpu_isa() == CpuIsa::avx512) {
        EXPECT_EQ(std::string(beside.implementation()), general_kernel);
        EXPECT_FALSE(beside.reads_weights_in_place());
      }
      const std::vector<float> y = run(beside, x.data() + 7 * k, bias.data());
      for (int64_t i = 0; i < 3 * n; ++i) ASSERT_EQ(y[i], expected[7 * n + i]) << "beside, value " << i;
    }
    for (int64_t m : {1, 2, 3, 4, 5, 7, 16}) {
      StaticMatmul few(engine, m, weights, true);
      if (int8_row_kernel_available()) {
        EXPECT_STREQ(few.implementation(), int8_row_kernel_name());
      }
      const std::vector<float> y = run(few, x.data() + 7 * k, bias.data());  // rows 7 .. 7+m-1
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(y[i * n + j], expected[(7 + i) * n + j]) << "m " << m << " row " << i
                                                             << " column " << j;
        }
      }
    }
  }
}

// Weights in a layout the products read where it lies (reads_layout_in_place; the model file's
// version-4 layouts, kernel_weight_layout() the one xf-convert --layout panels writes here) give
// the results of the same weights in rows bit for bit at every row count, and the products read
// panels in place (no copy); a layout not read at this level is refused. A 7-bit layout holds the
// halved values and doubled scales: at a level that halves them itself (kernel_weight_layout is
// 7-bit) it equals the 8-bit rows, elsewhere rows of those 7-bit values (the 7-bit model).
// Shapes padded in rows (n not a multiple of 16) and in k (not a multiple of 4).
TEST(StaticMatmul, WeightsInAKernelLayoutGiveTheRowsResultsInPlace) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const bool level_halves = in_seven_bits(kernel_weight_layout(DType::int8));
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{5, 1}, {37, 30}, {300, 256}, {64, 1024}}) {
    const Int8Case w = make_int8_weights(n, k, random);
    const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
    const std::vector<float> x = random.uniform(40 * k, -3.0f, 3.0f);
    for (DType dtype : {DType::int8, DType::f32}) {
      for (WeightLayout layout : {WeightLayout::panels, WeightLayout::seven_bit_rows, WeightLayout::seven_bit_panels}) {
        if (!layout_holds(layout, dtype)) continue;
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + weight_layout_name(layout) + " n " + std::to_string(n) +
                     " k " + std::to_string(k));
        // The rows it is compared with, and the laid-out bytes.
        const bool seven = in_seven_bits(layout);
        std::vector<int8_t> values = w.quantized;
        std::vector<float> scales = w.row_scales;
        if (seven) {
          for (int8_t& v : values) v = to_seven_bits(v);
          for (float& scale : scales) scale *= 2.0f;
        }
        const void* row_data = dtype == DType::f32 ? static_cast<const void*>(w.weights.data())
                                                   : seven && !level_halves ? values.data() : w.quantized.data();
        const float* row_scales = dtype == DType::f32 ? nullptr : seven && !level_halves ? scales.data() : w.row_scales.data();
        const WeightMatrix rows{dtype, row_data, row_scales, n, k};
        std::vector<uint8_t> laid(layout_bytes(dtype, layout, n, k));
        const void* from = dtype == DType::f32 ? static_cast<const void*>(w.weights.data()) : values.data();
        if (in_panels(layout)) {
          pack_panels(dtype, from, n, k, laid.data());
        } else {
          std::memcpy(laid.data(), from, laid.size());
        }
        const WeightMatrix in_layout{dtype, laid.data(), dtype == DType::f32 ? nullptr : scales.data(), n, k, layout};
        if (!reads_layout_in_place(dtype, layout)) {
          EXPECT_THROW(StaticMatmul(engine, 1, in_layout, true), Error);
          continue;
        }
        for (int64_t m : {1, 3, 16, 17, 40}) {
          StaticMatmul expected(engine, m, rows, true), product(engine, m, in_layout, true);
          // Panels are read where they lie; 7-bit rows at least where they are this level's layout
          // (elsewhere a product may still lay them out in panels of its own, as it does rows).
          if (in_panels(layout) || layout == kernel_weight_layout(dtype)) {
            EXPECT_TRUE(product.reads_weights_in_place()) << "m " << m;
          }
          const std::vector<float> a = run(expected, x.data(), bias.data()), b = run(product, x.data(), bias.data());
          for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "m " << m << " value " << i;
        }
      }
    }
  }
  // What xf-convert writes here is read in place.
  EXPECT_TRUE(reads_layout_in_place(DType::int8, kernel_weight_layout(DType::int8)));
  EXPECT_TRUE(reads_layout_in_place(DType::f32, kernel_weight_layout(DType::f32)));
}

// run() over fewer rows than planned (the runtime's padding left out): those rows come out as in
// a run over all of them (int8 bit for bit, its contract; f32 within the f32 sum's rounding: the
// f32 panel kernel's 1- and 2-row tiles add k in interleaved partial sums, so a row's last bits
// depend on the tile it falls in), and xf's kernels leave the other rows of y unwritten.
TEST(StaticMatmul, RunOverTheFirstRowsComputesThoseAlone) {
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(2);
  const int64_t m = 48, n = 300, k = 256;
  const Int8Case w = make_int8_weights(n, k, random);
  const std::vector<float> x = random.uniform(m * k, -3.0f, 3.0f);
  const std::vector<float> bias = random.uniform(n, -1.0f, 1.0f);
  for (DType dtype : {DType::int8, DType::f32}) {
    const WeightMatrix weights = dtype == DType::int8
                                     ? WeightMatrix{DType::int8, w.quantized.data(), w.row_scales.data(), n, k}
                                     : WeightMatrix{DType::f32, w.weights.data(), nullptr, n, k};
    StaticMatmul matmul(engine, m, weights, true);
    SCOPED_TRACE(matmul.implementation());
    const std::vector<float> all = run(matmul, x.data(), bias.data());
    const ProductReference reference(x, w.weights, &bias, m, n, k);
    for (int64_t rows : {1, 5, 33, 48}) {
      const std::vector<float> some = run(matmul, x.data(), bias.data(), rows);
      for (int64_t i = 0; i < rows * n; ++i) {
        if (dtype == DType::int8) {
          ASSERT_EQ(some[i], all[i]) << "rows " << rows << " at " << i;
        } else {
          ASSERT_NEAR(some[i], all[i], 2 * reference.rounding_bound[i]) << "rows " << rows << " at " << i;
        }
      }
      if (std::string(matmul.implementation()).rfind("xf:", 0) == 0) {
        for (int64_t i = rows * n; i < m * n; ++i) ASSERT_TRUE(std::isnan(some[i])) << "rows " << rows << " at " << i;
      }
    }
    EXPECT_THROW(run(matmul, x.data(), bias.data(), m + 1), Error);
  }
}

// The few-row int8 kernel's row sums are made once per weight matrix, however many of the row
// counts 1..16 are planned for it, and freed with the last StaticMatmul using them (so is the
// 7-bit copy they are made from where int8 products saturate).
TEST(StaticMatmul, Int8RowSumsAreSharedAcrossRowCounts) {
  if (!int8_row_kernel_available()) GTEST_SKIP() << "skipped: no few-row int8 kernel on this CPU";
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  CpuEngine engine(1);
  const int64_t n = 300, k = 256;
  const Int8Case w = make_int8_weights(n, k, random);
  const WeightMatrix weights{DType::int8, w.quantized.data(), w.row_scales.data(), n, k};
  std::vector<StaticMatmul> matmuls;
  for (int64_t m = 1; m <= 16; ++m) matmuls.emplace_back(engine, m, weights, false);
  // The sums, and where int8 products saturate the 7-bit copy they are sums of; at plain AVX2
  // and SSE4.1 the copy is in panels of 16 rows (n = 300 padded to 304; k = 256 is whole groups
  // of 4).
  const std::string implementation = matmuls[0].implementation();
  const bool panels = implementation == "xf:int8_panels_avx2" || implementation == "xf:int8_panels_sse41";
  const size_t rows = panels ? 304 : n;
  const size_t seven_bit_copy = int8_products_saturate() ? rows * k : 0;
  EXPECT_EQ(engine.packed_weight_bytes(), rows * sizeof(int32_t) + seven_bit_copy);
  matmuls.clear();
  EXPECT_EQ(engine.packed_weight_bytes(), 0u);
}

// Large values of one sign in x and W: the pairs of u8 x s8 products that oneDNN adds in int16 on
// CPUs without VNNI overflow unless the weights have 7 bits (found on an AVX2 machine, where the
// product came out 32640 instead of 4129024); at plain AVX2, where xf's kernel adds two groups'
// pairs in int16, unless x has 7 bits too. k 260: an odd number of 4-byte groups (the last alone).
TEST(StaticMatmul, Int8OfAlignedExtremesIsExact) {
  CpuEngine engine(1);
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 256}, {4, 256}, {4, 260}, {7, 260}}) {
    const int64_t n = 8;
    std::vector<int8_t> weights(n * k, 127);
    for (int64_t c = 0; c < k; ++c) weights[1 * k + c] = -127;  // a row of the other sign
    const std::vector<float> scales(n, 1.0f / 127.0f);
    const std::vector<float> x(m * k, 1.0f);  // quantized to 127 per step of 1/127
    StaticMatmul matmul(engine, m, WeightMatrix{DType::int8, weights.data(), scales.data(), n, k},
                        false);
    const std::vector<float> y = run(matmul, x.data(), nullptr);
    // 127 (1.0 after scaling) in W, or its 7-bit copy 63 at twice the scale.
    const float w = int8_products_saturate() ? to_seven_bits(127) * 2.0f / 127.0f : 1.0f;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_NEAR(y[i * n + j], (j == 1 ? -1.0f : 1.0f) * static_cast<float>(k) * w, 1e-3f)
            << "m " << m << " row " << i << " column " << j << " (" << matmul.implementation()
            << ")";
      }
    }
  }
}

TEST(StaticMatmul, Int8OfZeroInputIsTheBias) {
  CpuEngine engine(1);
  const int64_t m = 2, n = 3, k = 5;
  std::vector<int8_t> weights(n * k, 9);
  const std::vector<float> scales(n, 0.5f), x(m * k, 0.0f), bias{1.0f, -2.0f, 3.0f};
  StaticMatmul matmul(engine, m, WeightMatrix{DType::int8, weights.data(), scales.data(), n, k},
                      true);
  const std::vector<float> y = run(matmul, x.data(), bias.data());
  for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(y[i], bias[i % n]);
}

float unchanged(float x) { return x; }
float rounded_to_bf16(float x) { return bfloat16_to_float(float_to_bfloat16(x)); }

using GemmFunction = std::function<std::vector<float>(bool, bool, int64_t, int64_t, int64_t, float,
                                                      const std::vector<float>&, int64_t,
                                                      const std::vector<float>&, int64_t, float,
                                                      std::vector<float>, int64_t)>;

// C = alpha op(A) op(B) + beta C for every transpose combination, with padded leading
// dimensions (left alone in C), against a double-precision reference over the inputs as
// `operand` sees them (unchanged for f32 and f16 products, rounded for bf16 ones). An f32 sum
// is held to dot_tolerance (rounding_bound), cuBLAS's (its own summation order) to 1e-5 of the
// sum of magnitudes. Returns the largest error against the reference over the inputs as given,
// in units of the tolerance: near or below 1 for f32 products, far above it where the inputs
// were rounded.
double check_gemm(const GemmFunction& product, float (*operand)(float), float alpha, float beta,
                  bool rounding_bound, const std::function<std::vector<float>(size_t, float, float)>& uniform) {
  SCOPED_TRACE("alpha " + std::to_string(alpha) + " beta " + std::to_string(beta));
  double worst_against_given = 0.0;
  for (auto [m, n, k, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{7, 13, 300, 3}, {37, 29, 45, 3}}) {
    for (bool transpose_a : {false, true}) {
      for (bool transpose_b : {false, true}) {
        SCOPED_TRACE("m " + std::to_string(m) + " transpose_a " + std::to_string(transpose_a) +
                     " transpose_b " + std::to_string(transpose_b));
        // Row-major with padded leading dimensions: A is [m, k] or [k, m], B [k, n] or [n, k].
        const int64_t lda = (transpose_a ? m : k) + pad, ldb = (transpose_b ? k : n) + pad - 1,
                      ldc = n + pad + 2;
        const std::vector<float> a = uniform((transpose_a ? k : m) * lda, -1.0f, 1.0f);
        const std::vector<float> b = uniform((transpose_b ? n : k) * ldb, -1.0f, 1.0f);
        const std::vector<float> c_before = uniform(m * ldc, -1.0f, 1.0f);
        const std::vector<float> c = product(transpose_a, transpose_b, m, n, k, alpha, a, lda, b,
                                             ldb, beta, c_before, ldc);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0.0, given_sum = 0.0, squares = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < k; ++p) {
              const float av = transpose_a ? a[p * lda + i] : a[i * lda + p];
              const float bv = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
              const double term = static_cast<double>(operand(av)) * operand(bv);
              sum += term;
              given_sum += static_cast<double>(av) * bv;
              squares += term * term;
              magnitude += std::fabs(term);
            }
            const double expected = alpha * sum + beta * c_before[i * ldc + j];
            const double tolerance =
                rounding_bound ? alpha * dot_tolerance(k, squares) + 4.0 * FLT_EPSILON * std::fabs(expected)
                               : 1e-5 * (std::fabs(expected) + alpha * magnitude +
                                         std::fabs(beta * c_before[i * ldc + j]));
            EXPECT_NEAR(c[i * ldc + j], expected, tolerance) << "row " << i << " column " << j;
            const double given = alpha * given_sum + beta * c_before[i * ldc + j];
            worst_against_given =
                std::max(worst_against_given, std::fabs(c[i * ldc + j] - given) / tolerance);
          }
          for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c_before[i * ldc + j]);
        }
      }
    }
  }
  return worst_against_given;
}

// The trainer's bf16 products (xf-train --bf16): exactly the f32 sums of the rounded inputs'
// products, and measurably not the f32 products of the inputs as given. Each shape twice, so the
// second call runs the primitive kept from the first over new data.
TEST(Bf16Gemm, ProductsOfRoundedInputsInEveryLayout) {
  if (!bf16_products_in_hardware()) {
    EXPECT_THROW(Bf16Gemm{2}, Error);
    GTEST_SKIP() << "this CPU has no bf16 instructions (AVX512-BF16 or AMX)";
  }
  test::RandomInputs random;
  SCOPED_TRACE(random.describe());
  Bf16Gemm bf16(2);
  const GemmFunction product = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                   const std::vector<float>& a, int64_t lda,
                                   const std::vector<float>& b, int64_t ldb, float beta,
                                   std::vector<float> c, int64_t ldc) {
    bf16.run(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  };
  const auto uniform = [&](size_t count, float low, float high) { return random.uniform(count, low, high); };
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (const auto& [alpha, beta] : {std::pair{0.75f, -0.5f}, {1.0f, 0.0f}, {1.0f, 1.0f}}) {
      EXPECT_GT(check_gemm(product, rounded_to_bf16, alpha, beta, true, uniform), 10.0)
          << "the products look like f32 products of the unrounded inputs";
    }
  }
  EXPECT_NE(std::string(bf16.implementation()), "");
}

// The trainer's linear layer (gemm plus bias) in double: its backward against finite
// differences of its forward (loss = sum(weights * y)).
TEST(Linear, BackwardMatchesFiniteDifferences) {
  using trainer::testing::expect_gradient;
  using trainer::testing::random_values;
  using trainer::testing::weighted_sum;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 5, in = 6, out = 4;
  auto x = random_values(rng, rows * in);
  auto weight = random_values(rng, out * in);
  auto bias = random_values(rng, out);
  const auto weights = random_values(rng, rows * out);
  std::vector<double> y(rows * out);
  auto loss = [&] {
    linear_forward<double>(x.data(), weight.data(), bias.data(), rows, in, out, y.data(), 1);
    return weighted_sum(weights, y.data());
  };
  const auto dx0 = random_values(rng, rows * in);
  auto dx = dx0;
  std::vector<double> dweight(out * in, 0.0), dbias(out, 0.0);
  linear_backward<double>(weights.data(), x.data(), weight.data(), rows, in, out, dx.data(),
                          /*accumulate_dx=*/true, dweight.data(), dbias.data(), 1);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, weight.data(), weight.size(), dweight.data(), "dweight");
  expect_gradient(loss, bias.data(), bias.size(), dbias.data(), "dbias");
  // Without accumulate_dx the old contents are replaced.
  auto dx_overwritten = dx0;
  linear_backward<double>(weights.data(), x.data(), weight.data(), rows, in, out,
                          dx_overwritten.data(), false, dweight.data(), dbias.data(), 1);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx_overwritten[i], dx[i], 1e-12);
}

}  // namespace
}  // namespace xf::cpu

namespace xf::test {
namespace {

using Gemm = KernelTest;

// On f16 buffers A and B are f16 (the values the reference reads), C and the sums f32.
TEST_P(Gemm, AllTransposeCombinationsWithStrides) {
  KernelDevice& d = device();
  const cpu::GemmFunction product = [&d](auto... args) { return d.gemm(args...); };
  const auto values = [this](size_t count, float low, float high) { return uniform(count, low, high); };
  for (const auto& [alpha, beta] : {std::pair{0.75f, -0.5f}, {0.75f, 0.5f}})
    cpu::check_gemm(product, cpu::unchanged, alpha, beta, d.kind() == DeviceKind::cpu, values);
}

XF_KERNEL_TEST_DEVICES(Gemm, all_devices());

using Matmul = KernelTest;

// y = x W^T over odd sizes (no multiple of a tile), a single decode row and a square layer-sized
// product, in every output precision of the device. The CPU's f32 sum is held to its rounding
// bound; CUDA's to its output's tolerance of sum |x w| (f32 output of f16 inputs: only the f32
// accumulation's rounding is left, 1e-4).
TEST_P(Matmul, TimesTransposedWeightsMatchesDoubleReference) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 32}, {7, 33, 65}, {32, 512, 512}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    const std::vector<float> x = uniform(m * k, -1.0f, 1.0f), w = uniform(n * k, -1.0f, 1.0f);
    const cpu::ProductReference ref(x, w, nullptr, m, n, k);
    for (const Precision out : device().matmul_outputs()) {
      const double tolerance = out == Precision::f16 ? 1e-2 : precision() == Precision::f16 ? 1e-4 : 1e-5;
      expect_within(device().matmul(x, w, m, n, k, out), ref.y, [&](size_t i) {
        return device().kind() == DeviceKind::cpu ? ref.rounding_bound[i]
                                                  : tolerance * (std::fabs(ref.y[i]) + ref.magnitude[i]);
      });
    }
  }
}

XF_KERNEL_TEST_DEVICES(Matmul, all_devices());

}  // namespace
}  // namespace xf::test
