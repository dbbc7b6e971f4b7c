// Marian's intgemm8 arithmetic (CPU only, matmul.h: marian_int8_product) against a plain
// transcription of what intgemm's AVX2 Int8::Multiply computes, and on inputs whose answers are
// known by hand: the saturating 16-bit lanes, vpsignb's -128, the one multiplier shared by
// every row of a product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
                           const float* bias, int threads = 1) {
  std::vector<char> storage(marian_int8_workspace_bytes(rows, k) + 64);
  void* workspace = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  std::vector<float> y(rows * n, -1.0f);
  marian_int8_product(w.matrix(n, k), x.data(), rows, bias, y.data(), workspace, threads);
  return y;
}

// Lane j of every 32-byte block, pair by pair, each addition saturated to int16.
std::vector<float> reference(const Int8Weights& w, const std::vector<float>& x, int64_t rows, int64_t n, int64_t k,
                             const float* bias) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < rows * k; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const float multiplier = 127.0f / absmax;
  std::vector<int> a(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) a[i] = std::clamp(static_cast<int>(std::nearbyint(x[i] * multiplier)), -127, 127);
  std::vector<float> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      int64_t total = 0;
      for (int j = 0; j < 16; ++j) {
        int64_t lane = 0;
        for (int64_t block = 0; block < k; block += 32) {
          int64_t pair = 0;
          for (int64_t i = block + 2 * j; i < std::min(block + 2 * j + 2, k); ++i) {
            const int av = a[r * k + i], wv = w.values[c * k + i];
            const int signed_w = av > 0 ? wv : (av < 0 ? (wv == -128 ? -128 : -wv) : 0);  // vpsignb
            pair += std::abs(av) * signed_w;
          }
          lane = std::clamp<int64_t>(lane + pair, -32768, 32767);
        }
        total += lane;
      }
      const float value = static_cast<float>(total) * (1.0f / (multiplier * (1.0f / w.scales[c])));
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
  // Inner sizes of whole 32-byte blocks and with a partial last one; rows of one product.
  for (const auto& [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 70, 32}, {5, 96, 256}, {3, 33, 40},
                                  {17, 130, 1536}}) {
    const Int8Weights w = random_weights(random, n, k);
    // Large activations so that some lanes saturate at k = 1536.
    const std::vector<float> x = random.uniform(rows * k, -3.0f, 3.0f), bias = random.uniform(n, -1.0f, 1.0f);
    const std::vector<float> expected = reference(w, x, rows, n, k, bias.data());
    const std::vector<float> got = product(w, x, rows, n, k, bias.data());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], expected[i]) << "output " << i << " of " << rows << "x" << n << "x" << k << ", " << random.describe();
    EXPECT_EQ(product(w, x, rows, n, k, bias.data(), 2), expected) << "two threads, " << rows << "x" << n << "x" << k;
    EXPECT_EQ(product(w, x, rows, n, k, nullptr), reference(w, x, rows, n, k, nullptr)) << "no bias";
  }
}

// Every value 1: x quantizes to 127 (multiplier 127), W (row scale 1/127) holds 127. Each lane
// adds 2 x 127 x 127 = 32,258 per block: two blocks saturate at 32,767, so the 64-term dot gives
// 16 x 32,767 / (127 x 127) = 32.5, not 64.
TEST(MarianInt8Product, LanesSaturateAtInt16) {
  const int64_t k = 64;
  Int8Weights w{std::vector<int8_t>(k, 127), {1.0f / 127.0f}};
  const std::vector<float> x(k, 1.0f);
  const float y = product(w, x, 1, 1, k, nullptr)[0];
  EXPECT_EQ(y, 16.0f * 32767.0f * (1.0f / (127.0f * (1.0f / (1.0f / 127.0f)))));
  EXPECT_NEAR(y, 32.5f, 0.01f);
  // One block does not saturate: 32 x 127 x 127 / 127^2 = 32.
  EXPECT_NEAR(product(w, std::vector<float>(32, 1.0f), 1, 1, 32, nullptr)[0], 32.0f, 1e-4f);
}

// vpsignb negates W's byte where x's is negative, and -128 negated stays -128: x = -1 (-127)
// against W = -128 gives -127 x 128 per term, where the true product is +.
TEST(MarianInt8Product, SignOfMinus128StaysNegative) {
  Int8Weights w{std::vector<int8_t>(2, -128), {1.0f}};
  const float y = product(w, {-1.0f, -1.0f}, 1, 1, 2, nullptr)[0];
  EXPECT_EQ(y, -2.0f * 127.0f * 128.0f * (1.0f / 127.0f));
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
