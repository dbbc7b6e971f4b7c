// Bias + residual, bias + activation (ReLU, swish, GELU), and the backward of the bias and of
// bias + ReLU, against double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/kernels/activation.h"

namespace xf::test {
namespace {

// A sum of f32 values rounds to within a few eps of the sum of their magnitudes; an f16 result
// holds to 1e-2 of itself, with 1e-2 absolute near 0.
double sum_allowance(Precision p, double expected, double magnitude) {
  return p == Precision::f16 ? 1e-2 * (std::fabs(expected) + 1.0) : 1e-6 * magnitude;
}

using Activations = KernelTest;

TEST_P(Activations, AddBiasResidualAddsWhateverIsGiven) {
  const int64_t rows = 13, dim = 129;
  const std::vector<float> x = uniform(rows * dim, -2.0f, 2.0f);
  const std::vector<float> bias = uniform(dim, -1.0f, 1.0f);
  const std::vector<float> residual = uniform(rows * dim, -2.0f, 2.0f);
  for (bool with_bias : {false, true}) {
    for (bool with_residual : {false, true}) {
      SCOPED_TRACE("bias " + std::to_string(with_bias) + " residual " + std::to_string(with_residual));
      std::vector<double> expected(rows * dim), magnitude(rows * dim);
      for (int64_t i = 0; i < rows * dim; ++i) {
        const double b = with_bias ? bias[i % dim] : 0.0, r = with_residual ? residual[i] : 0.0;
        expected[i] = x[i] + b + r;
        magnitude[i] = std::fabs(x[i]) + std::fabs(b) + std::fabs(r);
      }
      const std::vector<float> out = device().add_bias_residual(
          x, with_bias ? &bias : nullptr, with_residual ? &residual : nullptr, rows, dim);
      expect_within(out, expected,
                    [&](size_t i) { return sum_allowance(precision(), expected[i], magnitude[i]); });
    }
  }
}

TEST_P(Activations, BiasReluClampsNegativesAfterTheBias) {
  const int64_t rows = 6, dim = 2048;
  const std::vector<float> x = uniform(rows * dim, -1.0f, 1.0f);
  const std::vector<float> bias = uniform(dim, -0.5f, 0.5f);
  for (bool with_bias : {true, false}) {
    std::vector<double> expected(rows * dim), magnitude(rows * dim);
    for (int64_t i = 0; i < rows * dim; ++i) {
      const double b = with_bias ? bias[i % dim] : 0.0;
      expected[i] = std::max(0.0, x[i] + b);
      magnitude[i] = std::fabs(x[i]) + std::fabs(b);
    }
    expect_within(device().bias_relu(x, with_bias ? &bias : nullptr, rows, dim), expected,
                  [&](size_t i) { return sum_allowance(precision(), expected[i], magnitude[i]); });
  }
}

// swish x * sigmoid(x) and gelu x * Phi(x) (erf) after the bias, against double formulas, over
// a range that reaches exp's overflow; relu through bias_activation too.
TEST_P(Activations, SwishAndGeluMatchDoubleFormulas) {
  const int64_t rows = 7, dim = 45;
  std::vector<float> x = uniform(rows * dim, -12.0f, 12.0f);
  x[0] = -100.0f;  // exp(100) overflows float: swish must give -0, not NaN
  x[1] = 100.0f;
  const std::vector<float> bias = uniform(dim, -1.0f, 1.0f);
  // The CPU's exp and erf are held to 2e-6; the CUDA kernels' to their precision's tolerance.
  const double tolerance = device().kind() == DeviceKind::cpu ? 2e-6 : this->tolerance();
  for (const Activation activation : {Activation::swish, Activation::gelu, Activation::relu}) {
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE("activation " + std::to_string(static_cast<int>(activation)) + " bias " +
                   std::to_string(with_bias));
      std::vector<double> expected(rows * dim);
      for (int64_t i = 0; i < rows * dim; ++i) {
        const double v = static_cast<double>(x[i]) + (with_bias ? bias[i % dim] : 0.0);
        expected[i] = activation == Activation::swish  ? v / (1.0 + std::exp(-v))
                      : activation == Activation::gelu ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))
                                                       : std::max(v, 0.0);
      }
      expect_close(device().bias_activation(x, with_bias ? &bias : nullptr, rows, dim, activation),
                   expected, 1.0, tolerance);
    }
  }
}

