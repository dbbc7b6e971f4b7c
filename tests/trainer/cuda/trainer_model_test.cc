// The CUDA trainer (CudaTransformerModel) against the CPU trainer (TransformerModel) on the same
// batch and weights: loss and every parameter's gradient within the precision's tolerance
// (f32: 1e-4 relative; f16 mixed precision: 2e-2), with dropout off and with dropout on (both
// backends draw the same masks), post- and pre-norm, tied and untied embeddings; the device Adam
// step against the CPU optimizer; dynamic loss scaling. Every test that needs a GPU skips
// without one; the last (the error for a missing device) runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "tiny_model.h"
#include "xf/trainer/cuda_model.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"

namespace xf::test {
namespace {

using trainer::CudaPrecision;
using trainer::CudaTransformerModel;
using trainer::TransformerModel;

constexpr double kF32ModelTolerance = 1e-4;
constexpr double kMixedModelTolerance = 2e-2;

struct ModelCase {
  const char* name;
  NormPosition norm;
  bool shared;  // shared embeddings and tied output (else separate tables and an output bias)
  float dropout;
  CudaPrecision precision;
  DecoderLayerKind decoder = DecoderLayerKind::self_attention;
};

// ctest shows the case's name rather than its bytes.
void PrintTo(const ModelCase& c, std::ostream* out) { *out << c.name; }

ModelConfig tiny_config(const ModelCase& c) {
  ModelConfig config = test::tiny_config(29);
  config.d_model = 16;
  config.d_ff = 24;
  config.encoder_layers = config.decoder_layers = 2;
  config.max_positions = 64;
  config.norm_position = c.norm;
  config.shared_embeddings = c.shared;
  config.tied_output = c.shared;
  config.output_bias = !c.shared;
  if (!c.shared) config.target_vocab_size = 31;
  config.decoder_layer_kind = c.decoder;
  return config;
}

// Sentences of 1..9 tokens (ids 4.. so no special token inside), padded into one batch.
trainer::Batch random_batch(const ModelConfig& config, RandomInputs& random, int sentences) {
  std::vector<std::vector<int32_t>> sources(sentences), targets(sentences);
  for (int i = 0; i < sentences; ++i) {
    sources[i].resize(random.integer(1, 9));
    targets[i].resize(random.integer(1, 9));
    for (int32_t& t : sources[i]) t = static_cast<int32_t>(random.integer(4, config.source_vocab_size - 1));
    for (int32_t& t : targets[i]) t = static_cast<int32_t>(random.integer(4, config.target_vocab_size - 1));
  }
  return trainer::make_batch(config, sources, targets);
}

// Every gradient element within tolerance * (|cpu| + scale), scale being the largest |cpu| of
// its parameter, but at least the RMS of the whole gradient: where a parameter's gradients are
// the small difference of large terms (the softmax backward of a nearly uniform attention gives
// the cross-attention query tiny gradients), rounding of those terms leaves errors of the terms'
// magnitude, not the result's (measured: ~100x the precision's epsilon relative to such a
// parameter's own largest gradient).
void expect_gradients_close(const TransformerModel& cpu, const std::vector<float>& device,
                            double tolerance) {
  double floor = 0;
  for (size_t i = 0; i < cpu.parameter_count(); ++i)
    floor += double(cpu.gradients()[i]) * cpu.gradients()[i];
  floor = std::sqrt(floor / cpu.parameter_count());
  for (const trainer::ParameterSlot& slot : cpu.slots()) {
    const float* expected = cpu.gradients() + slot.offset;
    double largest = 0;
    for (size_t i = 0; i < slot.size; ++i) largest = std::max(largest, std::fabs(double(expected[i])));
    const double scale = std::max(largest, floor);
    int bad = 0;
    for (size_t i = 0; i < slot.size; ++i) {
      const double got = device[slot.offset + i], want = expected[i];
      if (std::fabs(got - want) > tolerance * (std::fabs(want) + scale) && ++bad <= 3)
        ADD_FAILURE() << slot.spec.name << "[" << i << "]: CUDA " << got << ", CPU " << want
                      << " (largest |gradient| " << largest << ", floor " << floor << ")";
    }
    EXPECT_EQ(bad, 0) << slot.spec.name;
  }
}

class cuda_trainer_model_vs_cpu : public ::testing::TestWithParam<ModelCase> {};

TEST_P(cuda_trainer_model_vs_cpu, LossAndGradientsMatchCpuModel) {
  XF_SKIP_WITHOUT_GPU();
  const ModelCase& c = GetParam();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const ModelConfig config = tiny_config(c);
  trainer::TrainingOptions options;
  options.dropout = c.dropout;
  options.attention_dropout = c.dropout;
  options.label_smoothing = 0.1f;
  const double tolerance =
      c.precision == CudaPrecision::f32 ? kF32ModelTolerance : kMixedModelTolerance;

  TransformerModel cpu(config, options, 1);
  cpu.initialize(static_cast<uint64_t>(random.integer(1, 1 << 30)));
  if (c.precision == CudaPrecision::mixed_f16) {
    // ReLU's kink: an FFN pre-activation within f16 rounding of 0 switches its unit's gradient
    // on in one backend and off in the other, a jump no tolerance covers (in this tiny model one
    // such unit moved a layer's gradients by 10%). An inner bias of 4 (about 4 standard
    // deviations of the pre-activations) keeps them away from 0 here; the f32 cases test the kink.
    // The SSRU's relu(c) has the same kink: there 1 seed in 5 failed (issue 41's whole-suite run
    // found it), so the candidate half of its input_forget bias is 4 too; every cell, a convex
    // combination of candidates, then stays positive. The f32 SSRU case tests that kink.
    for (const trainer::ParameterSlot& slot : cpu.slots()) {
      if (slot.spec.name.find(std::string(schema::kFfnInner.name) + schema::kBias) != std::string::npos)
        std::fill(cpu.parameters() + slot.offset, cpu.parameters() + slot.offset + slot.size, 4.0f);
      if (slot.spec.name.find(std::string(schema::kSsruInputForget.name) + schema::kBias) != std::string::npos)
        std::fill(cpu.parameters() + slot.offset, cpu.parameters() + slot.offset + slot.size / 2, 4.0f);
    }
  }
  // A loss scale of 2^10 keeps this single step clear of f16 overflow (training would skip an
  // overflowing step and halve the scale; here the gradients themselves are compared).
  trainer::LossScaleOptions loss_scale;
  loss_scale.initial_scale = 1024;
  CudaTransformerModel gpu(config, options, c.precision, {}, loss_scale);
  ASSERT_EQ(gpu.parameter_count(), cpu.parameter_count());
  ASSERT_EQ(gpu.slots().size(), cpu.slots().size());
  for (size_t i = 0; i < cpu.slots().size(); ++i) {
    EXPECT_EQ(gpu.slots()[i].spec.name, cpu.slots()[i].spec.name);
    EXPECT_EQ(gpu.slots()[i].offset, cpu.slots()[i].offset);
  }
  gpu.set_parameters(cpu.parameters());
  std::vector<float> round_trip(cpu.parameter_count());
  gpu.copy_parameters_to(round_trip.data());
  EXPECT_TRUE(std::equal(round_trip.begin(), round_trip.end(), cpu.parameters()));

  for (int batch_index = 0; batch_index < 2; ++batch_index) {  // two shapes: arenas replan
    trainer::Batch batch = random_batch(config, random, 3 + 2 * batch_index);
    // The second batch as rows 5.. of a larger one (a data-parallel rank's share): both models
    // must draw the dropout masks of those rows.
    batch.row_offset = batch_index == 0 ? 0 : 5;
    const uint64_t seed = static_cast<uint64_t>(random.integer(1, 1 << 30));
    cpu.zero_gradients();
    gpu.zero_gradients();
    const trainer::LossSums want = cpu.forward_backward(batch, seed);
    const trainer::LossSums got = gpu.forward_backward(batch, seed);
    EXPECT_EQ(got.token_count, want.token_count);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, tolerance * std::fabs(want.loss_sum));
    EXPECT_NEAR(got.nll_sum, want.nll_sum, tolerance * std::fabs(want.nll_sum));
    std::vector<float> gradients(cpu.parameter_count());
    gpu.copy_gradients_to(gradients.data());
    expect_gradients_close(cpu, gradients, tolerance);

    const trainer::LossSums want_eval = cpu.evaluate(batch);
    const trainer::LossSums got_eval = gpu.evaluate(batch);
    EXPECT_NEAR(got_eval.loss_sum, want_eval.loss_sum, tolerance * std::fabs(want_eval.loss_sum));
    EXPECT_NEAR(got_eval.nll_sum, want_eval.nll_sum, tolerance * std::fabs(want_eval.nll_sum));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, cuda_trainer_model_vs_cpu,
    ::testing::Values(ModelCase{"post_norm_f32", NormPosition::post, true, 0.0f, CudaPrecision::f32},
                      ModelCase{"pre_norm_untied_f32", NormPosition::pre, false, 0.0f,
                                CudaPrecision::f32},
                      ModelCase{"post_norm_dropout_f32", NormPosition::post, true, 0.2f,
                                CudaPrecision::f32},
                      ModelCase{"pre_norm_dropout_f32", NormPosition::pre, true, 0.2f,
                                CudaPrecision::f32},
                      ModelCase{"post_norm_mixed_f16", NormPosition::post, true, 0.0f,
                                CudaPrecision::mixed_f16},
                      ModelCase{"pre_norm_untied_mixed_f16", NormPosition::pre, false, 0.0f,
                                CudaPrecision::mixed_f16},
                      ModelCase{"ssru_post_norm_dropout_f32", NormPosition::post, true, 0.2f, CudaPrecision::f32,
                                DecoderLayerKind::ssru},
                      ModelCase{"ssru_pre_norm_untied_mixed_f16", NormPosition::pre, false, 0.0f,
                                CudaPrecision::mixed_f16, DecoderLayerKind::ssru}),
    [](const ::testing::TestParamInfo<ModelCase>& info) { return std::string(info.param.name); });

TEST(cuda_trainer_model, AdamStepsEqualCpuOptimizerWithClipping) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const ModelConfig config = tiny_config({"", NormPosition::post, true, 0.0f, CudaPrecision::f32});
  TransformerModel cpu(config, {}, 1);
  cpu.initialize(static_cast<uint64_t>(random.integer(1, 1 << 30)));
  CudaTransformerModel gpu(config, {}, CudaPrecision::f32);
  gpu.set_parameters(cpu.parameters());
  trainer::Adam adam(cpu.parameter_count(), {}, 1);
  const trainer::LearningRateSchedule schedule{2.0, config.d_model, 10};
  for (int step = 1; step <= 3; ++step) {
    // The same gradients on both sides (the CPU model's), so only the update is compared.
    cpu.zero_gradients();
    const trainer::LossSums sums =
        cpu.forward_backward(random_batch(config, random, 4), static_cast<uint64_t>(step));
    gpu.set_gradients(cpu.gradients());
    double gradient_scale = 1.0 / sums.token_count;
    const double clip = step == 2 ? 0.01 : 0.0;  // step 2 clips: the norm is far above 0.01
    const double norm =
        trainer::gradient_norm(cpu.gradients(), cpu.parameter_count(), gradient_scale, 1);
    gradient_scale *= trainer::clip_factor(norm, clip);
    adam.step(cpu.parameters(), cpu.gradients(), schedule.at(step), gradient_scale);
    const trainer::CudaStepResult result =
        gpu.adam_step(schedule.at(step), 1.0 / sums.token_count, clip);
    EXPECT_TRUE(result.applied);
    EXPECT_NEAR(result.gradient_norm, norm, 1e-6 * norm);
    EXPECT_EQ(result.loss_scale, 1.0);
  }
  std::vector<float> parameters(cpu.parameter_count());
  gpu.copy_parameters_to(parameters.data());
  const trainer::AdamState state = gpu.adam_state();
  EXPECT_EQ(state.step, adam.state().step);
  auto expect_close_floats = [](const std::vector<float>& got, const float* want, size_t n,
                                double tolerance, const char* what) {
    int bad = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::fabs(double(got[i]) - want[i]) > tolerance * (std::fabs(double(want[i])) + 1e-6) &&
          ++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: CUDA " << got[i] << ", CPU " << want[i];
    EXPECT_EQ(bad, 0) << what;
  };
  // Same operations in the same order; the clip factors differ in the last bits (the norm is
  // summed in another order).
  expect_close_floats(parameters, cpu.parameters(), parameters.size(), 1e-5, "parameters");
  expect_close_floats(state.first_moment, adam.state().first_moment.data(), parameters.size(),
                      1e-5, "first moment");
  expect_close_floats(state.second_moment, adam.state().second_moment.data(), parameters.size(),
                      1e-5, "second moment");

