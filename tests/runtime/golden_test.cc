// The runtime against the independent PyTorch reference (tests/reference/, float64): encoder
// output, decoder logits through the incremental decoder (one step at a time, K/V cache), and
// greedy, beam-4 n-best and length-limited beam outputs, for every committed case.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend_probe.h"
#include "golden.h"
#include "memory_plan.h"
#include "search_support.h"
#include "tiny_model.h"
#include "xf/translator.h"

namespace xf {
namespace {

using golden::golden_at;

// f32 computation through a few layers against float64: relative to the tensor's scale.
constexpr double kTolerance = 5e-6;

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    file_ = golden::load_golden(golden::golden_path(GetParam()));
    static const std::string dir = test::make_temp_dir("golden");
    const std::string path = dir + "/" + GetParam() + ".xfm";
    golden::write_golden_model(file_, path);
    model_ = Model::open(path);
    sources_ = golden::golden_rows(file_, "source.ids", "source.lengths");
    for (auto& s : sources_) s.pop_back();  // the runtime appends EOS itself
  }

  const golden::GoldenTensor& at(const std::string& name) const { return golden_at(file_, name); }

  // Compares the n-best lists of a run with the golden tensors under `prefix`.
  void expect_nbest(const std::vector<TokenTranslation>& results, const std::string& ids,
                    const std::string& lengths, const std::string& scores, size_t n_best) {
    const auto expected = golden::golden_rows(file_, ids, lengths);
    const auto& expected_scores = at(scores);
    ASSERT_EQ(results.size() * n_best, expected.size());
    for (size_t i = 0; i < results.size(); ++i) {
      ASSERT_EQ(results[i].hypotheses.size(), n_best);
      for (size_t k = 0; k < n_best; ++k) {
        const TokenHypothesis& h = results[i].hypotheses[k];
        EXPECT_EQ(h.ids, expected[i * n_best + k]) << ids << " sentence " << i << " rank " << k;
        const double want = expected_scores.values[i * n_best + k];
        EXPECT_NEAR(h.score, want, kTolerance * std::max(1.0, std::abs(want))) << scores << " " << i << " " << k;
      }
    }
  }

  golden::GoldenFile file_;
  std::shared_ptr<const Model> model_;
  std::vector<std::vector<int32_t>> sources_;
};

TEST_P(Golden, EncoderOutputAndIncrementalDecoderLogits) {
  const ModelConfig& config = model_->config();
  const auto& source = at("source.ids");
  const auto& encoder = at("encoder.output");
  const int64_t batch = source.shape[0], source_len = source.shape[1], d = config.d_model;
  TranslatorOptions options = test::plan_options(static_cast<int>(batch), 1);
  options.max_source_len = static_cast<int>(source_len);
  const auto plan = runtime::make_memory_plan(config, options);
  auto backend = runtime::make_cpu_backend(*model_, plan, 1);

  const std::vector<int32_t> ids = source.to_i32();
  const std::vector<int32_t> lengths = at("source.lengths").to_i32();
  backend->encode(ids.data(), lengths.data(), batch, source_len);
  std::vector<float> memory(batch * source_len * d);
  runtime::probe(*backend).copy_encoder_output(memory.data());
  double scale = 0.0, worst = 0.0;
  for (double v : encoder.values) scale = std::max(scale, std::abs(v));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < lengths[b]; ++s)
      for (int64_t j = 0; j < d; ++j) {
        const size_t at_index = (b * source_len + s) * d + j;
        worst = std::max(worst, std::abs(memory[at_index] - encoder.values[at_index]));
      }
  EXPECT_LE(worst, kTolerance * scale) << "encoder output, largest difference";

  // Teacher forcing one step at a time: step t feeds target_in[:, t] and must give the
  // reference's logits for that position, computed over the whole prefix at once.
  const auto& target_in = at("target_in.ids");
  const auto& logits = at("decoder.logits");
  const std::vector<int32_t> target_lengths = at("target.lengths").to_i32();
  const int64_t target_len = target_in.shape[1], vocab = config.target_vocab_size;
  double logit_scale = 0.0;
  for (double v : logits.values) logit_scale = std::max(logit_scale, std::abs(v));
  std::vector<float> step_logits(batch * vocab);
  std::vector<int32_t> tokens(batch);
  double worst_logit = 0.0;
  for (int64_t t = 0; t < target_len; ++t) {
    for (int64_t b = 0; b < batch; ++b) tokens[b] = static_cast<int32_t>(target_in.values[b * target_len + t]);
    backend->decode_step(tokens.data(), 1, t);
    runtime::probe(*backend).copy_logits(step_logits.data());
    for (int64_t b = 0; b < batch; ++b) {
      if (t >= target_lengths[b]) continue;
      for (int64_t v = 0; v < vocab; ++v)
        worst_logit = std::max(worst_logit, std::abs(step_logits[b * vocab + v] -
                                                     logits.values[(b * target_len + t) * vocab + v]));
    }
  }
  EXPECT_LE(worst_logit, kTolerance * logit_scale) << "decoder logits, largest difference";
}

TEST_P(Golden, GreedyAndBeamOutputs) {
  // A whole batch at once, and batches of two (padding, sorting, results in input order).
  for (int max_batch : {3, 2}) {
    SCOPED_TRACE("max_batch " + std::to_string(max_batch));
    TranslatorOptions options = test::plan_options(max_batch, 4);
    options.max_source_len = 64;
    Translator translator(model_, options);
    std::vector<TokenTranslation> results;

    TranslateOptions greedy;
    greedy.beam = 1;
    translator.translate_ids(sources_, greedy, results);
    expect_nbest(results, "greedy.ids", "greedy.lengths", "greedy.scores", 1);

    TranslateOptions beam;
    beam.beam = static_cast<int>(at("beam4.beam_size").integer(0));
    beam.n_best = 2;
    translator.translate_ids(sources_, beam, results);
    expect_nbest(results, "beam4.nbest.ids", "beam4.nbest.lengths", "beam4.nbest.scores", 2);

    TranslateOptions short_beam = beam;
    short_beam.max_len_a = 0.0f;
    short_beam.max_len_b = static_cast<int>(at("beam4_max3.max_length").integer(0));
    translator.translate_ids(sources_, short_beam, results);
    expect_nbest(results, "beam4_max3.nbest.ids", "beam4_max3.nbest.lengths", "beam4_max3.nbest.scores", 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Golden, ::testing::ValuesIn(golden::golden_case_names()));

}  // namespace
}  // namespace xf
