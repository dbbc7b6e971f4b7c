// The whole Transformer: finite-difference gradients in double precision for every parameter of
// tiny models (post- and pre-norm, shared or separate embeddings, output bias, dropout on, the
// self-attention or SSRU decoder), the float model against the double one, padding,
// determinism, and overfitting a few sentences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gradient_check.h"
#include "tiny_model.h"
#include "xf/error.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/trainer/translate.h"
#include "xf/translator.h"

namespace xf::trainer {
namespace {

// tests/common's tiny config with two layers a side, so that gradients cross a layer boundary.
ModelConfig tiny_config(uint32_t vocab = 13) {
  ModelConfig c = test::tiny_config(vocab);
  c.d_ff = 12;
  c.encoder_layers = c.decoder_layers = 2;
  c.max_positions = 64;
  return c;
}

// Three sentence pairs of different lengths (ids 4.. are ordinary tokens).
Batch tiny_batch(const ModelConfig& c) {
  return make_batch(c, {{4, 5, 6, 7}, {8, 9}, {10, 11, 12, 4, 5}},
                    {{6, 5, 4}, {9, 8, 7, 12}, {12}});
}

struct GradientCase {
  const char* name;
  NormPosition norm;
  bool shared;       // shared embeddings and tied output
  bool output_bias;
  float attention_dropout;
  DecoderLayerKind decoder = DecoderLayerKind::self_attention;
};

class ModelGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(ModelGradient, EveryParameterMatchesFiniteDifferences) {
  const GradientCase g = GetParam();
  ModelConfig config = tiny_config();
  config.norm_position = g.norm;
  config.shared_embeddings = g.shared;
  config.tied_output = g.shared;
  config.output_bias = g.output_bias;
  config.decoder_layer_kind = g.decoder;
  TrainingOptions options;  // dropout 0.1, label smoothing 0.1
  options.attention_dropout = g.attention_dropout;
  BasicTransformerModel<double> model(config, options, 1);
  model.initialize(7);
  // Gamma and bias away from their initial 1 / 0 so every term of the backward pass matters.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> jitter(-0.2, 0.2);
  for (size_t i = 0; i < model.parameter_count(); ++i) model.parameters()[i] += jitter(rng);
  const Batch batch = tiny_batch(config);
  const uint64_t dropout_seed = 99;  // the same masks in every pass

