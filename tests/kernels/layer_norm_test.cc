// LayerNorm(x + bias + residual) * gamma + beta (the biased variance, epsilon inside the root),
// its row statistics, and its backward, against double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "kernel_device.h"
#include "xf/kernels/layer_norm.h"

namespace xf::test {
namespace {

struct LayerNormReference {
  std::vector<double> out, mean, rstd;
};

LayerNormReference reference_layer_norm(const std::vector<float>& x, const std::vector<float>* bias,
                                        const std::vector<float>* residual,
                                        const std::vector<float>& gamma,
                                        const std::vector<float>& beta, double epsilon,
                                        int64_t rows, int64_t dim) {
  LayerNormReference ref{std::vector<double>(rows * dim), std::vector<double>(rows),
                         std::vector<double>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> v(dim);
    double sum = 0.0;
    for (int64_t c = 0; c < dim; ++c) {
      v[c] = static_cast<double>(x[r * dim + c]) + (bias ? (*bias)[c] : 0.0) +
             (residual ? (*residual)[r * dim + c] : 0.0);
      sum += v[c];
    }
    const double mean = sum / dim;
    double squares = 0.0;
    for (int64_t c = 0; c < dim; ++c) squares += (v[c] - mean) * (v[c] - mean);
    const double rstd = 1.0 / std::sqrt(squares / dim + epsilon);
    for (int64_t c = 0; c < dim; ++c) ref.out[r * dim + c] = (v[c] - mean) * rstd * gamma[c] + beta[c];
    ref.mean[r] = mean;
    ref.rstd[r] = rstd;
  }
  return ref;
}

class LayerNorm : public KernelTest {
 protected:
  void check(int64_t rows, int64_t dim, bool with_bias, bool with_residual, Alias alias) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " bias " +
                 std::to_string(with_bias) + " residual " + std::to_string(with_residual) +
                 " alias " + std::to_string(static_cast<int>(alias)));
    // An offset of 3 makes a one-pass variance lose digits; the kernel must not.
    const std::vector<float> x = uniform(rows * dim, 2.0f, 4.0f);
    const std::vector<float> residual = uniform(rows * dim, -1.0f, 1.0f);
    const std::vector<float> bias = uniform(dim, -0.5f, 0.5f);
    const std::vector<float> gamma = uniform(dim, 0.5f, 1.5f);
    const std::vector<float> beta = uniform(dim, -0.5f, 0.5f);
    const float epsilon = 1e-5f;
    const std::vector<float>* bias_in = with_bias ? &bias : nullptr;
    const std::vector<float>* residual_in = with_residual ? &residual : nullptr;
    const LayerNormReference ref =
        reference_layer_norm(x, bias_in, residual_in, gamma, beta, epsilon, rows, dim);
    std::vector<float> mean, rstd;
    const std::vector<float> out = device().layer_norm(x, bias_in, residual_in, gamma, beta,
                                                       epsilon, rows, dim, alias, &mean, &rstd);
    // Outputs are O(1) (scale 1); dim 1 normalizes to exactly beta. The statistics are f32 sums
    // (of f16 inputs on f16 buffers): f32 accuracy, relative.
    expect_close(out, ref.out, 1.0, tolerance());
    expect_close(mean, ref.mean, 0.0, 1e-5);
    expect_close(rstd, ref.rstd, 0.0, 1e-5);
  }
};

TEST_P(LayerNorm, MatchesReferenceForEveryInputCombination) {
  for (bool with_bias : {false, true}) {
    for (bool with_residual : {false, true}) {
      check(7, 512, with_bias, with_residual, Alias::none);
      check(3, 37, with_bias, with_residual, Alias::none);
    }
  }
  for (const int64_t dim : {1, 31, 1000}) check(9, dim, true, true, Alias::none);
}

// In place over x (the encoder's final LayerNorm) or over the residual (the post-norm residual
// stream).
TEST_P(LayerNorm, OutputMayAliasAnInput) {
  check(5, 64, true, true, Alias::x);
  check(12, 512, true, true, Alias::residual);
  check(5, 64, false, false, Alias::x);
}

