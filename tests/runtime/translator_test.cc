// The Translator on tiny random models: greedy against a step-by-step argmax over the backend's
// logits, beam 1 against greedy, batches against one sentence at a time, the plan's limits, and
// the text path (empty lines, invalid UTF-8).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend_probe.h"
#include "memory_plan.h"
#include "search.h"
#include "search_support.h"
#include "tiny_model.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/matmul.h"
#include "xf/translator.h"

namespace xf {
namespace {

using test::TinyModelOptions;

std::shared_ptr<const Model> tiny_model(const TinyModelOptions& options, const std::string& name) {
  return Model::open(test::tiny_model_file(options, name));
}

std::shared_ptr<const Model> default_model() {
  static const auto model = tiny_model({}, "default");
  return model;
}

double log_softmax_at(const float* logits, int64_t vocab, int64_t index) {
  double max = logits[0];
  for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, logits[v]);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(logits[v] - max);
  return logits[index] - max - std::log(sum);
}

void expect_same_translations(const std::vector<TokenTranslation>& a,
                              const std::vector<TokenTranslation>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].hypotheses.size(), b[i].hypotheses.size()) << "sentence " << i;
    for (size_t k = 0; k < a[i].hypotheses.size(); ++k) {
      EXPECT_EQ(a[i].hypotheses[k].ids, b[i].hypotheses[k].ids) << "sentence " << i << " hypothesis " << k;
      EXPECT_NEAR(a[i].hypotheses[k].score, b[i].hypotheses[k].score,
                  1e-5 * std::max(1.0f, std::abs(a[i].hypotheses[k].score)));
    }
  }
}

// Greedy decoding redone here from the backend's raw logits: argmax in double precision, one
// sentence at a time; the Translator's greedy search (batched, through log_softmax_top_k) must
// produce the same ids and log-probabilities.
TEST(Translator, GreedyMatchesArgmaxOverBackendLogits) {
  auto model = default_model();
  const ModelConfig& config = model->config();
  TranslatorOptions topts = test::plan_options(5, 1);
  Translator translator(model, topts);
  const auto sources = test::random_source_ids(5, config.source_vocab_size, 11, 12);
  TranslateOptions options = test::beam_options(1);
  std::vector<TokenTranslation> results;
  translator.translate_ids(sources, options, results);

  TranslatorOptions single = topts;
  single.max_batch = 1;
  auto plan = runtime::make_memory_plan(config, single);
  auto backend = runtime::make_cpu_backend(*model, plan, 1);
  std::vector<float> logits(config.target_vocab_size);
  size_t ended_by_eos = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<int32_t> source = sources[i];
    source.push_back(config.eos_id);
    const int32_t length = static_cast<int32_t>(source.size());
    backend->encode(source.data(), &length, 1, length);
    const int64_t max_length = runtime::max_output_length(plan, options, length);
    std::vector<int32_t> expected;
    double log_prob = 0.0;
    int32_t token = config.bos_id;
    int64_t steps = 0;
    for (int64_t step = 0; step < max_length; ++step) {
      backend->decode_step(&token, 1, step);
      runtime::probe(*backend).copy_logits(logits.data());
      token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      log_prob += log_softmax_at(logits.data(), config.target_vocab_size, token);
      steps = step + 1;
      if (token == config.eos_id) break;
      expected.push_back(token);
    }
    ended_by_eos += token == config.eos_id;
    ASSERT_EQ(results[i].hypotheses.size(), 1u);
    const TokenHypothesis& h = results[i].hypotheses[0];
    EXPECT_EQ(h.ids, expected) << "sentence " << i;
    EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * std::max(1.0, std::abs(log_prob)));
    EXPECT_NEAR(h.score, log_prob / std::pow((5.0 + steps) / 6.0, 0.6), 1e-4 * std::max(1.0, std::abs(log_prob)));
  }
  EXPECT_GT(ended_by_eos, 0u) << "the tiny model should end some outputs with EOS";
}

// Beam search with a beam of one, run through the beam search code (not the greedy shortcut).
TEST(Translator, BeamOfOneEqualsGreedy) {
  auto model = default_model();
  const ModelConfig& config = model->config();
  TranslatorOptions topts = test::plan_options(6, 1);
  const auto plan = runtime::make_memory_plan(config, topts);
  auto backend = runtime::make_cpu_backend(*model, plan, 1);
  const auto sources = test::random_source_ids(6, config.source_vocab_size, 12, 15);
  const int64_t longest = test::longest_with_eos(sources);

  TranslateOptions options = test::beam_options(1);
  std::vector<TokenTranslation> greedy(sources.size()), beam(sources.size());
  std::vector<TokenTranslation*> greedy_out = test::pointers_to(greedy),
                                 beam_out = test::pointers_to(beam);
  runtime::Search search(plan, config);
  for (int pass = 0; pass < 2; ++pass) {
    test::stage_sources(search, config, sources, longest);
    search.use_greedy_for_beam_one = pass == 0;
    search.translate(*backend, sources.size(), longest, 1, options,
                     (pass == 0 ? greedy_out : beam_out).data());
  }
  expect_same_translations(greedy, beam);
}