  model.zero_gradients();
  model.forward_backward(batch, dropout_seed);
  const std::vector<double> analytic(model.gradients(),
                                     model.gradients() + model.parameter_count());
  auto loss = [&] { return model.forward_backward(batch, dropout_seed).loss_sum; };
  for (const ParameterSlot& slot : model.slots()) {
    testing::expect_gradient(loss, model.parameters() + slot.offset, slot.size,
                             analytic.data() + slot.offset, slot.spec.name, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ModelGradient,
    ::testing::Values(GradientCase{"post_norm_shared", NormPosition::post, true, false, 0.0f},
                      GradientCase{"pre_norm_shared", NormPosition::pre, true, false, 0.0f},
                      GradientCase{"post_norm_separate_bias", NormPosition::post, false, true,
                                   0.0f},
                      GradientCase{"pre_norm_attention_dropout", NormPosition::pre, false, true,
                                   0.2f},
                      GradientCase{"ssru_post_norm_shared", NormPosition::post, true, false, 0.0f,
                                   DecoderLayerKind::ssru},
                      GradientCase{"ssru_pre_norm_separate_bias", NormPosition::pre, false, true, 0.2f,
                                   DecoderLayerKind::ssru}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

TEST(Model, FloatAgreesWithDouble) {
  for (const auto& [norm, decoder] : {std::pair{NormPosition::post, DecoderLayerKind::self_attention},
                                      std::pair{NormPosition::pre, DecoderLayerKind::self_attention},
                                      std::pair{NormPosition::post, DecoderLayerKind::ssru},
                                      std::pair{NormPosition::pre, DecoderLayerKind::ssru}}) {
    SCOPED_TRACE(decoder == DecoderLayerKind::ssru ? "ssru" : "self-attention");
    ModelConfig config = tiny_config(30);
    config.decoder_layer_kind = decoder;
    config.d_model = 32;
    config.num_heads = 4;
    config.d_ff = 64;
    config.norm_position = norm;
    const TrainingOptions options;
    BasicTransformerModel<double> reference(config, options, 2);
    TransformerModel model(config, options, 2);
    reference.initialize(3);
    for (size_t i = 0; i < model.parameter_count(); ++i)
      model.parameters()[i] = static_cast<float>(reference.parameters()[i]);
    const Batch batch = make_batch(config, {{4, 5, 6, 7, 8, 9}, {20, 21}, {29, 28, 27}},
                                   {{6, 5, 4, 11}, {9, 8, 7, 12, 13, 14}, {12}});
    reference.zero_gradients();
    model.zero_gradients();
    const LossSums expected = reference.forward_backward(batch, 5);
    const LossSums actual = model.forward_backward(batch, 5);
    EXPECT_EQ(actual.token_count, expected.token_count);
    EXPECT_NEAR(actual.loss_sum, expected.loss_sum, 1e-5 * std::abs(expected.loss_sum));
    EXPECT_NEAR(actual.nll_sum, expected.nll_sum, 1e-5 * std::abs(expected.nll_sum));
    double max_gradient = 0;
    for (size_t i = 0; i < model.parameter_count(); ++i)
      max_gradient = std::max(max_gradient, std::abs(reference.gradients()[i]));
    int failures = 0;
    for (size_t i = 0; i < model.parameter_count(); ++i)
      if (std::abs(model.gradients()[i] - reference.gradients()[i]) > 1e-4 * max_gradient &&
          ++failures <= 5)
        ADD_FAILURE() << "gradient " << i << ": float " << model.gradients()[i] << ", double "
                      << reference.gradients()[i];
    EXPECT_EQ(failures, 0);
  }
}

class PaddingDoesNotLeak : public ::testing::TestWithParam<DecoderLayerKind> {};

TEST_P(PaddingDoesNotLeak, ABatchScoresEachSentenceAsAlone) {
  // Without dropout, a padded batch scores each sentence as if it were alone, and its
  // gradient is the sum of the sentences' gradients (an SSRU's padded steps come after a
  // sentence's own, so its recurrence never reads them).
  ModelConfig config = tiny_config();
  config.decoder_layer_kind = GetParam();
  TrainingOptions options;
  options.dropout = 0;
  BasicTransformerModel<double> model(config, options, 1);
  model.initialize(5);
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 6, 7, 8}, {9}};
  const std::vector<std::vector<int32_t>> targets = {{10}, {11, 12, 4, 5}};
  model.zero_gradients();
  const LossSums together = model.forward_backward(make_batch(config, sources, targets), 1);
  const std::vector<double> batch_gradient(model.gradients(),
                                           model.gradients() + model.parameter_count());
  model.zero_gradients();
  LossSums alone_sum;
  for (size_t i = 0; i < sources.size(); ++i) {
    const LossSums alone = model.forward_backward(make_batch(config, {sources[i]}, {targets[i]}), 1);
    alone_sum.loss_sum += alone.loss_sum;
    alone_sum.token_count += alone.token_count;
  }
  EXPECT_EQ(together.token_count, 7);  // (1 + EOS) + (4 + EOS)
  EXPECT_EQ(alone_sum.token_count, 7);
  EXPECT_NEAR(together.loss_sum, alone_sum.loss_sum, 1e-10);
  for (size_t i = 0; i < model.parameter_count(); ++i)
    ASSERT_NEAR(batch_gradient[i], model.gradients()[i], 1e-10) << "parameter element " << i;
  // evaluate() is the same forward pass without dropout (dropout is off here).
  EXPECT_NEAR(model.evaluate(make_batch(config, sources, targets)).loss_sum, together.loss_sum,
              1e-10);
}

INSTANTIATE_TEST_SUITE_P(Decoders, PaddingDoesNotLeak,
                         ::testing::Values(DecoderLayerKind::self_attention, DecoderLayerKind::ssru),
                         [](const auto& info) { return info.param == DecoderLayerKind::ssru ? "ssru" : "self_attention"; });

TEST(Model, LayoutFollowsTheParameterList) {
  const ModelConfig config = tiny_config();
  TransformerModel model(config, TrainingOptions{}, 1);
  const auto specs = transformer_parameters(config);
  ASSERT_EQ(model.slots().size(), specs.size());
  size_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(model.slots()[i].spec.name, specs[i].name);
    EXPECT_EQ(model.slots()[i].offset, offset);
    offset += model.slots()[i].size;
  }
  EXPECT_EQ(model.parameter_count(), offset);
  EXPECT_THROW(model.slot("no.such.tensor"), Error);
  model.initialize(1);
  const float* gamma = model.parameters() + model.slot(param::encoder_layer(0) + schema::kFfnNorm.name + schema::kGamma).offset;
  const float* bias = model.parameters() + model.slot(param::decoder_layer(1) + schema::kFfnInner.name + schema::kBias).offset;
  for (int j = 0; j < 8; ++j) EXPECT_EQ(gamma[j], 1.0f);
  for (int j = 0; j < 12; ++j) EXPECT_EQ(bias[j], 0.0f);
  const ParameterSlot& qkv = model.slot(param::encoder_layer(0) + schema::kSelfAttentionQkv.name + schema::kWeight);
  const double limit = std::sqrt(6.0 / (24 + 8));
  double max_abs = 0;
  for (size_t i = 0; i < qkv.size; ++i)
    max_abs = std::max(max_abs, double(std::abs(model.parameters()[qkv.offset + i])));
  EXPECT_LE(max_abs, limit);
  EXPECT_GT(max_abs, 0.5 * limit);
}

TEST(Model, RejectsBadBatches) {
  const ModelConfig config = tiny_config();
  TransformerModel model(config, TrainingOptions{}, 1);
  Batch batch = tiny_batch(config);
  batch.source_ids[0] = 13;  // outside the vocabulary
  EXPECT_THROW(model.forward_backward(batch, 1), Error);
  batch = tiny_batch(config);
  batch.target_lengths[1] = 0;
  EXPECT_THROW(model.evaluate(batch), Error);
  TrainingOptions bad;
  bad.dropout = 1.0f;
  EXPECT_THROW(TransformerModel(config, bad, 1), Error);
}

std::vector<double> train_losses(int steps, int threads) {
  ModelConfig config = tiny_config(20);
  config.d_model = 16;
  config.num_heads = 2;
  config.d_ff = 32;
  TransformerModel model(config, TrainingOptions{}, threads);
  model.initialize(123);
  Adam adam(model.parameter_count(), AdamOptions{}, threads);
  const Batch batch = make_batch(config, {{4, 5, 6}, {7, 8, 9, 10}}, {{6, 5, 4}, {10, 9, 8, 7}});
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    model.zero_gradients();
    const LossSums sums = model.forward_backward(batch, 1000 + step);
    losses.push_back(sums.loss_sum);
    adam.step(model.parameters(), model.gradients(), 1e-3, 1.0 / sums.token_count);
  }
  return losses;
}

TEST(Model, SameSeedSameLosses) {
  const auto first = train_losses(4, 2);
  const auto second = train_losses(4, 2);
  EXPECT_EQ(first, second);  // bit for bit
  EXPECT_NE(first[0], first[3]);  // and training does move
}

class OverfitsAFewSentences : public ::testing::TestWithParam<DecoderLayerKind> {};

TEST_P(OverfitsAFewSentences, AndTheRuntimeDecodesTheTrainedParameters) {
  // Reverse six short sequences. No dropout or smoothing, so the loss can approach zero and
  // greedy decoding by the runtime must then reproduce every target: for an SSRU decoder, the
  // runtime's step (issue 38) reads what the trainer's whole-sequence scan trained.
  ModelConfig config = tiny_config(16);
  config.decoder_layer_kind = GetParam();
  config.d_model = 32;
  config.num_heads = 4;
  config.d_ff = 64;
  TrainingOptions options;
  options.dropout = 0;
  options.label_smoothing = 0;
  TransformerModel model(config, options, 1);
  model.initialize(2024);
  Adam adam(model.parameter_count(), AdamOptions{}, 1);
  const std::vector<std::vector<int32_t>> sources = {
      {4, 5, 6}, {7, 8, 9, 10}, {11, 12}, {13, 14, 15, 4, 5}, {6, 9, 12}, {15, 11, 7, 8}};
  std::vector<std::vector<int32_t>> targets;
  for (const auto& s : sources) targets.emplace_back(s.rbegin(), s.rend());
  const Batch batch = make_batch(config, sources, targets);
  double first = 0, last = 0;
  for (int step = 1; step <= 300; ++step) {
    model.zero_gradients();
    const LossSums sums = model.forward_backward(batch, step);
    if (step == 1) first = sums.loss_sum / sums.token_count;
    last = sums.loss_sum / sums.token_count;
    adam.step(model.parameters(), model.gradients(), 3e-3, 1.0 / sums.token_count);
  }
  EXPECT_GT(first, 2.0);  // about log(16) at the start
  EXPECT_LT(last, 0.05 * first);
  // The runtime's greedy search over these parameters (what validation and xf-run use).
  EXPECT_EQ(translate_greedy(config, model.parameters(), model.parameter_count(), sources, 1),
            targets);
}

// The runtime's forced scoring (Translator::score_ids, step by step: an SSRU decoder's state
// carried from step to step) gives the trainer's negative log-likelihood (its decoder over the
// whole target at once: the scan) for the same parameters.
class RuntimeScoresWhatTheTrainerScores : public ::testing::TestWithParam<DecoderLayerKind> {};

TEST_P(RuntimeScoresWhatTheTrainerScores, SentenceBySentence) {
  ModelConfig config = tiny_config(30);
  config.d_model = 32;
  config.num_heads = 4;
  config.d_ff = 64;
  config.decoder_layer_kind = GetParam();
  TrainingOptions options;
  options.dropout = 0;
  options.label_smoothing = 0;
  TransformerModel model(config, options, 1);
  model.initialize(17);
  std::mt19937_64 rng(5);  // biases and gains away from 0 and 1: every term counts
  std::uniform_real_distribution<float> jitter(-0.3f, 0.3f);
  for (size_t i = 0; i < model.parameter_count(); ++i) model.parameters()[i] += jitter(rng);
  const std::vector<std::vector<int32_t>> sources = {{4, 5, 6, 7, 8, 9}, {20, 21}, {29, 28, 27}};
  const std::vector<std::vector<int32_t>> targets = {{6, 5, 4, 11, 12, 13, 14}, {9, 8}, {12, 20, 21, 22, 23}};
  const std::vector<uint8_t> bytes =
      writer_of_parameters(config, model.parameters(), model.parameter_count(), DType::f32).serialize();
  auto runtime_model = Model::from_file(ModelFile::copy_from_memory(bytes.data(), bytes.size(), "trained"));
  TranslatorOptions plan;
  plan.max_beam = 1;
  plan.max_source_len = 16;
  Translator translator(runtime_model, plan);
  std::vector<ScoringResult> scored;
  translator.score_ids(sources, targets, TranslateOptions{}, scored);
  for (size_t i = 0; i < sources.size(); ++i) {
    const LossSums trainer = model.evaluate(make_batch(config, {sources[i]}, {targets[i]}));
    double runtime_nll = 0;
    for (float log_prob : scored[i].log_probs) runtime_nll -= log_prob;
    EXPECT_EQ(scored[i].log_probs.size(), targets[i].size() + 1);  // EOS scored last
    EXPECT_NEAR(runtime_nll, trainer.nll_sum, 1e-4 * trainer.nll_sum) << "sentence " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, RuntimeScoresWhatTheTrainerScores,
                         ::testing::Values(DecoderLayerKind::self_attention, DecoderLayerKind::ssru),
                         [](const auto& info) { return info.param == DecoderLayerKind::ssru ? "ssru" : "self_attention"; });

INSTANTIATE_TEST_SUITE_P(Decoders, OverfitsAFewSentences,
                         ::testing::Values(DecoderLayerKind::self_attention, DecoderLayerKind::ssru),
                         [](const auto& info) { return info.param == DecoderLayerKind::ssru ? "ssru" : "self_attention"; });

}  // namespace
}  // namespace xf::trainer
