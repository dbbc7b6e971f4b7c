// SSRU decoder layers (Marian's transformer-decoder-autoreg: rnn, dec-cell: ssru) through the
// runtime's one model graph: the decoder's logits step after step against a double-precision
// reference written here from the definition (format/README.md), with compacted steps (rows
// whose sentence is done are not computed) and the beam's reorder of the cell states; then the
// beam search's hypotheses against teacher-forced scores of their own tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend.h"
#include "backend_probe.h"
#include "memory_plan.h"
#include "search_support.h"
#include "tiny_model.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/format/schema.h"
#include "xf/translator.h"

namespace xf {
namespace {

using Vector = std::vector<double>;

// The decoder of an SSRU model in double, from the file's f32 weights and the runtime's encoder
// output (the encoder is tested against its own reference elsewhere).
class SsruReference {
 public:
  SsruReference(const ModelFile& file, std::vector<float> memory, std::vector<int32_t> lengths, int64_t source_len,
                int64_t rows_per_sentence)
      : file_(file), c_(file.config()), d_(c_.d_model), memory_(std::move(memory)), lengths_(std::move(lengths)),
        source_len_(source_len), beam_(rows_per_sentence) {
    cells_.assign(lengths_.size() * beam_, std::vector<Vector>(c_.decoder_layers, Vector(d_, 0.0)));
  }

  // The logits of `rows` (row r of sentence r / beam) at `step` for their tokens; advances their
  // cell states.
  std::vector<Vector> step(const std::vector<int32_t>& tokens, const std::vector<int64_t>& rows, int64_t step) {
    std::vector<Vector> logits;
    for (size_t i = 0; i < rows.size(); ++i) logits.push_back(row_step(tokens[i], rows[i], step));
    return logits;
  }
  // Row r's states become its parent's (the beam's reorder).
  void reorder(const std::vector<int32_t>& parents) {
    const auto before = cells_;
    for (size_t r = 0; r < parents.size(); ++r) cells_[r] = before[parents[r]];
  }

 private:
  Vector tensor(const std::string& name) const {
    const TensorView& t = file_.tensor(name);
    const float* values = static_cast<const float*>(t.data);
    return Vector(values, values + t.elements());
  }
  Vector linear(const std::string& prefix, const Vector& x) const {
    const Vector w = tensor(prefix + schema::kWeight), b = tensor(prefix + schema::kBias);
    const size_t out = b.size(), in = x.size();
    Vector y(out);
    for (size_t o = 0; o < out; ++o) {
      double sum = b[o];
      for (size_t i = 0; i < in; ++i) sum += w[o * in + i] * x[i];
      y[o] = sum;
    }
    return y;
  }
  Vector norm(const std::string& prefix, const Vector& x) const {
    const Vector g = tensor(prefix + schema::kGamma), b = tensor(prefix + schema::kBeta);
    double mean = 0.0, var = 0.0;
    for (double v : x) mean += v;
    mean /= x.size();
    for (double v : x) var += (v - mean) * (v - mean);
    var /= x.size();
    Vector y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + c_.layer_norm_epsilon) * g[i] + b[i];
    return y;
  }
  // x = LayerNorm(x + f(x)) (post-norm) or x + f(LayerNorm(x)) (pre-norm).
  template <typename F>
  Vector sublayer(const Vector& x, const std::string& norm_prefix, F f) const {
    const bool pre = c_.norm_position == NormPosition::pre;
    Vector out = f(pre ? norm(norm_prefix, x) : x);
    for (size_t i = 0; i < x.size(); ++i) out[i] += x[i];
    return pre ? out : norm(norm_prefix, out);
  }

