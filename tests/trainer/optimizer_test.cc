// Adam, the learning-rate schedule and gradient clipping against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "xf/error.h"
#include "xf/trainer/optimizer.h"

namespace xf::trainer {
namespace {

TEST(LearningRateSchedule, PaperFormulaByHand) {
  const LearningRateSchedule base{1.0, 512, 4000};
  // 512^-0.5 * 1 * 4000^-1.5 during warmup; (512 * 4000)^-0.5 at its peak.
  EXPECT_NEAR(base.at(1), 1.746928107421711e-07, 1e-18);
  EXPECT_NEAR(base.at(4000), 6.987712429686843e-04, 1e-15);
  EXPECT_LT(base.at(3999), base.at(4000));
  EXPECT_LT(base.at(4001), base.at(4000));
  // scale 2, d_model 256, after warmup: 2 * 256^-0.5 * 16000^-0.5.
  const LearningRateSchedule scaled{2.0, 256, 4000};
  EXPECT_NEAR(scaled.at(16000), 9.882117688026185e-04, 1e-15);
}

TEST(LearningRateSchedule, RejectsStepZero) {
  const LearningRateSchedule schedule{1.0, 512, 4000};
  EXPECT_THROW(schedule.at(0), Error);
  const LearningRateSchedule no_warmup{1.0, 512, 0};
  EXPECT_THROW(no_warmup.at(1), Error);
}

TEST(Adam, TwoStepsByHand) {
  // Three parameters starting at 1; summed gradients, scaled by 0.5 (mean over 2 tokens).
  // Expected values: the bias-corrected Adam rule worked through by hand (beta 0.9, 0.98,
  // eps 1e-9, lr 0.1) with g = (0.5, -2, 0) then (-0.25, 1, 0).
  std::vector<float> params = {1.0f, 1.0f, 1.0f};
  Adam adam(params.size(), AdamOptions{}, 2);
  const std::vector<float> grads1 = {1.0f, -4.0f, 0.0f};
  adam.step(params.data(), grads1.data(), 0.1, 0.5);
  EXPECT_NEAR(params[0], 0.9000000001999999, 1e-6);
  EXPECT_NEAR(params[1], 1.09999999995, 1e-6);
  EXPECT_EQ(params[2], 1.0f);
  const std::vector<float> grads2 = {-0.5f, 2.0f, 0.0f};
  adam.step(params.data(), grads2.data(), 0.1, 0.5);
  EXPECT_NEAR(params[0], 0.8732892289124211, 1e-6);
  EXPECT_NEAR(params[1], 1.1267107712884135, 1e-6);
  EXPECT_EQ(params[2], 1.0f);
  EXPECT_EQ(adam.state().step, 2);
  // m after two steps: 0.9 * 0.05 + 0.1 * (-0.25) = 0.02 for the first parameter.
  EXPECT_NEAR(adam.state().first_moment[0], 0.02, 1e-7);
  // v: 0.98 * 0.005 + 0.02 * 0.0625 = 0.00615.
  EXPECT_NEAR(adam.state().second_moment[0], 0.00615, 1e-8);
}

TEST(Adam, RestoredStateContinuesExactly) {
  const size_t n = 1000;
  std::vector<float> grads(n);
  auto gradients_at = [&](int step) {
    for (size_t i = 0; i < n; ++i) grads[i] = float((i * 7 + step * 13) % 17) - 8.0f;
  };
  std::vector<float> straight(n, 0.5f), resumed(n, 0.5f);
  Adam first(n, AdamOptions{}, 2);
  for (int step = 1; step <= 3; ++step) {
    gradients_at(step);
    first.step(straight.data(), grads.data(), 1e-3, 0.1);
  }
  Adam before(n, AdamOptions{}, 2);
  gradients_at(1);
  before.step(resumed.data(), grads.data(), 1e-3, 0.1);
  Adam after(n, AdamOptions{}, 1);  // a different thread count must not matter
  after.set_state(before.state());
  for (int step = 2; step <= 3; ++step) {
    gradients_at(step);
    after.step(resumed.data(), grads.data(), 1e-3, 0.1);
  }
  EXPECT_EQ(straight, resumed);
  EXPECT_EQ(after.state().step, 3);
}

TEST(Adam, RejectsStateOfAnotherSize) {
  Adam adam(10, AdamOptions{}, 1);
  AdamState wrong;
  wrong.first_moment.resize(9);
  wrong.second_moment.resize(9);
  EXPECT_THROW(adam.set_state(wrong), Error);
}

TEST(GradientClipping, NormAndFactor) {
  const std::vector<float> grads = {3.0f, 0.0f, -4.0f};
  EXPECT_NEAR(gradient_norm(grads.data(), grads.size(), 2.0, 2), 10.0, 1e-12);
  EXPECT_DOUBLE_EQ(clip_factor(10.0, 5.0), 0.5);
  EXPECT_DOUBLE_EQ(clip_factor(3.0, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_factor(10.0, 0.0), 1.0);  // disabled
  // A buffer longer than one reduction chunk.
  std::vector<float> many(200000, 0.5f);
  EXPECT_NEAR(gradient_norm(many.data(), many.size(), 1.0, 2), std::sqrt(200000 * 0.25), 1e-9);
}

}  // namespace
}  // namespace xf::trainer