// A step given each sentence's live rows computes those alone (the beam search passes its live
// hypotheses): their top-k candidates equal a full step's bit for bit, step after step through
// the beam reorders, whatever the dead rows hold; a sentence with no live row (ended) is left out.
TEST(Translator, StepOfTheLiveRowsEqualsTheFullStep) {
  auto model = default_model();
  const ModelConfig& config = model->config();
  const int64_t sentences = 3, beam = 3, rows = sentences * beam, k = beam;
  const auto plan = runtime::make_memory_plan(config, test::plan_options(sentences, beam));
  auto full = runtime::make_cpu_backend(*model, plan, 1);
  auto compact = runtime::make_cpu_backend(*model, plan, 2);
  const auto sources = test::random_source_ids(sentences, config.source_vocab_size, 29, 9);
  const int64_t source_len = test::longest_with_eos(sources);
  std::vector<int32_t> ids(sentences * source_len, config.pad_id), lengths(sentences);
  for (int64_t s = 0; s < sentences; ++s) {
    std::copy(sources[s].begin(), sources[s].end(), ids.begin() + s * source_len);
    ids[s * source_len + sources[s].size()] = config.eos_id;
    lengths[s] = static_cast<int32_t>(sources[s].size() + 1);
  }
  full->encode(ids.data(), lengths.data(), sentences, source_len);
  compact->encode(ids.data(), lengths.data(), sentences, source_len);

  std::mt19937 random(7);
  std::vector<int32_t> tokens(rows, config.bos_id), live(sentences), parents(rows);
  std::vector<float> offsets(rows), full_values(rows * k), values(rows * k);
  std::vector<int32_t> full_ids(rows * k), compact_ids(rows * k);
  const std::vector<std::vector<int32_t>> live_by_step = {{1, 1, 1}, {3, 2, 1}, {2, 0, 3}, {1, 0, 2}, {3, 0, 3}};
  for (int64_t step = 0; step < static_cast<int64_t>(live_by_step.size()); ++step) {
    live = live_by_step[step];
    for (float& offset : offsets) offset = std::uniform_real_distribution<float>(-3, 0)(random);
    full->decode_step(tokens.data(), beam, step);
    compact->decode_step(tokens.data(), beam, step, live.data());
    full->top_k(offsets.data(), k, full_values.data(), full_ids.data());
    compact->top_k(offsets.data(), k, values.data(), compact_ids.data());
    for (int64_t s = 0; s < sentences; ++s) {
      for (int64_t j = 0; j < live[s]; ++j) {
        const int64_t row = s * beam + j;
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(values[row * k + i], full_values[row * k + i]) << "step " << step << " row " << row;
          ASSERT_EQ(compact_ids[row * k + i], full_ids[row * k + i]) << "step " << step << " row " << row;
        }
      }
    }
    // The next step's rows continue from live rows of their own sentence; dead rows from
    // themselves (as the search leaves them).
    const std::vector<int32_t>& next_live = live_by_step[std::min<size_t>(step + 1, live_by_step.size() - 1)];
    for (int64_t s = 0; s < sentences; ++s) {
      for (int64_t j = 0; j < beam; ++j) {
        const int64_t row = s * beam + j;
        ASSERT_TRUE(next_live[s] == 0 || live[s] > 0) << "an ended sentence stays ended";
        const int32_t from_live = static_cast<int32_t>(s * beam + random() % std::max<int32_t>(live[s], 1));
        parents[row] = j < next_live[s] ? from_live : static_cast<int32_t>(row);
        tokens[row] = full_ids[parents[row] * k + random() % k];
      }
    }
    full->reorder_cache(parents.data(), step);
    compact->reorder_cache(parents.data(), step);
  }
}

