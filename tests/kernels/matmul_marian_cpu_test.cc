// Marian's intgemm8 arithmetic (CPU only, matmul.h: marian_int8_product) against a plain
// transcription of what intgemm's Int8::Multiply computes with each of its kernels (AVX2,
// AVX512BW, AVX512VNNI), and on inputs whose answers are known by hand: the saturating 16-bit
// lanes, vpsignb's -128, the one multiplier shared by every row of a product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "random_inputs.h"
#include "xf/kernels/matmul.h"

namespace xf::cpu {
namespace {

struct Int8Weights {
  std::vector<int8_t> values;
  std::vector<float> scales;
  WeightMatrix matrix(int64_t n, int64_t k) const { return {DType::int8, values.data(), scales.data(), n, k}; }
};

// One product through marian_int8_product, its workspace its own.
std::vector<float> product(const Int8Weights& w, const std::vector<float>& x, int64_t rows, int64_t n, int64_t k,
                           const float* bias, int threads = 1, IntgemmKernel kernel = IntgemmKernel::avx2) {
  std::vector<char> storage(marian_int8_workspace_bytes(rows, k) + 64);
  void* workspace = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  std::vector<float> y(rows * n, -1.0f);
  marian_int8_product(w.matrix(n, k), x.data(), rows, bias, y.data(), workspace, threads, kernel);
  return y;
}

// Lane j of each register: AVX2's 16 lanes over each 32-byte register of the inner dimension,
// AVX512BW's 32 over each 64-byte one, every addition saturated to int16; AVX512VNNI's sums in
// int32.
std::vector<float> reference(const Int8Weights& w, const std::vector<float>& x, int64_t rows, int64_t n, int64_t k,
                             const float* bias, IntgemmKernel kernel = IntgemmKernel::avx2) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < rows * k; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const float multiplier = 127.0f / absmax;
  std::vector<int> a(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) a[i] = std::clamp(static_cast<int>(std::nearbyint(x[i] * multiplier)), -127, 127);
  const int64_t width = kernel == IntgemmKernel::avx512bw ? 64 : 32;  // bytes of a register
  const bool saturate = kernel != IntgemmKernel::avx512vnni;
  std::vector<float> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      int64_t total = 0;
      for (int64_t j = 0; j < width / 2; ++j) {
        int64_t lane = 0;
        for (int64_t block = 0; block < k; block += width) {
          int64_t pair = 0;
          for (int64_t i = block + 2 * j; i < std::min(block + 2 * j + 2, k); ++i) {
            const int av = a[r * k + i], wv = w.values[c * k + i];
            const int signed_w = av > 0 ? wv : (av < 0 ? (wv == -128 ? -128 : -wv) : 0);  // vpsignb
            pair += std::abs(av) * signed_w;
          }
          lane = saturate ? std::clamp<int64_t>(lane + pair, -32768, 32767) : lane + pair;
        }
        total += lane;
      }
      // Rounded before the add, as intgemm's separate instructions (`volatile`: no fused FMA).
      const volatile float value = static_cast<float>(total) * (1.0f / (multiplier * (1.0f / w.scales[c])));
      y[r * n + c] = bias != nullptr ? value + bias[c] : value;
    }
  }
  return y;
}

Int8Weights random_weights(test::RandomInputs& random, int64_t n, int64_t k) {
  Int8Weights w;
  for (int64_t i = 0; i < n * k; ++i) w.values.push_back(static_cast<int8_t>(random.integer(-127, 127)));
  w.scales = random.uniform(n, 0.001f, 0.02f);
  return w;
}

TEST(MarianInt8Product, EqualsIntgemmsArithmeticBitForBit) {
  test::RandomInputs random;
  for (const IntgemmKernel kernel : {IntgemmKernel::avx2, IntgemmKernel::avx512bw, IntgemmKernel::avx512vnni}) {
    // Inner sizes of whole registers and with a partial last one; rows of one product.
    for (const auto& [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 70, 32}, {5, 96, 256}, {3, 33, 40},
                                    {2, 20, 96}, {17, 130, 1536}}) {
      SCOPED_TRACE("kernel " + std::to_string(static_cast<int>(kernel)) + ", " + std::to_string(rows) + "x" +
                   std::to_string(n) + "x" + std::to_string(k) + ", " + random.describe());
      const Int8Weights w = random_weights(random, n, k);
      // Large activations so that some lanes saturate at k = 1536.
      const std::vector<float> x = random.uniform(rows * k, -3.0f, 3.0f), bias = random.uniform(n, -1.0f, 1.0f);
      const std::vector<float> expected = reference(w, x, rows, n, k, bias.data(), kernel);
      const std::vector<float> got = product(w, x, rows, n, k, bias.data(), 1, kernel);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "output " << i;
      EXPECT_EQ(product(w, x, rows, n, k, bias.data(), 2, kernel), expected) << "two threads";
      EXPECT_EQ(product(w, x, rows, n, k, nullptr, 1, kernel), reference(w, x, rows, n, k, nullptr, kernel)) << "no bias";
    }
  }
}

