// The trainer against the independent PyTorch implementation's golden vectors
// (tests/reference/): logits, label-smoothed loss and the gradient of every parameter of two
// tiny models (post-norm with shared embeddings; pre-norm with separate tables and output bias).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "golden.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {
namespace {

using golden::GoldenFile;

Batch golden_batch(const GoldenFile& g) {
  const auto& source = golden::golden_at(g, "source.ids");
  const auto& target_in = golden::golden_at(g, "target_in.ids");
  Batch batch;
  batch.batch_size = static_cast<int64_t>(source.shape[0]);
  batch.source_len = static_cast<int64_t>(source.shape[1]);
  batch.target_len = static_cast<int64_t>(target_in.shape[1]);
  batch.source_ids = source.to_i32();
  batch.target_input_ids = target_in.to_i32();
  batch.target_output_ids = golden::golden_at(g, "target_out.ids").to_i32();
  batch.source_lengths = golden::golden_at(g, "source.lengths").to_i32();
  batch.target_lengths = golden::golden_at(g, "target.lengths").to_i32();
  for (int32_t n : batch.source_lengths) batch.source_tokens += n;
  for (int32_t n : batch.target_lengths) batch.target_tokens += n;
  return batch;
}

template <typename Scalar>
void check_case(const std::string& name, double loss_tolerance, double tensor_tolerance) {
  SCOPED_TRACE(name);
  const GoldenFile g = golden::load_golden(golden::golden_path(name));
  const ModelConfig config = golden::golden_config(g);
  TrainingOptions options;
  options.dropout = 0;
  options.label_smoothing = static_cast<float>(golden::golden_at(g, "loss.label_smoothing").scalar());
  BasicTransformerModel<Scalar> model(config, options, 1);
  const std::vector<double> weights = golden::golden_parameter_buffer(g, "param.");
  ASSERT_EQ(weights.size(), model.parameter_count());
  std::copy(weights.begin(), weights.end(), model.parameters());
  const Batch batch = golden_batch(g);

  // Logits of the valid positions (the golden file zeroes padding rows).
  const LossSums evaluated = model.evaluate(batch);
  const auto& logits = golden::golden_at(g, "decoder.logits");
  const int64_t vocab = config.target_vocab_size;
  double largest = 0;
  for (double v : logits.values) largest = std::max(largest, std::abs(v));
  int failures = 0;
  for (int64_t b = 0; b < batch.batch_size; ++b)
    for (int64_t t = 0; t < batch.target_lengths[b]; ++t)
      for (int64_t v = 0; v < vocab; ++v) {
        const size_t i = static_cast<size_t>((b * batch.target_len + t) * vocab + v);
        if (std::abs(model.last_logits()[i] - logits.values[i]) > tensor_tolerance * largest &&
            ++failures <= 5)
          ADD_FAILURE() << "logit [" << b << "," << t << "," << v << "]: " << model.last_logits()[i]
                        << " vs golden " << logits.values[i];
      }
  EXPECT_EQ(failures, 0) << "logits";

  const double loss_sum = golden::golden_at(g, "loss.sum").scalar();
  EXPECT_EQ(evaluated.token_count, golden::golden_at(g, "loss.tokens").integer(0));
  EXPECT_NEAR(evaluated.loss_sum, loss_sum, loss_tolerance * std::abs(loss_sum));

  model.zero_gradients();
  const LossSums trained = model.forward_backward(batch, 1);
  EXPECT_NEAR(trained.loss_sum, loss_sum, loss_tolerance * std::abs(loss_sum));
  for (const ParameterSlot& slot : model.slots()) {
    const auto& expected = golden::golden_at(g, "grad." + slot.spec.name);
    double scale = 0;
    for (double v : expected.values) scale = std::max(scale, std::abs(v));
    int bad = 0;
    for (size_t i = 0; i < slot.size; ++i) {
      const double actual = model.gradients()[slot.offset + i];
      if (std::abs(actual - expected.values[i]) > tensor_tolerance * scale && ++bad <= 3)
        ADD_FAILURE() << "grad." << slot.spec.name << "[" << i << "]: " << actual
                      << " vs golden " << expected.values[i];
    }
    EXPECT_EQ(bad, 0) << "grad." << slot.spec.name;
  }
}

TEST(TrainerGolden, DoubleMatchesReference) {
  for (const std::string& name : golden::golden_case_names())
    check_case<double>(name, 1e-12, 1e-12);
}

TEST(TrainerGolden, FloatMatchesReference) {
  // README's float32 tolerances: loss 1e-5 relative; logits 1e-5 and gradients 1e-4 of each
  // tensor's largest |entry|.
  for (const std::string& name : golden::golden_case_names()) {
    check_case<float>(name, 1e-5, 1e-4);
  }
}

}  // namespace
}  // namespace xf::trainer