// A batch's encoder runs its position-wise work on the real tokens alone (the padding of its
// shorter sentences left out, group by group) and writes the padded layout the decoder reads:
// each sentence's rows equal the sentence encoded alone, bit for bit with int8 weights (exact
// products), within rounding with f32. 40 sentences of up to 30 tokens: two encoder groups.
TEST(Translator, EncoderOfAPaddedBatchEqualsEachSentenceAlone) {
  for (DType dtype : {DType::int8, DType::f32}) {
    TinyModelOptions options;
    options.matrix_dtype = dtype;
    auto model = tiny_model(options, dtype == DType::int8 ? "encoder_int8" : "encoder_f32");
    const ModelConfig& config = model->config();
    const int64_t sentences = 40, d = config.d_model;
    const auto sources = test::random_source_ids(sentences, config.source_vocab_size, 5, 29);
    const int64_t source_len = test::longest_with_eos(sources);
    const auto plan = runtime::make_memory_plan(config, test::plan_options(sentences, 1));
    ASSERT_LT(plan.encoder_group_rows, sentences * source_len) << "one group only";
    auto batch = runtime::make_cpu_backend(*model, plan, 1);
    std::vector<int32_t> ids(sentences * source_len, config.pad_id), lengths(sentences);
    for (int64_t s = 0; s < sentences; ++s) {
      std::copy(sources[s].begin(), sources[s].end(), ids.begin() + s * source_len);
      ids[s * source_len + sources[s].size()] = config.eos_id;
      lengths[s] = static_cast<int32_t>(sources[s].size() + 1);
    }
    ASSERT_NE(*std::min_element(lengths.begin(), lengths.end()), source_len) << "no padding";
    batch->encode(ids.data(), lengths.data(), sentences, source_len);
    std::vector<float> memory(sentences * source_len * d);
    runtime::probe(*batch).copy_encoder_output(memory.data());

    const auto one_plan = runtime::make_memory_plan(config, test::plan_options(1, 1));
    auto one = runtime::make_cpu_backend(*model, one_plan, 1);
    for (int64_t s = 0; s < sentences; ++s) {
      one->encode(ids.data() + s * source_len, &lengths[s], 1, lengths[s]);
      std::vector<float> alone(lengths[s] * d);
      runtime::probe(*one).copy_encoder_output(alone.data());
      for (int64_t i = 0; i < lengths[s] * d; ++i) {
        const float in_batch = memory[s * source_len * d + i];
        if (dtype == DType::int8) {
          ASSERT_EQ(in_batch, alone[i]) << "sentence " << s << " value " << i;
        } else {
          ASSERT_NEAR(in_batch, alone[i], 1e-5f * std::max(1.0f, std::abs(alone[i])))
              << "sentence " << s << " value " << i;
        }
      }
    }
  }
}

// Sentences of different lengths, decoded in sorted, padded batches, give what each gives alone.
TEST(Translator, BatchEqualsOneByOne) {
  auto model = default_model();
  const auto sources = test::random_source_ids(11, model->config().source_vocab_size, 13, 20);
  for (int beam : {1, 3}) {
    TranslatorOptions topts;
    topts.max_batch = 4;
    topts.max_beam = 3;
    Translator translator(model, topts);
    TranslateOptions options = test::beam_options(beam, beam);
    std::vector<TokenTranslation> batched;
    translator.translate_ids(sources, options, batched);
    std::vector<TokenTranslation> alone(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      std::vector<TokenTranslation> one;
      translator.translate_ids({sources[i]}, options, one);
      alone[i] = one[0];
    }
    SCOPED_TRACE("beam " + std::to_string(beam));
    expect_same_translations(batched, alone);
  }
}

TEST(Translator, NBestIsSortedDistinctAndScoredWithTheLengthPenalty) {
  auto model = default_model();
  TranslatorOptions topts;
  topts.max_beam = 4;
  Translator translator(model, topts);
  TranslateOptions options;
  options.n_best = 4;
  options.length_penalty = 0.6f;
  std::vector<TokenTranslation> results;
  translator.translate_ids(test::random_source_ids(6, model->config().source_vocab_size, 14, 10), options, results);
  for (const auto& r : results) {
    ASSERT_EQ(r.hypotheses.size(), 4u);
    for (size_t k = 0; k < r.hypotheses.size(); ++k) {
      const auto& h = r.hypotheses[k];
      if (k > 0) {
        EXPECT_GE(r.hypotheses[k - 1].score, h.score);
      }
      for (size_t j = 0; j < k; ++j) EXPECT_NE(r.hypotheses[j].ids, h.ids) << "duplicate hypothesis";
      // Output of length n ended by EOS: n + 1 steps; one cut by the length limit: n steps.
      const double lp_eos = std::pow((5.0 + h.ids.size() + 1) / 6.0, 0.6);
      const double lp_cut = std::pow((5.0 + h.ids.size()) / 6.0, 0.6);
      const double expected_eos = h.log_prob / lp_eos, expected_cut = h.log_prob / lp_cut;
      EXPECT_TRUE(std::abs(h.score - expected_eos) < 1e-5 || std::abs(h.score - expected_cut) < 1e-5)
          << h.score << " vs " << expected_eos << " / " << expected_cut;
    }
  }
}