TEST_P(LayerNorm, MeanAndRstdAreOptional) {
  const int64_t rows = 3, dim = 16;
  const std::vector<float> x = uniform(rows * dim, -1.0f, 1.0f);
  const std::vector<float> gamma(dim, 1.0f), beta(dim, 0.0f);
  std::vector<float> mean, rstd;
  EXPECT_EQ(device().layer_norm(x, nullptr, nullptr, gamma, beta, 1e-6f, rows, dim, Alias::none,
                                &mean, &rstd),
            device().layer_norm(x, nullptr, nullptr, gamma, beta, 1e-6f, rows, dim, Alias::none,
                                nullptr, nullptr));
}

XF_KERNEL_TEST_DEVICES(LayerNorm, all_devices());

// ---- backward ---------------------------------------------------------------------------------

using trainer::testing::expect_gradient;
using trainer::testing::random_values;
using trainer::testing::weighted_sum;

// The double reference itself against finite differences of the training forward.
TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t rows = 5, dim = 7;
  auto x = random_values(rng, rows * dim, -2, 2);
  auto gamma = random_values(rng, dim, 0.5, 1.5);
  auto beta = random_values(rng, dim);
  const auto weights = random_values(rng, rows * dim);
  const double eps = 1e-6;
  std::vector<double> out(rows * dim), mean(rows), rstd(rows);
  auto loss = [&] {
    cpu::layer_norm_forward<double>(x.data(), gamma.data(), beta.data(), eps, rows, dim,
                                    out.data(), mean.data(), rstd.data(), 2);
    return weighted_sum(weights, out.data());
  };
  loss();
  // The kernel accumulates: start every output from a known offset and subtract it after.
  const auto dx0 = random_values(rng, rows * dim), dg0 = random_values(rng, dim),
             db0 = random_values(rng, dim);
  auto dx = dx0, dgamma = dg0, dbeta = db0;
  cpu::layer_norm_backward<double>(weights.data(), x.data(), mean.data(), rstd.data(),
                                   gamma.data(), rows, dim, dx.data(), dgamma.data(),
                                   dbeta.data(), 2);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  for (int64_t j = 0; j < dim; ++j) {
    dgamma[j] -= dg0[j];
    dbeta[j] -= db0[j];
  }
  expect_gradient(loss, x.data(), x.size(), dx.data(), "dx");
  expect_gradient(loss, gamma.data(), gamma.size(), dgamma.data(), "dgamma");
  expect_gradient(loss, beta.data(), beta.size(), dbeta.data(), "dbeta");
}

using LayerNormBackward = KernelTest;

TEST_P(LayerNormBackward, MatchesDoubleReference) {
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{37, 96}, {1000, 300}, {3, 1030}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " dim " + std::to_string(dim));
    const std::vector<float> x = uniform(rows * dim, -2.0f, 3.0f);
    const std::vector<float> gamma = uniform(dim, 0.5f, 1.5f);
    const std::vector<float> dout = uniform(rows * dim, -1.0f, 1.0f);
    // dx, dgamma, dbeta start non-zero: the kernel accumulates.
    std::vector<float> dx = uniform(rows * dim, -1.0f, 1.0f);
    std::vector<float> dgamma = uniform(dim, -1.0f, 1.0f), dbeta = uniform(dim, -1.0f, 1.0f);
    // The forward's statistics, as f32.
    const LayerNormReference forward = reference_layer_norm(x, nullptr, nullptr, gamma, gamma, 1e-6, rows, dim);
    const std::vector<float> mean(forward.mean.begin(), forward.mean.end()),
        rstd(forward.rstd.begin(), forward.rstd.end());
    std::vector<double> dx_ref = to_double(dx), dgamma_ref = to_double(dgamma),
                        dbeta_ref = to_double(dbeta);
    cpu::layer_norm_backward<double>(to_double(dout).data(), to_double(x).data(),
                                     to_double(mean).data(), to_double(rstd).data(),
                                     to_double(gamma).data(), rows, dim, dx_ref.data(),
                                     dgamma_ref.data(), dbeta_ref.data(), 1);
    device().layer_norm_backward(dout, x, mean, rstd, gamma, rows, dim, dx, dgamma, dbeta);
    expect_close_to_largest(dx, dx_ref, tolerance());
    expect_close_to_largest(dgamma, dgamma_ref, tolerance());
    expect_close_to_largest(dbeta, dbeta_ref, tolerance());
  }
}

XF_KERNEL_TEST_DEVICES(LayerNormBackward, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