XF_KERNEL_TEST_DEVICES(Activations, all_devices());

// ---- backward ---------------------------------------------------------------------------------

using trainer::testing::expect_gradient;
using trainer::testing::random_values;
using trainer::testing::weighted_sum;

// The double references themselves: finite differences of the training forward, and the
// column sum written out.
TEST(ActivationReference, BiasReluBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 6, dim = 9;
  auto x = random_values(rng, rows * dim);
  auto bias = random_values(rng, dim, -0.5, 0.5);
  // Finite differences straddle relu's kink where x + bias is within a step (1e-5) of 0: keep
  // every pre-activation 1e-3 away from it (once in about a thousand runs one was not).
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j)
      if (std::abs(x[r * dim + j] + bias[j]) < 1e-3) x[r * dim + j] = -bias[j] + (x[r * dim + j] + bias[j] < 0 ? -1e-3 : 1e-3);
  const auto weights = random_values(rng, rows * dim);
  std::vector<double> y(rows * dim);
  auto loss = [&] {
    y = x;
    cpu::bias_relu_forward<double>(y.data(), bias.data(), rows, dim, 2);
    return weighted_sum(weights, y.data());
  };
  loss();
  auto dx = weights;
  std::vector<double> dbias(dim, 0.0);
  cpu::bias_relu_backward<double>(dx.data(), y.data(), rows, dim, dbias.data(), 2);
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, bias.data(), bias.size(), dbias.data(), "dbias");
}

TEST(ActivationReference, BiasBackwardIsTheColumnSum) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 11, dim = 37;
  const auto dy = random_values(rng, rows * dim);
  const auto start = random_values(rng, dim);
  auto dbias = start;
  cpu::bias_backward<double>(dy.data(), rows, dim, dbias.data(), 2);
  for (int64_t j = 0; j < dim; ++j) {
    double sum = start[j];
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * dim + j];
    EXPECT_NEAR(dbias[j], sum, 1e-12) << "column " << j;
  }
}

using ActivationBackward = KernelTest;

TEST_P(ActivationBackward, BiasAndReluBackwardMatchDoubleReference) {
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{5, 7}, {2049, 300}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
    std::vector<float> y = uniform(rows * dim, -1.0f, 1.0f);
    for (float& v : y) v = std::max(v, 0.0f);  // a ReLU output: about half exact zeros
    const std::vector<float> dy = uniform(rows * dim, -1.0f, 1.0f);
    const std::vector<float> dbias0 = uniform(dim, -1.0f, 1.0f);  // the kernels accumulate

    std::vector<double> dy_ref = to_double(dy), dbias_ref = to_double(dbias0);
    cpu::bias_relu_backward<double>(dy_ref.data(), to_double(y).data(), rows, dim,
                                    dbias_ref.data(), 1);
    std::vector<float> masked = dy, dbias = dbias0;
    device().bias_relu_backward(masked, y, rows, dim, dbias);
    EXPECT_EQ(to_double(masked), dy_ref);  // a mask: exact
    expect_close_to_largest(dbias, dbias_ref, tolerance());

    std::vector<double> bias_only = to_double(dbias0);
    cpu::bias_backward<double>(to_double(dy).data(), rows, dim, bias_only.data(), 1);
    dbias = dbias0;
    device().bias_backward(dy, rows, dim, dbias);
    expect_close_to_largest(dbias, bias_only, tolerance());
  }
}

XF_KERNEL_TEST_DEVICES(ActivationBackward, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