TEST(Translator, MaxLengthRuleCutsOutputs) {
  TinyModelOptions never_ends;
  never_ends.eos_bias = -50.0f;  // EOS never wins
  auto model = tiny_model(never_ends, "never_ends");
  TranslatorOptions topts;
  topts.max_beam = 2;
  topts.max_source_len = 20;
  topts.max_len_a = 1.0f;
  topts.max_len_b = 5;
  Translator translator(model, topts);
  EXPECT_EQ(translator.max_target_len(), 25);
  const auto sources = test::random_source_ids(4, model->config().source_vocab_size, 15, 12);
  for (int beam : {1, 2}) {
    TranslateOptions options = test::beam_options(beam);
    options.disable_loop_guard = true;  // outputs to the limit are the point
    options.max_len_a = 0.0f;
    options.max_len_b = 3;
    std::vector<TokenTranslation> results;
    translator.translate_ids(sources, options, results);
    for (const auto& r : results) EXPECT_EQ(r.hypotheses[0].ids.size(), 3u);
    // Default rule 1 * source + 50 is capped by the plan's 1 * 20 + 5.
    options.max_len_a = 1.0f;
    options.max_len_b = 50;
    translator.translate_ids(sources, options, results);
    for (size_t i = 0; i < sources.size(); ++i)
      EXPECT_EQ(results[i].hypotheses[0].ids.size(), std::min<size_t>(sources[i].size() + 1 + 50, 25));
  }
}