// Every value 1: x quantizes to 127 (multiplier 127), W (row scale 1/127) holds 127, and each
// pair of terms adds 2 x 127 x 127 = 32,258 to its lane. AVX2: a 64-term dot adds two pairs
// into each of 16 lanes, which saturate at 32,767: 16 x 32,767 / (127 x 127) = 32.5, not 64.
// AVX512BW: 32 lanes of one pair each (64, exact); 128 terms saturate them (65, not 128).
// AVX512VNNI: exact.
TEST(MarianInt8Product, LanesSaturateAtInt16) {
  const auto dot_of_ones = [](int64_t k, IntgemmKernel kernel) {
    Int8Weights w{std::vector<int8_t>(k, 127), {1.0f / 127.0f}};
    return product(w, std::vector<float>(k, 1.0f), 1, 1, k, nullptr, 1, kernel)[0];
  };
  const float unquantize = 1.0f / (127.0f * (1.0f / (1.0f / 127.0f)));
  EXPECT_EQ(dot_of_ones(64, IntgemmKernel::avx2), 16.0f * 32767.0f * unquantize);
  EXPECT_NEAR(dot_of_ones(64, IntgemmKernel::avx2), 32.5f, 0.01f);
  EXPECT_NEAR(dot_of_ones(32, IntgemmKernel::avx2), 32.0f, 1e-4f);  // one chunk: no saturation
  EXPECT_NEAR(dot_of_ones(64, IntgemmKernel::avx512bw), 64.0f, 1e-3f);
  EXPECT_EQ(dot_of_ones(128, IntgemmKernel::avx512bw), 32.0f * 32767.0f * unquantize);
  EXPECT_NEAR(dot_of_ones(128, IntgemmKernel::avx512vnni), 128.0f, 1e-3f);
}

// vpsignb negates W's byte where x's is negative, and -128 negated stays -128: x = -1 (-127)
// against W = -128 gives -127 x 128 per term, where the true product is +.
TEST(MarianInt8Product, SignOfMinus128StaysNegative) {
  Int8Weights w{std::vector<int8_t>(2, -128), {1.0f}};
  for (const IntgemmKernel kernel : {IntgemmKernel::avx2, IntgemmKernel::avx512bw, IntgemmKernel::avx512vnni})
    EXPECT_EQ(product(w, {-1.0f, -1.0f}, 1, 1, 2, nullptr, 1, kernel)[0], -2.0f * 127.0f * 128.0f * (1.0f / 127.0f));
}

// One multiplier for the whole product: a row of small values quantizes coarsely beside a row
// of large ones (Marian's outputs depend on what its batch holds), finely alone.
TEST(MarianInt8Product, OneMultiplierForEveryRow) {
  const int64_t k = 32;
  Int8Weights w{std::vector<int8_t>(k, 1), {1.0f}};
  std::vector<float> x(2 * k, 0.0f);
  for (int64_t i = 0; i < k; ++i) x[i] = 0.01f * static_cast<float>(i % 3);  // row 0: 0, 0.01, 0.02
  x[k] = 100.0f;                                                              // row 1: one large value
  const float alone = product(w, std::vector<float>(x.begin(), x.begin() + k), 1, 1, k, nullptr)[0];
  const float beside = product(w, x, 2, 1, k, nullptr)[0];
  EXPECT_NEAR(alone, 0.31f, 1e-3f);  // the 32 values sum to 0.31 (11 x 0.01, 10 x 0.02)
  EXPECT_EQ(beside, 0.0f);                           // 0.02 x 127 / 100 rounds to 0
  EXPECT_EQ(product(w, std::vector<float>(2 * k, 0.0f), 2, 1, k, std::vector<float>{0.5f}.data())[0], 0.5f);
}

}  // namespace
}  // namespace xf::cpu