  // The state goes back in (resume) and a wrong size is refused.
  CudaTransformerModel resumed(config, {}, CudaPrecision::f32);
  resumed.set_adam_state(state);
  EXPECT_EQ(resumed.adam_state().first_moment, state.first_moment);
  EXPECT_THROW(resumed.set_adam_state(trainer::AdamState{1, {1.0f}, {1.0f}}), Error);
}

TEST(cuda_trainer_model, LossScalingSkipsOverflowingStepsAndGrows) {
  XF_SKIP_WITHOUT_GPU();
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  const ModelConfig config =
      tiny_config({"", NormPosition::post, true, 0.0f, CudaPrecision::mixed_f16});
  TransformerModel cpu(config, {}, 1);
  cpu.initialize(static_cast<uint64_t>(random.integer(1, 1 << 30)));
  const trainer::Batch batch = random_batch(config, random, 4);

  // 2^40 times a logit gradient is far beyond f16's 65504: the step must be skipped.
  trainer::LossScaleOptions huge;
  huge.initial_scale = std::ldexp(1.0, 40);
  huge.max_scale = huge.initial_scale;
  CudaTransformerModel overflowing(config, {}, CudaPrecision::mixed_f16, {}, huge);
  overflowing.set_parameters(cpu.parameters());
  overflowing.zero_gradients();
  const trainer::LossSums sums = overflowing.forward_backward(batch, 1);
  const trainer::CudaStepResult skipped = overflowing.adam_step(1e-3, 1.0 / sums.token_count, 0);
  EXPECT_FALSE(skipped.applied);
  EXPECT_EQ(skipped.loss_scale, huge.initial_scale);
  EXPECT_EQ(overflowing.loss_scale(), huge.initial_scale / 2);
  std::vector<float> parameters(cpu.parameter_count());
  overflowing.copy_parameters_to(parameters.data());
  EXPECT_TRUE(std::equal(parameters.begin(), parameters.end(), cpu.parameters()));
  EXPECT_EQ(overflowing.adam_state().step, 0);

  // A sane scale: the step applies and, with a growth interval of 2, the scale doubles after
  // two good steps.
  trainer::LossScaleOptions growing;
  growing.initial_scale = 256;
  growing.growth_interval = 2;
  CudaTransformerModel model(config, {}, CudaPrecision::mixed_f16, {}, growing);
  model.set_parameters(cpu.parameters());
  for (int step = 1; step <= 2; ++step) {
    model.zero_gradients();
    const trainer::LossSums s = model.forward_backward(batch, static_cast<uint64_t>(step));
    const trainer::CudaStepResult result = model.adam_step(1e-3, 1.0 / s.token_count, 0);
    EXPECT_TRUE(result.applied);
    EXPECT_EQ(result.loss_scale, 256.0);
  }
  EXPECT_EQ(model.loss_scale(), 512.0);
  EXPECT_EQ(model.adam_state().step, 2);
}

TEST(cuda_trainer_model, MissingDeviceIsAOneLineError) {
  // Runs everywhere: without a GPU it names that; with one, device 4096 does not exist.
  const ModelConfig config = tiny_config({"", NormPosition::post, true, 0.0f, CudaPrecision::f32});
  try {
    CudaTransformerModel model(config, {}, CudaPrecision::f32, {}, {}, /*device=*/4096);
    FAIL() << "constructed a CUDA model on a device that does not exist";
  } catch (const Error& e) {
    const std::string message = e.what();
    const char* expected = gpu_unavailable_reason().empty() ? "CUDA training: device 4096 does not exist"
                                                            : "CUDA training: no usable CUDA device";
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace xf::test