TEST(Translator, RequestsBeyondThePlanAreClearErrors) {
  auto model = default_model();
  TranslatorOptions topts;
  topts.max_source_len = 8;
  topts.max_beam = 2;
  Translator translator(model, topts);
  std::vector<TokenTranslation> results;
  auto message_of = [&](const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& o) {
    try {
      translator.translate_ids(sources, o, results);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::vector<int32_t> ok(7, 5), too_long(8, 5);
  EXPECT_NE(message_of({ok, too_long}, {}).find("sentence 2: 9 tokens with EOS, more than the translator's max_source_len 8"), std::string::npos)
      << message_of({ok, too_long}, {});
  TranslateOptions wide = test::beam_options(3);
  EXPECT_NE(message_of({ok}, wide).find("beam 3"), std::string::npos);
  TranslateOptions many;
  many.n_best = 3;
  EXPECT_NE(message_of({ok}, many).find("n_best 3"), std::string::npos);
  const std::vector<int32_t> bad_id{5, static_cast<int32_t>(model->config().source_vocab_size)};
  EXPECT_NE(message_of({bad_id}, {}).find("outside the source vocabulary"), std::string::npos);
  EXPECT_NE(message_of({{5, -1}}, {}).find("token id -1"), std::string::npos);
  // Still usable after errors.
  EXPECT_EQ(message_of({ok}, {}), "no error");

  auto options_error = [&](TranslatorOptions o) {
    try {
      Translator t(model, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TranslatorOptions o;
  o.max_source_len = 1000;  // > max_positions 256
  EXPECT_NE(options_error(o).find("max_positions"), std::string::npos);
  o = {};
  o.max_batch = 0;
  EXPECT_NE(options_error(o).find("max_batch"), std::string::npos);
  o = {};
  o.max_beam = 1000;
  EXPECT_NE(options_error(o).find("too wide"), std::string::npos);
  o = {};
  o.device = Device::cuda;
  o.max_beam = 17;  // beyond the CUDA top-k limit: the error names cuda whether a GPU is present or not
  EXPECT_NE(options_error(o).find("cuda"), std::string::npos);
}

TEST(Translator, TextPathEmptyLinesAndOrder) {
  auto model = default_model();
  TranslatorOptions topts = test::plan_options(3, 2);
  Translator translator(model, topts);
  std::vector<std::string> lines = test::sample_sentences(7, 99);
  lines.insert(lines.begin() + 2, "");
  lines.push_back("");
  const auto results = translator.translate(lines);
  ASSERT_EQ(results.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_EQ(results[i].hypotheses.size(), 1u);
    if (lines[i].empty()) {
      EXPECT_EQ(results[i].hypotheses[0].text, "");
      EXPECT_TRUE(results[i].hypotheses[0].ids.empty());
      continue;
    }
    // The same as the token path on the tokenizer's ids, and the text is the ids detokenized.
    std::vector<TokenTranslation> tokens;
    translator.translate_ids({model->encode_source(lines[i])}, {}, tokens);
    EXPECT_EQ(results[i].hypotheses[0].ids, tokens[0].hypotheses[0].ids) << "line " << i;
    EXPECT_EQ(results[i].hypotheses[0].text,
              model->decode_target(tokens[0].hypotheses[0].ids.data(), tokens[0].hypotheses[0].ids.size()));
  }
}

TEST(Translator, InvalidUtf8IsAClearError) {
  auto model = default_model();
  Translator translator(model, {});
  for (const std::string bad : {"\xff", "ok \xc3", "\xed\xa0\x80", "\xc0\xaf"}) {
    try {
      translator.translate({"the cat", bad});
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("sentence 2"), std::string::npos) << message;
      EXPECT_NE(message.find("invalid UTF-8"), std::string::npos) << message;
    }
  }
  EXPECT_EQ(translator.translate({"the cat"}).size(), 1u);
}

// f16 weights are widened to f32 once at load: a file with f16 weights translates exactly like
// an f32 file holding the same (f16-representable) values.
TEST(Translator, HalfPrecisionWeightsMatchTheirF32Values) {
  TinyModelOptions rounded;
  rounded.round_to_f16 = true;
  rounded.seed = 5;
  auto f32_model = tiny_model(rounded, "rounded_f32");
  rounded.matrix_dtype = DType::f16;
  auto f16_model = tiny_model(rounded, "rounded_f16");
  const auto sources = test::random_source_ids(5, f32_model->config().source_vocab_size, 16, 10);
  std::vector<TokenTranslation> a, b;
  Translator(f32_model, {}).translate_ids(sources, {}, a);
  Translator(f16_model, {}).translate_ids(sources, {}, b);
  expect_same_translations(a, b);
}

// int8 weights with per-row scales: logits close to the f32 model's (quantization error only).
TEST(Translator, Int8WeightsGiveLogitsCloseToF32) {
  TinyModelOptions options;
  options.seed = 6;
  auto f32_model = tiny_model(options, "q_f32");
  options.matrix_dtype = DType::int8;
  auto int8_model = tiny_model(options, "q_int8");
  const ModelConfig& config = f32_model->config();
  TranslatorOptions topts;
  topts.max_batch = 1;
  const auto plan = runtime::make_memory_plan(config, topts);
  auto a = runtime::make_cpu_backend(*f32_model, plan, 1);
  auto b = runtime::make_cpu_backend(*int8_model, plan, 1);
  const std::vector<int32_t> source{7, 9, 11, 13, config.eos_id};
  const int32_t length = 5;
  std::vector<float> la(config.target_vocab_size), lb(config.target_vocab_size);
  for (auto* backend : {a.get(), b.get()}) backend->encode(source.data(), &length, 1, length);
  const int32_t tokens[] = {config.bos_id, 8, 12};
  for (int step = 0; step < 3; ++step) {
    a->decode_step(&tokens[step], 1, step);
    b->decode_step(&tokens[step], 1, step);
    runtime::probe(*a).copy_logits(la.data());
    runtime::probe(*b).copy_logits(lb.data());
    double max_abs = 0.0, max_diff = 0.0;
    for (size_t v = 0; v < la.size(); ++v) {
      max_abs = std::max(max_abs, std::abs(static_cast<double>(la[v])));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(la[v]) - lb[v]));
    }
    EXPECT_LT(max_diff, 0.05 * max_abs) << "step " << step;
    EXPECT_GT(max_diff, 0.0) << "int8 weights should not be exact";
  }
}

// Pre-norm with separate embeddings and an untied output projection goes through the same API.
TEST(Translator, PreNormSeparateEmbeddingsTranslate) {
  TinyModelOptions options;
  options.norm_position = NormPosition::pre;
  options.shared_embeddings = false;
  options.tied_output = false;
  options.seed = 9;
  auto model = tiny_model(options, "pre_separate");
  Translator translator(model, {});
  const auto sources = test::random_source_ids(4, model->config().source_vocab_size, 17, 10);
  std::vector<TokenTranslation> batched;
  translator.translate_ids(sources, {}, batched);
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<TokenTranslation> one;
    translator.translate_ids({sources[i]}, {}, one);
    expect_same_translations({batched[i]}, one);
  }
}

}  // namespace
}  // namespace xf

