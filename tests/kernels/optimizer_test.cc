// The trainer's step kernels: dropout (its mask is the shared counter hash), Adam's update and
// the gradient norm's sum of squares, against references written from their contracts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernel_device.h"
#include "xf/error.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/optimizer.h"

namespace xf::test {
namespace {

using TrainingStep = KernelTest;

// Element i is kept where dropout_hash::keeps(site_stream(seed, site), threshold(p), i), then
// scaled by 1 / (1 - p): the same mask on every device, so a run resumes or moves bit for bit.
TEST_P(TrainingStep, DropoutKeepsTheHashedMaskScaled) {
  for (float p : {0.1f, 0.5f}) {
    const int64_t count = 10007;
    const uint64_t seed = static_cast<uint64_t>(random.integer(0, 1 << 30)), site = 0x200000103;
    const std::vector<float> x = random.uniform(count, -2.0f, 2.0f);
    const uint64_t stream = dropout_hash::site_stream(seed, site);
    const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
    std::vector<float> expected(count);
    int64_t kept = 0;
    for (int64_t i = 0; i < count; ++i) {
      const bool keep = dropout_hash::keeps(stream, dropout_hash::threshold(p), i);
      expected[i] = keep ? x[i] * scale : 0.0f;
      kept += keep;
    }
    EXPECT_EQ(device().dropout(x, seed, site, p), expected) << "p = " << p;
    EXPECT_NEAR(static_cast<double>(kept) / count, 1.0 - p, 0.03) << "p = " << p;
  }
  // p = 0 leaves the values alone.
  const std::vector<float> x = random.uniform(100, -1.0f, 1.0f);
  EXPECT_EQ(device().dropout(x, 1, 2, 0.0f), x);
  if (device().kind() == DeviceKind::cuda) {  // the CUDA rule refuses p = 1 on the host
    EXPECT_THROW(device().dropout(x, 1, 2, 1.0f), Error);
  }
}

// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 with g the scaled gradient, then
// p -= step_size m / (sqrt(v) inv_sqrt_correction2 + epsilon): the same f32 operations in the
// same order on every device, so equal up to the last bit, allowing one rounding of slack for a
// compiler that contracts a multiply-add.
TEST_P(TrainingStep, AdamStepIsTheF32UpdateToTheLastBit) {
  const int64_t count = 4099;
  std::vector<float> parameters = random.uniform(count, -1.0f, 1.0f);
  const std::vector<float> gradients = random.uniform(count, -30.0f, 30.0f);
  std::vector<float> m = random.uniform(count, -0.1f, 0.1f), v = random.uniform(count, 0, 0.01f);
  AdamConstants c;  // step 5 at learning rate 7e-4, the default betas and epsilon
  c.step_size = static_cast<float>(7e-4 / (1.0 - std::pow(0.9, 5)));
  c.inv_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(0.98, 5)));
  c.gradient_scale = 1.0f / 250;
  std::vector<float> want_p = parameters, want_m = m, want_v = v;
  for (int64_t i = 0; i < count; ++i) {
    const float g = gradients[i] * c.gradient_scale;
    want_m[i] = c.beta1 * want_m[i] + (1.0f - c.beta1) * g;
    want_v[i] = c.beta2 * want_v[i] + (1.0f - c.beta2) * g * g;
    want_p[i] -= c.step_size * want_m[i] / (std::sqrt(want_v[i]) * c.inv_sqrt_correction2 + c.epsilon);
  }
  device().adam_step(parameters, gradients, m, v, c);
  auto expect_equal_within_ulp = [](const std::vector<float>& got, const std::vector<float>& want,
                                    const char* what) {
    SCOPED_TRACE(what);
    expect_within(got, to_double(want), [&](size_t i) {
      return 2 * std::numeric_limits<float>::epsilon() * std::fabs(want[i]) + 1e-30;
    });
  };
  expect_equal_within_ulp(parameters, want_p, "parameters");
  expect_equal_within_ulp(m, want_m, "first moment");
  expect_equal_within_ulp(v, want_v, "second moment");
}

// In double, over chunks; an infinity or a NaN anywhere shows in the result (the loss scaler's
// overflow check).
TEST_P(TrainingStep, SumOfSquaresInDoubleFlagsNonFiniteValues) {
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1234567}}) {
    std::vector<float> x = random.uniform(count, -3.0f, 3.0f);
    double expected = 0;
    for (float value : x) expected += double(value) * value;
    EXPECT_NEAR(device().sum_of_squares(x), expected, 1e-12 * expected) << "count " << count;
    if (count < 1000) continue;
    x[count / 3] = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(std::isinf(device().sum_of_squares(x)));
    x[count / 2] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(device().sum_of_squares(x)));
  }
}

XF_KERNEL_TEST_DEVICES(TrainingStep, devices_with(Feature::f32_only_ops));

}  // namespace
}  // namespace xf::test