  Vector row_step(int32_t token, int64_t row, int64_t step) {
    const Vector table = tensor(param::target_embedding(c_));
    Vector x(d_);
    for (int64_t j = 0; j < d_; ++j) {  // the paper's interleaved sinusoid
      const int64_t pair = j / 2;
      const double angle = step * std::pow(10000.0, -2.0 * pair / d_);
      x[j] = table[token * d_ + j] * std::sqrt(static_cast<double>(d_)) + (j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
    const int64_t sentence = row / beam_;
    for (uint32_t l = 0; l < c_.decoder_layers; ++l) {
      const std::string p = param::decoder_layer(l);
      Vector& cell = cells_[row][l];
      x = sublayer(x, p + schema::kSsruNorm.name, [&](const Vector& u) {
        const Vector z = linear(p + schema::kSsruInputForget.name, u);
        Vector h(d_);
        for (int64_t j = 0; j < d_; ++j) {
          const double s = 1.0 / (1.0 + std::exp(-z[d_ + j]));
          cell[j] = s * cell[j] + (1.0 - s) * z[j];
          h[j] = std::max(0.0, cell[j]);
        }
        return h;
      });
      x = sublayer(x, p + schema::kCrossAttentionNorm.name, [&](const Vector& u) {
        const Vector q = linear(p + schema::kCrossAttentionQuery.name, u);
        const int64_t heads = c_.num_heads, hd = d_ / heads, len = lengths_[sentence];
        std::vector<Vector> kv;
        for (int64_t t = 0; t < len; ++t) {
          const float* m = memory_.data() + (sentence * source_len_ + t) * d_;
          kv.push_back(linear(p + schema::kCrossAttentionKeyValue.name, Vector(m, m + d_)));
        }
        Vector context(d_, 0.0);
        for (int64_t h = 0; h < heads; ++h) {
          Vector score(len);
          double top = -1e300, total = 0.0;
          for (int64_t t = 0; t < len; ++t) {
            double dot = 0.0;
            for (int64_t j = 0; j < hd; ++j) dot += q[h * hd + j] * kv[t][h * hd + j];
            score[t] = dot / std::sqrt(static_cast<double>(hd));
            top = std::max(top, score[t]);
          }
          for (double& s : score) total += (s = std::exp(s - top));
          for (int64_t t = 0; t < len; ++t)
            for (int64_t j = 0; j < hd; ++j) context[h * hd + j] += score[t] / total * kv[t][d_ + h * hd + j];
        }
        return linear(p + schema::kCrossAttentionOutput.name, context);
      });
      x = sublayer(x, p + schema::kFfnNorm.name, [&](const Vector& u) {
        Vector hidden = linear(p + schema::kFfnInner.name, u);
        for (double& v : hidden) v = std::max(0.0, v);
        return linear(p + schema::kFfnOuter.name, hidden);
      });
    }
    if (c_.norm_position == NormPosition::pre) x = norm(schema::kDecoderFinalNorm.name, x);
    const Vector w = tensor(param::output_projection(c_));
    const Vector bias = c_.output_bias ? tensor(schema::kOutputBias) : Vector(c_.target_vocab_size, 0.0);
    Vector logits(c_.target_vocab_size);
    for (size_t v = 0; v < logits.size(); ++v) {
      double sum = bias[v];
      for (int64_t j = 0; j < d_; ++j) sum += w[v * d_ + j] * x[j];
      logits[v] = sum;
    }
    return logits;
  }

  const ModelFile& file_;
  ModelConfig c_;
  int64_t d_;
  std::vector<float> memory_;
  std::vector<int32_t> lengths_;
  int64_t source_len_, beam_;
  std::vector<std::vector<Vector>> cells_;  // [row][layer] the cell state
};

void expect_logits(const std::vector<float>& got, const std::vector<Vector>& expected, const std::string& what) {
  double scale = 1.0;
  for (const Vector& row : expected)
    for (double v : row) scale = std::max(scale, std::abs(v));
  ASSERT_EQ(got.size(), expected.size() * expected[0].size()) << what;
  double worst = 0.0;
  for (size_t r = 0; r < expected.size(); ++r)
    for (size_t v = 0; v < expected[r].size(); ++v)
      worst = std::max(worst, std::abs(got[r * expected[r].size() + v] - expected[r][v]));
  EXPECT_LT(worst, 2e-5 * scale) << what << ": worst logit error " << worst << " (scale " << scale << ")";
}

std::shared_ptr<const Model> ssru_model(NormPosition norm, uint32_t seed, DType dtype = DType::f32) {
  test::TinyModelOptions options = test::TinyModelOptions::without_tokenizer(seed);
  options.decoder_layer_kind = DecoderLayerKind::ssru;
  options.norm_position = norm;
  options.matrix_dtype = dtype;
  const std::string name = std::string("ssru_") + (norm == NormPosition::pre ? "pre_" : "post_") +
                           std::to_string(seed) + "_" + dtype_name(dtype);
  return Model::open(test::tiny_model_file(options, name));
}

class SsruDecoder : public ::testing::TestWithParam<NormPosition> {};

TEST_P(SsruDecoder, StepsMatchADoubleReferenceWithCompactedStepsAndTheBeamReorder) {
  auto model = ssru_model(GetParam(), 7);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.decoder_layer_kind, DecoderLayerKind::ssru);
  const int64_t beam = 2, sentences = 2, source_len = 6, rows = sentences * beam;
  TranslatorOptions options = test::plan_options(static_cast<int>(sentences), static_cast<int>(beam));
  options.max_source_len = static_cast<int>(source_len);
  const auto plan = runtime::make_memory_plan(c, options);
  auto backend = runtime::make_cpu_backend(*model, plan, 2);

  std::mt19937 rng(11);
  auto random_token = [&] { return static_cast<int32_t>(4 + rng() % (c.target_vocab_size - 4)); };
  const std::vector<int32_t> lengths = {6, 4};
  std::vector<int32_t> source(sentences * source_len, c.pad_id);
  for (int64_t s = 0; s < sentences; ++s) {
    for (int32_t t = 0; t + 1 < lengths[s]; ++t) source[s * source_len + t] = random_token();
    source[s * source_len + lengths[s] - 1] = c.eos_id;
  }
  backend->encode(source.data(), lengths.data(), sentences, source_len);
  std::vector<float> memory(sentences * source_len * c.d_model);
  runtime::probe(*backend).copy_encoder_output(memory.data());
  SsruReference reference(model->file(), memory, lengths, source_len, beam);

  std::vector<float> logits;
  auto run_step = [&](int64_t step, const std::vector<int32_t>& live, const std::string& what) {
    std::vector<int32_t> tokens(rows);
    for (int32_t& t : tokens) t = step == 0 ? c.bos_id : random_token();
    std::vector<int64_t> computed;  // the rows live says are computed, in order
    std::vector<int32_t> computed_tokens;
    for (int64_t s = 0; s < sentences; ++s)
      for (int64_t j = 0; j < (live.empty() ? beam : live[s]); ++j) {
        computed.push_back(s * beam + j);
        computed_tokens.push_back(tokens[s * beam + j]);
      }
    backend->decode_step(tokens.data(), beam, step, live.empty() ? nullptr : live.data());
    logits.assign(computed.size() * c.target_vocab_size, 0.0f);
    runtime::probe(*backend).copy_logits(logits.data());
    expect_logits(logits, reference.step(computed_tokens, computed, step), what);
  };
  run_step(0, {}, "step 0");
  run_step(1, {}, "step 1");
  // The beam keeps row 1's hypothesis twice in sentence 0 and swaps sentence 1's.
  const std::vector<int32_t> parents = {1, 1, 3, 2};
  backend->reorder_cache(parents.data(), 1);
  reference.reorder(parents);
  run_step(2, {}, "step 2, after the reorder");
  // Sentence 0 has no live row, sentence 1 one: only row 2 is computed, as computed row 0, its
  // state at row 2; then rows 0, 2, 3 as computed rows 0, 1, 2 (row 1's state not advanced).
  run_step(3, {0, 1}, "step 3, compacted");
  run_step(4, {1, 2}, "step 4, compacted");
  run_step(5, {}, "step 5");
}

INSTANTIATE_TEST_SUITE_P(Runtime, SsruDecoder, ::testing::Values(NormPosition::post, NormPosition::pre),
                         [](const ::testing::TestParamInfo<NormPosition>& info) {
                           return info.param == NormPosition::pre ? "pre_norm" : "post_norm";
                         });

// Every hypothesis the beam returns scores, token by token, what teacher forcing of its own
// tokens gives: a beam that reordered the cell states wrongly would have extended each
// hypothesis from another one's state. Batched and alone alike (finished sentences are dropped
// from a batch, their states moved).
TEST(SsruSearch, BeamHypothesesScoreAsTheirOwnTokensDo) {
  for (const DType dtype : {DType::f32, DType::int8}) {
    SCOPED_TRACE(dtype_name(dtype));
    auto model = ssru_model(NormPosition::post, 3, dtype);
    TranslatorOptions topts = test::plan_options(6, 4);
    topts.max_source_len = 16;
    Translator translator(model, topts);
    const auto sources = test::random_source_ids(6, model->config().source_vocab_size, 5, 12);
    // Without the loop guard, whose cut hypotheses keep the log-probability of all they decoded.
    TranslateOptions beam4 = test::beam_options(4, 4);
    beam4.disable_loop_guard = true;
    std::vector<TokenTranslation> beam, alone;
    translator.translate_ids(sources, beam4, beam);
    std::vector<std::vector<int32_t>> targets, repeated_sources;
    for (size_t i = 0; i < sources.size(); ++i) {
      ASSERT_EQ(beam[i].hypotheses.size(), 4u);
      for (const TokenHypothesis& h : beam[i].hypotheses) {
        targets.push_back(h.ids);
        repeated_sources.push_back(sources[i]);
      }
      translator.translate_ids({sources[i]}, beam4, alone);
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(alone[0].hypotheses[k].ids, beam[i].hypotheses[k].ids) << i << " " << k;
    }
    std::vector<ScoringResult> scores;
    translator.score_ids(repeated_sources, targets, TranslateOptions{}, scores);
    size_t distinct_outputs = 0;
    for (size_t i = 0; i < sources.size(); ++i)
      for (size_t k = 0; k < 4; ++k) {
        const TokenHypothesis& h = beam[i].hypotheses[k];
        const ScoringResult& forced = scores[i * 4 + k];
        // With EOS, or without it for a hypothesis the length limit ended.
        const float with_eos = forced.log_prob(), without_eos = with_eos - forced.log_probs.back();
        const float allowed = 1e-3f * std::max(1.0f, std::abs(with_eos));
        EXPECT_TRUE(std::abs(h.log_prob - with_eos) < allowed || std::abs(h.log_prob - without_eos) < allowed)
            << "sentence " << i << " rank " << k << ": beam " << h.log_prob << ", forced " << with_eos << " ("
            << without_eos << " without EOS)";
        if (k == 0 && (i == 0 || h.ids != beam[i - 1].hypotheses[0].ids)) ++distinct_outputs;
      }
    EXPECT_GT(distinct_outputs, 1u) << "the model gives every sentence the same output";
    // Greedy in a batch gives what it gives alone (finished sentences dropped, states moved).
    std::vector<TokenTranslation> greedy, beam1;
    translator.translate_ids(sources, test::beam_options(1), greedy);
    TranslateOptions one = test::beam_options(1);
    for (size_t i = 0; i < sources.size(); ++i) {
      translator.translate_ids({sources[i]}, one, beam1);
      EXPECT_EQ(greedy[i].hypotheses[0].ids, beam1[0].hypotheses[0].ids) << i;
    }
  }
}

}  // namespace
}  // namespace xf