namespace xf {
namespace {

// weight_dtype converts at load: int8 from an f32 file equals the int8 file the writer
// quantizes the same way; f32 from an int8 file equals an f32 file of the dequantized values.
TEST(Translator, WeightDtypeConversionAtLoadMatchesStoredFiles) {
  TinyModelOptions options;
  options.seed = 8;
  auto f32_file = tiny_model(options, "convert_f32");
  options.matrix_dtype = DType::int8;
  auto int8_file = tiny_model(options, "convert_int8");
  const auto sources = test::random_source_ids(5, f32_file->config().source_vocab_size, 18, 10);

  TranslatorOptions to_int8;
  to_int8.weight_dtype = DType::int8;
  std::vector<TokenTranslation> converted, stored;
  Translator(f32_file, to_int8).translate_ids(sources, {}, converted);
  Translator(int8_file, {}).translate_ids(sources, {}, stored);
  expect_same_translations(converted, stored);

  // The int8 file widened to f32 at load equals an f32 file holding the dequantized values.
  static const std::string dir = test::make_temp_dir("dequantized");
  const ModelFile& q = int8_file->file();
  ModelWriter writer(q.config());
  writer.set_source_tokenizer(std::string(q.source_tokenizer()));
  for (const TensorView& t : q.tensors()) {
    std::vector<float> values(t.elements());
    for (uint64_t r = 0; r < t.rows(); ++r)
      cpu::load_row({t.dtype, t.data, t.row_scales, static_cast<int64_t>(t.rows()), static_cast<int64_t>(t.cols())},
                    static_cast<int64_t>(r), values.data() + r * t.cols());
    writer.add_tensor_f32(std::string(t.name), DType::f32,
                          std::vector<uint64_t>(t.shape.begin(), t.shape.begin() + t.rank), values.data());
  }
  writer.write(dir + "/dequantized.xfm");
  TranslatorOptions to_f32;
  to_f32.weight_dtype = DType::f32;
  std::vector<TokenTranslation> widened, dequantized;
  Translator(int8_file, to_f32).translate_ids(sources, {}, widened);
  Translator(Model::open(dir + "/dequantized.xfm"), {}).translate_ids(sources, {}, dequantized);
  expect_same_translations(widened, dequantized);

  TranslatorOptions bad;
  bad.weight_dtype = DType::f16;
  EXPECT_THROW(Translator(f32_file, bad), Error);
}

// Whether the page at `address` is mapped into this process (/proc/self/pagemap, bit 63). Not
// mincore(), which reports the page cache: a released page of a file mapping stays cached.
bool page_mapped(int pagemap, uintptr_t address, uintptr_t page) {
  uint64_t entry = 0;
  const off_t offset = static_cast<off_t>(address / page * sizeof(entry));
  if (::pread(pagemap, &entry, sizeof(entry), offset) != static_cast<ssize_t>(sizeof(entry)))
    throw Error("cannot read /proc/self/pagemap");
  return (entry >> 63) != 0;
}

// Mapped pages among the whole pages inside a tensor's bytes, and how many there are.
// (A kernel that maps file pages by 2 MB folios unmaps a whole folio when part of it is
// released, and maps it whole again when any of it is read: so only released tensors are
// checked, right after the backend is made, before anything reads the file.)
std::pair<size_t, size_t> mapped_pages(int pagemap, const TensorView& t) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  size_t mapped = 0, total = 0;
  for (uintptr_t p = (begin + page - 1) / page * page; p + page <= begin + t.bytes; p += page) {
    ++total;
    mapped += page_mapped(pagemap, p, page) ? 1 : 0;
  }
  return {mapped, total};
}

// The model file at `path` opened twice: mapped, and from its bytes read into memory (where
// nothing is released; the bytes live as long as the model that reads them).
struct MappedAndInMemory {
  std::string bytes;
  std::shared_ptr<const Model> mapped, in_memory;
};
std::unique_ptr<MappedAndInMemory> open_mapped_and_in_memory(const std::string& path) {
  auto models = std::make_unique<MappedAndInMemory>();
  std::ifstream in(path, std::ios::binary);
  models->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  models->mapped = Model::open(path);
  models->in_memory =
      Model::from_file(ModelFile::from_memory(models->bytes.data(), models->bytes.size(), "in memory"));
  return models;
}

// A matrix whose products read oneDNN's packed copy is released from the mapping (resident
// memory: the f32 weights once, not twice): its pages are no longer mapped once the backend is
// made, embedding tables (untied here) are not released, and translations equal those of the same bytes
// opened from memory (where nothing is released). Which matrices oneDNN packs depends on the CPU
// and the row counts; the encoder's (a whole group of rows) are packed on x86 CPUs.
TEST(Translator, PackedF32MatricesReleaseTheirMappedPages) {
  TinyModelOptions options;
  options.seed = 21;
  options.with_tokenizer = false;
  options.vocab_size = 600;
  options.d_model = 128;
  options.d_ff = 512;
  const std::string path = test::tiny_model_file(options, "release_pages");
  const auto models = open_mapped_and_in_memory(path);
  const auto& mapped = models->mapped;
  const auto& in_memory = models->in_memory;

  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY);
  ASSERT_GE(pagemap, 0) << "cannot open /proc/self/pagemap";
  const ModelFile& file = mapped->file();
  // Every page touched first: "not mapped" afterwards is the backend's doing.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (const TensorView& t : file.tensors())
    for (size_t b = 0; b < t.bytes; b += page) sink = sink + static_cast<const uint8_t*>(t.data)[b];

  const ModelConfig& config = mapped->config();
  const std::string source_table = param::source_embedding(config);
  const std::string target_table = param::target_embedding(config);
  const auto plan = runtime::make_memory_plan(config, {});
  auto backend = runtime::make_cpu_backend(*mapped, plan, 1);
  // The pages first, names after: a name is read from the file's header, whose pages (and
  // their neighbours) a read maps back.
  const std::vector<const TensorView*> released = runtime::probe(*backend).released_weights();
  std::vector<std::pair<size_t, size_t>> pages;  // mapped, total per released tensor
  for (const TensorView* t : released) pages.push_back(mapped_pages(pagemap, *t));
  ::close(pagemap);
  size_t released_pages = 0;
  std::vector<std::string> released_names;
  for (size_t i = 0; i < released.size(); ++i) {
    const std::string name(released[i]->name);
    released_names.push_back(name);
    EXPECT_NE(name, source_table);
    EXPECT_NE(name, target_table);
    EXPECT_EQ(released[i]->rank, 2u) << name;
    EXPECT_EQ(pages[i].first, 0u) << name << ": " << pages[i].first << " of " << pages[i].second
                                  << " pages still mapped";
    released_pages += pages[i].second;
  }
  for (uint32_t i = 0; i < config.encoder_layers; ++i) {
    const std::string name = param::encoder_layer(i) + schema::kFfnInner.name + schema::kWeight;
    EXPECT_NE(std::find(released_names.begin(), released_names.end(), name), released_names.end())
        << name;
  }
  EXPECT_GT(released_pages, 100u);  // the check looked at something

  const auto sources = test::random_source_ids(6, config.source_vocab_size, 22, 12);
  std::vector<TokenTranslation> from_mapped, from_memory;
  Translator(mapped, {}).translate_ids(sources, {}, from_mapped);
  Translator(in_memory, {}).translate_ids(sources, {}, from_memory);
  expect_same_translations(from_mapped, from_memory);
}

// A target table tied to the output layer, where the output layer reads xf's own f32 copy (the
// AVX2 panels): embed() reads that copy and the stored table is released (not resident twice);
// elsewhere the table stays. Translations equal those of the same bytes opened from memory
// either way.
TEST(Translator, TiedTableReadsTheOutputLayersCopy) {
  TinyModelOptions options;
  options.seed = 23;
  options.with_tokenizer = false;
  options.vocab_size = 700;
  options.d_model = 64;
  options.tied_output = true;
  const std::string path = test::tiny_model_file(options, "tied_release");
  const auto models = open_mapped_and_in_memory(path);
  const auto& mapped = models->mapped;
  const auto& in_memory = models->in_memory;
  const ModelConfig& config = mapped->config();
  ASSERT_TRUE(config.tied_output);

  const TensorView* table = nullptr;
  for (const TensorView& t : mapped->file().tensors())
    if (std::string(t.name) == param::target_embedding(config)) table = &t;
  ASSERT_NE(table, nullptr);
  cpu::CpuEngine engine(1);
  const bool reads_copy =
      cpu::StaticMatmul(engine, 1, cpu::WeightMatrix{DType::f32, table->data, nullptr, config.target_vocab_size, config.d_model}, false)
          .holds_f32_weight_rows();
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY);
  ASSERT_GE(pagemap, 0) << "cannot open /proc/self/pagemap";
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (size_t b = 0; b < table->bytes; b += page) sink = sink + static_cast<const uint8_t*>(table->data)[b];

  const auto plan = runtime::make_memory_plan(config, {});
  auto backend = runtime::make_cpu_backend(*mapped, plan, 1);
  const auto released = runtime::probe(*backend).released_weights();
  const bool table_released = std::find(released.begin(), released.end(), table) != released.end();
  const std::pair<size_t, size_t> pages = mapped_pages(pagemap, *table);
  ::close(pagemap);
  EXPECT_EQ(table_released, reads_copy);
  if (reads_copy) {
    EXPECT_EQ(pages.first, 0u) << pages.first << " of " << pages.second << " pages still mapped";
  }

  const auto sources = test::random_source_ids(6, config.source_vocab_size, 24, 12);
  std::vector<TokenTranslation> from_mapped, from_memory;
  Translator(mapped, {}).translate_ids(sources, {}, from_mapped);
  Translator(in_memory, {}).translate_ids(sources, {}, from_memory);
  expect_same_translations(from_mapped, from_memory);
}

}  // namespace
}  // namespace xf

namespace xf {
namespace {

// The model at `path` written again with each layer's matrices in `layout` (format version 4,
// as xf-convert --layout panels writes them; embeddings and the output layer stay rows).
std::string relaid_copy(const std::string& path, WeightLayout layout, const std::string& name) {
  static const std::string dir = test::make_temp_dir("relaid");
  const auto file = ModelFile::open(path);
  ModelWriter writer(file->config());
  if (!file->source_tokenizer().empty()) writer.set_source_tokenizer(std::string(file->source_tokenizer()));
  for (const auto& [key, value] : file->metadata()) writer.set_metadata(key, value);
  for (const TensorView& t : file->tensors()) {
    const std::string tensor(t.name);
    writer.add_tensor(tensor, t.dtype, std::vector<uint64_t>(t.shape.begin(), t.shape.begin() + t.rank), t.data,
                      t.bytes, t.row_scales);
    const bool layer_matrix = t.rank == 2 && (tensor.rfind("encoder.layers.", 0) == 0 || tensor.rfind("decoder.layers.", 0) == 0);
    if (layer_matrix && layout_holds(layout, t.dtype)) writer.set_layout(tensor, layout);
  }
  const std::string out = dir + "/" + name + ".xfm";
  writer.write(out);
  return out;
}

void expect_identical_translations(const std::vector<TokenTranslation>& a, const std::vector<TokenTranslation>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].hypotheses.size(), b[i].hypotheses.size()) << "sentence " << i;
    for (size_t k = 0; k < a[i].hypotheses.size(); ++k) {
      EXPECT_EQ(a[i].hypotheses[k].ids, b[i].hypotheses[k].ids) << "sentence " << i << " hypothesis " << k;
      EXPECT_EQ(a[i].hypotheses[k].score, b[i].hypotheses[k].score) << "sentence " << i << " hypothesis " << k;
    }
  }
}

// A file whose layer matrices are in another layout (format version 4) translates as the rows
// file, bit for bit, at every level (this test runs at each, tests/runtime/CMakeLists.txt): where
// the level's products read the layout (cpu::reads_layout_in_place) from the mapping, nothing of
// those matrices released (read in place); where they do not (a file made for another level),
// from row copies made at load, the stored matrices released. A 7-bit file holds the 7-bit model
// (values halved, scales doubled): the rows file's results at a level that halves its weights
// itself, elsewhere those of the same 7-bit values in rows (7-bit panels = 7-bit rows).
TEST(Translator, FileInPanelsTranslatesAsTheRowsFile) {
  for (DType dtype : {DType::int8, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    TinyModelOptions options;
    options.seed = 31;
    options.with_tokenizer = false;
    options.vocab_size = 300;
    options.d_model = 64;
    options.d_ff = 102;  // k of the FFN's second product: panels padded in k
    options.matrix_dtype = dtype;
    const std::string rows_path = test::tiny_model_file(options, std::string("rows_") + dtype_name(dtype));
    const auto rows_model = Model::open(rows_path);
    const auto sources = test::random_source_ids(8, rows_model->config().source_vocab_size, 32, 20);
    for (const int beam : {1, 4}) {
      TranslateOptions translate;
      translate.beam = beam;
      std::vector<TokenTranslation> from_rows, seven_bit_rows;
      Translator(rows_model, {}).translate_ids(sources, translate, from_rows);
      const bool level_halves = dtype == DType::int8 && in_seven_bits(cpu::kernel_weight_layout(DType::int8));
      for (WeightLayout layout : {WeightLayout::seven_bit_rows, WeightLayout::panels, WeightLayout::seven_bit_panels}) {
        if (!layout_holds(layout, dtype)) continue;
        SCOPED_TRACE(std::string(weight_layout_name(layout)) + " beam " + std::to_string(beam));
        const auto model = Model::open(relaid_copy(rows_path, layout,
                                                   std::string(dtype_name(dtype)) + "_" + std::to_string(static_cast<int>(layout))));
        ASSERT_EQ(model->file().format_version(), 4u);
        std::vector<TokenTranslation> translations;
        Translator(model, {}).translate_ids(sources, translate, translations);
        if (!in_seven_bits(layout) || level_halves) {
          expect_identical_translations(translations, from_rows);
        } else if (layout == WeightLayout::seven_bit_rows) {
          seven_bit_rows = translations;
        } else {
          expect_identical_translations(translations, seven_bit_rows);
        }
        // Read in place, or from copies with the stored matrices released.
        const auto plan = runtime::make_memory_plan(model->config(), {});
        auto backend = runtime::make_cpu_backend(*model, plan, 1);
        const auto released = runtime::probe(*backend).released_weights();
        for (const TensorView& t : model->file().tensors()) {
          if (t.layout == WeightLayout::rows || !in_panels(t.layout)) continue;
          const bool was_released = std::find(released.begin(), released.end(), &t) != released.end();
          EXPECT_EQ(was_released, !cpu::reads_layout_in_place(dtype, t.layout)) << t.name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace xf
