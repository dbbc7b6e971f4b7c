// The per-call decoding options on tiny random models: target prefix, repetition penalty,
// no-repeat n-grams and sampling against a greedy search redone here over the backend's raw
// logits; the length cap, batches cut by tokens, reproducible sampling, and the option errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend_probe.h"
#include "memory_plan.h"
#include "search.h"
#include "search_support.h"
#include "tiny_model.h"
#include "xf/translator.h"

namespace xf {
namespace {

std::shared_ptr<const Model> model_named(const test::TinyModelOptions& options, const std::string& name) {
  return Model::open(test::tiny_model_file(options, name));
}

std::shared_ptr<const Model> default_model() {
  static const auto model = model_named({}, "default");
  return model;
}

// Random models that rarely emit EOS repeat themselves: what the repetition options are for.
std::shared_ptr<const Model> long_output_model() {
  static const auto model = [] {
    test::TinyModelOptions options;
    options.eos_bias = -3.0f;
    options.seed = 5;
    return model_named(options, "long_outputs");
  }();
  return model;
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : logits) max = std::max<double>(max, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(v - max);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - max - std::log(sum);
  return out;
}

using Adjust = std::function<void(std::vector<float>& logits, const std::vector<int32_t>& so_far)>;

struct Reference {
  std::vector<int32_t> ids;
  double log_prob = 0.0;
};

// A CPU backend for one sentence at a time, `source` (ids without EOS) encoded.
struct OneSentence {
  OneSentence(const Model& model, const TranslatorOptions& topts, std::vector<int32_t> source)
      : plan(runtime::make_memory_plan(model.config(), single(topts))),
        backend(runtime::make_cpu_backend(model, plan, 1)) {
    source.push_back(model.config().eos_id);
    length = static_cast<int32_t>(source.size());
    backend->encode(source.data(), &length, 1, length);
  }
  static TranslatorOptions single(TranslatorOptions topts) {
    topts.max_batch = 1;
    return topts;
  }
  runtime::MemoryPlan plan;
  std::unique_ptr<runtime::Backend> backend;
  int32_t length = 0;
};

// Greedy search one sentence at a time from the backend's raw logits: the prefix forced, the
// logits edited by `adjust`, then the argmax (ties to the lower id), in double precision.
Reference reference_greedy(const Model& model, const TranslatorOptions& topts, const TranslateOptions& options,
                           const std::vector<int32_t>& source, const std::vector<int32_t>& prefix,
                           const Adjust& adjust) {
  const ModelConfig& config = model.config();
  OneSentence one(model, topts, source);
  auto& backend = one.backend;
  const int64_t max_length = runtime::max_output_length(one.plan, options, one.length);
  std::vector<float> logits(config.target_vocab_size);
  Reference out;
  int32_t token = config.bos_id;
  for (int64_t step = 0; step < max_length; ++step) {
    backend->decode_step(&token, 1, step);
    runtime::probe(*backend).copy_logits(logits.data());
    if (adjust) adjust(logits, out.ids);
    const auto log_probs = log_softmax(logits);
    token = step < static_cast<int64_t>(prefix.size())
                ? prefix[step]
                : static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.log_prob += log_probs[token];
    if (token == config.eos_id) break;
    out.ids.push_back(token);
  }
  return out;
}

// Teacher forcing: each step's log-probabilities for a given output (EOS appended when shorter
// than the limit), so a sampled output can be checked token by token.
std::vector<std::vector<double>> forced_log_probs(const Model& model, const TranslatorOptions& topts,
                                                  const std::vector<int32_t>& source,
                                                  const std::vector<int32_t>& output) {
  const ModelConfig& config = model.config();
  OneSentence one(model, topts, source);
  auto& backend = one.backend;
  const runtime::MemoryPlan& plan = one.plan;
  std::vector<float> logits(config.target_vocab_size);
  std::vector<std::vector<double>> steps;
  int32_t token = config.bos_id;
  for (size_t step = 0; step <= output.size() && static_cast<int64_t>(step) < plan.max_target_len; ++step) {
    backend->decode_step(&token, 1, static_cast<int64_t>(step));
    runtime::probe(*backend).copy_logits(logits.data());
    steps.push_back(log_softmax(logits));
    if (step < output.size()) token = output[step];
  }
  return steps;
}

bool has_repeated_ngram(const std::vector<int32_t>& ids, size_t n) {
  std::set<std::vector<int32_t>> seen;
  for (size_t i = 0; i + n <= ids.size(); ++i)
    if (!seen.insert(std::vector<int32_t>(ids.begin() + i, ids.begin() + i + n)).second) return true;
  return false;
}

TranslatorOptions small_translator() {
  TranslatorOptions topts = test::plan_options(4, 4);
  topts.max_source_len = 32;
  topts.max_len_b = 20;
  return topts;
}

void expect_matches_reference(const Translator& translator, const Model& model,
                              const std::vector<std::vector<int32_t>>& sources,
                              const std::vector<TokenTranslation>& results, const TranslateOptions& options,
                              const std::vector<std::vector<int32_t>>& prefixes, const Adjust& adjust) {
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto expected = reference_greedy(model, translator.options(), options, sources[i],
                                           prefixes.empty() ? std::vector<int32_t>() : prefixes[i], adjust);
    ASSERT_EQ(results[i].hypotheses.size(), 1u);
    EXPECT_EQ(results[i].hypotheses[0].ids, expected.ids) << "sentence " << i;
    EXPECT_NEAR(results[i].hypotheses[0].log_prob, expected.log_prob, 1e-4 * std::max(1.0, std::abs(expected.log_prob)))
        << "sentence " << i;
  }
}

// Forced tokens are output and scored; sentences without a prefix in the same batch are unchanged.
TEST(DecodingOptions, TargetPrefixIsHonouredGreedy) {
  auto model = default_model();
  Translator translator(model, small_translator());
  const uint32_t vocab = model->config().target_vocab_size;
  const auto sources = test::random_source_ids(7, model->config().source_vocab_size, 31, 12);
  std::vector<std::vector<int32_t>> prefixes = test::random_source_ids(7, vocab, 32, 4);
  prefixes[2].clear();
  prefixes[5].clear();
  TranslateOptions options = test::beam_options(1);
  options.disable_loop_guard = true;  // compared with outputs this random model loops in, uncut
  std::vector<TokenTranslation> results, plain;
  translator.translate_ids(sources, options, results, prefixes);
  translator.translate_ids(sources, options, plain);
  expect_matches_reference(translator, *model, sources, results, options, prefixes, nullptr);
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& ids = results[i].hypotheses[0].ids;
    ASSERT_GE(ids.size(), prefixes[i].size());
    EXPECT_TRUE(std::equal(prefixes[i].begin(), prefixes[i].end(), ids.begin())) << "sentence " << i;
    if (prefixes[i].empty()) {
      EXPECT_EQ(ids, plain[i].hypotheses[0].ids) << "sentence " << i;
    } else {
      EXPECT_NE(ids, plain[i].hypotheses[0].ids) << "random prefixes should change the output";
    }
  }
  // Forcing the start of the greedy output changes nothing.
  size_t tested = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::vector<int32_t>& greedy = plain[i].hypotheses[0].ids;
    if (greedy.size() < 2) continue;
    translator.translate_ids({sources[i]}, options, results, {{greedy[0], greedy[1]}});
    EXPECT_EQ(results[0].hypotheses[0].ids, greedy) << "sentence " << i;
    EXPECT_NEAR(results[0].hypotheses[0].log_prob, plain[i].hypotheses[0].log_prob, 1e-5);
    ++tested;
  }
  EXPECT_GT(tested, 0u);
}

TEST(DecodingOptions, TargetPrefixIsHonouredByEveryBeamHypothesis) {
  auto model = default_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(6, model->config().source_vocab_size, 33, 12);
  auto prefixes = test::random_source_ids(6, model->config().target_vocab_size, 34, 3);
  prefixes[1].clear();
  TranslateOptions options = test::beam_options(4, 4);
  std::vector<TokenTranslation> results, plain;
  translator.translate_ids(sources, options, results, prefixes);
  translator.translate_ids(sources, options, plain);
  for (size_t i = 0; i < sources.size(); ++i) {
    ASSERT_EQ(results[i].hypotheses.size(), 4u) << "sentence " << i;
    for (const auto& h : results[i].hypotheses) {
      ASSERT_GE(h.ids.size(), prefixes[i].size());
      EXPECT_TRUE(std::equal(prefixes[i].begin(), prefixes[i].end(), h.ids.begin())) << "sentence " << i;
      // The prefix's own log-probability is part of the score: re-score by teacher forcing.
      const auto steps = forced_log_probs(*model, translator.options(), sources[i], h.ids);
      double log_prob = 0.0;
      for (size_t t = 0; t < h.ids.size(); ++t) log_prob += steps[t][h.ids[t]];
      if (steps.size() > h.ids.size()) log_prob += steps[h.ids.size()][model->config().eos_id];
      EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * std::max(1.0, std::abs(log_prob))) << "sentence " << i;
    }
    for (size_t k = 1; k < 4; ++k) EXPECT_GE(results[i].hypotheses[k - 1].score, results[i].hypotheses[k].score);
  }
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(results[1].hypotheses[k].ids, plain[1].hypotheses[k].ids);
}

TEST(DecodingOptions, RepetitionPenaltyMatchesTheReference) {
  auto model = long_output_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(6, model->config().source_vocab_size, 35, 10);
  for (float penalty : {1.5f, 0.7f}) {
    TranslateOptions options = test::beam_options(1);
    options.disable_loop_guard = true;  // compared with outputs this random model loops in, uncut
    options.repetition_penalty = penalty;
    std::vector<TokenTranslation> results, plain;
    translator.translate_ids(sources, options, results);
    options.repetition_penalty = 1.0f;
    translator.translate_ids(sources, options, plain);
    options.repetition_penalty = penalty;
    SCOPED_TRACE("penalty " + std::to_string(penalty));
    expect_matches_reference(translator, *model, sources, results, options, {},
                             [&](std::vector<float>& logits, const std::vector<int32_t>& so_far) {
                               for (int32_t t : std::set<int32_t>(so_far.begin(), so_far.end()))
                                 logits[t] = logits[t] < 0 ? logits[t] * penalty : logits[t] / penalty;
                             });
    size_t changed = 0;
    for (size_t i = 0; i < sources.size(); ++i) changed += results[i].hypotheses[0].ids != plain[i].hypotheses[0].ids;
    EXPECT_GT(changed, 0u) << "the penalty changed no output";
  }
}

TEST(DecodingOptions, NoRepeatedNgramOfTheGivenSize) {
  auto model = long_output_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(8, model->config().source_vocab_size, 36, 10);
  for (int n : {1, 2, 3}) {
    for (int beam : {1, 4}) {
      SCOPED_TRACE("n " + std::to_string(n) + " beam " + std::to_string(beam));
      TranslateOptions options = test::beam_options(beam, beam);
      std::vector<TokenTranslation> results;
      translator.translate_ids(sources, options, results);
      size_t repeating = 0;
      for (const auto& r : results) repeating += has_repeated_ngram(r.hypotheses[0].ids, n);
      ASSERT_GT(repeating, 0u) << "without the option some outputs should repeat an n-gram";
      options.no_repeat_ngram_size = n;
      translator.translate_ids(sources, options, results);
      for (size_t i = 0; i < results.size(); ++i)
        for (const auto& h : results[i].hypotheses) {
          EXPECT_FALSE(has_repeated_ngram(h.ids, n)) << "sentence " << i;
          EXPECT_TRUE(std::isfinite(h.score));
        }
      if (beam == 1)
        expect_matches_reference(translator, *model, sources, results, options, {},
                                 [&](std::vector<float>& logits, const std::vector<int32_t>& so_far) {
                                   std::vector<int32_t> next(so_far);
                                   next.push_back(0);
                                   for (size_t t = 0; t < logits.size(); ++t) {
                                     next.back() = static_cast<int32_t>(t);
                                     if (has_repeated_ngram(next, n)) logits[t] = -INFINITY;
                                   }
                                 });
    }
  }
}

// The loop guard (on by default) against the outputs without it: an output is left as it is
// unless, longer than its source (tokens with EOS), its last 4 tokens occur for the third time;
// then it ends where their second occurrence began (a reference written here, greedy and beam).
std::vector<int32_t> reference_loop_guard(const std::vector<int32_t>& ids, size_t source_tokens) {
  for (size_t t = 12; t <= ids.size(); ++t) {
    if (t <= source_tokens) continue;
    std::vector<size_t> at;  // earlier starts of the last 4-gram
    for (size_t j = 0; j + 4 < t; ++j)
      if (std::equal(ids.begin() + j, ids.begin() + j + 4, ids.begin() + (t - 4))) at.push_back(j);
    if (at.size() >= 2) return std::vector<int32_t>(ids.begin(), ids.begin() + at.back());
  }
  return ids;
}

TEST(DecodingOptions, LoopGuardCutsOnlyLoopsLongerThanTheSource) {
  auto model = long_output_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(8, model->config().source_vocab_size, 36, 10);
  // The translations of `sources` with the guard (the default) and without it.
  std::vector<TokenTranslation> guarded, unguarded;
  auto translate_both = [&](const std::vector<std::vector<int32_t>>& sources, TranslateOptions options) {
    translator.translate_ids(sources, options, guarded);
    options.disable_loop_guard = true;
    translator.translate_ids(sources, options, unguarded);
  };
  for (int beam : {1, 4}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    translate_both(sources, test::beam_options(beam));
    size_t cut = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto& free_ids = unguarded[i].hypotheses[0].ids;
      const auto& ids = guarded[i].hypotheses[0].ids;
      cut += ids != free_ids;
      if (beam == 1) EXPECT_EQ(ids, reference_loop_guard(free_ids, sources[i].size() + 1)) << "sentence " << i;
      else EXPECT_EQ(reference_loop_guard(ids, sources[i].size() + 1), ids) << "sentence " << i << " still loops";
    }
    EXPECT_GT(cut, 0u) << "these looping outputs should be cut";
  }
  // A source as long as the looping output: nothing is cut.
  const auto long_sources = test::random_source_ids(4, model->config().source_vocab_size, 37, 30);
  TranslateOptions options = test::beam_options(1);
  options.max_len_b = 0;  // outputs at most as long as the source
  translate_both(long_sources, options);
  size_t looping = 0;
  for (size_t i = 0; i < long_sources.size(); ++i) {
    EXPECT_EQ(guarded[i].hypotheses[0].ids, unguarded[i].hypotheses[0].ids) << "sentence " << i;
    looping += reference_loop_guard(unguarded[i].hypotheses[0].ids, 0) != unguarded[i].hypotheses[0].ids;
  }
  EXPECT_GT(looping, 0u) << "some of these outputs should loop (the guard spares them for their length)";
}

TEST(DecodingOptions, MaxDecodingLengthCapsEachCall) {
  auto model = long_output_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(6, model->config().source_vocab_size, 37, 10);
  for (int beam : {1, 4}) {
    TranslateOptions options = test::beam_options(beam);
    options.disable_loop_guard = true;  // compared with outputs this random model loops in, uncut
    std::vector<TokenTranslation> full, capped;
    translator.translate_ids(sources, options, full);
    options.max_decoding_length = 4;
    translator.translate_ids(sources, options, capped);
    size_t cut = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto& ids = capped[i].hypotheses[0].ids;
      EXPECT_LE(ids.size(), 4u);
      cut += full[i].hypotheses[0].ids.size() > 4;
      if (beam == 1) {
        const auto& whole = full[i].hypotheses[0].ids;
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), whole.begin())) << "greedy: a prefix of the uncapped output";
      }
    }
    EXPECT_GT(cut, 0u) << "some uncapped outputs should be longer than the cap";
  }
}

// min_decoding_length bans EOS before that many tokens, disable_unk bans the unknown token: greedy
// search equals the reference with those logits banned; beam hypotheses keep the minimum too.
TEST(DecodingOptions, MinDecodingLengthAndDisableUnkMatchTheReference) {
  test::TinyModelOptions tiny;
  tiny.unk_bias = 1.5f;  // the unknown token comes up in outputs
  tiny.seed = 7;
  auto model = model_named(tiny, "unk_bias");
  const ModelConfig& config = model->config();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(24, config.source_vocab_size, 39, 10);
  TranslateOptions options = test::beam_options(1);
  options.disable_loop_guard = true;  // the reference does not cut these random models' loops
  std::vector<TokenTranslation> plain, results;
  translator.translate_ids(sources, options, plain);
  size_t short_outputs = 0, with_unk = 0;
  for (const auto& r : plain) {
    short_outputs += r.hypotheses[0].ids.size() < 6;
    with_unk += std::count(r.hypotheses[0].ids.begin(), r.hypotheses[0].ids.end(), config.unk_id) > 0;
  }
  ASSERT_GT(short_outputs, 0u) << "some plain outputs should be shorter than the minimum";
  ASSERT_GT(with_unk, 0u) << "some plain outputs should hold the unknown token";

  options.min_decoding_length = 6;
  options.disable_unk = true;
  translator.translate_ids(sources, options, results);
  expect_matches_reference(translator, *model, sources, results, options, {},
                           [&](std::vector<float>& logits, const std::vector<int32_t>& so_far) {
                             logits[config.unk_id] = -std::numeric_limits<float>::infinity();
                             if (so_far.size() < 6) logits[config.eos_id] = -std::numeric_limits<float>::infinity();
                           });
  for (const auto& r : results) {
    EXPECT_GE(r.hypotheses[0].ids.size(), 6u);
    EXPECT_EQ(std::count(r.hypotheses[0].ids.begin(), r.hypotheses[0].ids.end(), config.unk_id), 0);
  }
  options.beam = 4;
  options.n_best = 4;
  translator.translate_ids(sources, options, results);
  for (const auto& r : results)
    for (const auto& h : r.hypotheses) {
      EXPECT_GE(h.ids.size(), 6u);
      EXPECT_EQ(std::count(h.ids.begin(), h.ids.end(), config.unk_id), 0);
    }
  options.max_decoding_length = 5;
  EXPECT_THROW(translator.translate_ids(sources, options, results), Error) << "min above max";
  options.max_decoding_length = 0;
  options.min_decoding_length = -1;
  EXPECT_THROW(translator.translate_ids(sources, options, results), Error);
}

// A model's decoding.allow_unk 0 (Marian's allow-unk false): the unknown token never comes out,
// and the others keep their log-probabilities (it is skipped after the softmax, not banned
// before it, as disable_unk does): every output scores what score_ids gives it, greedy and beam.
TEST(DecodingOptions, ModelsAllowUnkZeroSkipsTheUnknownTokenAfterTheSoftmax) {
  test::TinyModelOptions tiny;
  tiny.unk_bias = 1.5f;  // the unknown token comes up in outputs
  tiny.eos_bias = 4.0f;  // and many end with EOS
  tiny.seed = 7;
  const auto allowing = model_named(tiny, "unk_allowed");
  tiny.metadata = {{"decoding.allow_unk", "0"}};
  const auto model = model_named(tiny, "unk_not_allowed");
  EXPECT_FALSE(model->decoding_defaults().allow_unk);
  const int32_t unk = model->config().unk_id;
  const auto sources = test::random_source_ids(24, model->config().source_vocab_size, 39, 10);
  for (const int beam : {1, 4}) {
    SCOPED_TRACE("beam " + std::to_string(beam));
    TranslateOptions options = test::beam_options(beam);
    options.disable_loop_guard = true;
    std::vector<TokenTranslation> plain, results;
    Translator(allowing, small_translator()).translate_ids(sources, options, plain);
    size_t with_unk = 0;
    for (const auto& r : plain)
      with_unk += std::count(r.hypotheses[0].ids.begin(), r.hypotheses[0].ids.end(), unk) > 0;
    ASSERT_GT(with_unk, 0u) << "some plain outputs should hold the unknown token";
    Translator translator(model, small_translator());
    translator.translate_ids(sources, options, results);
    // The outputs that ended with EOS (not cut by the length limit), scored by teacher forcing.
    std::vector<std::vector<int32_t>> ended_sources, outputs;
    std::vector<float> log_probs;
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto& ids = results[i].hypotheses[0].ids;
      EXPECT_EQ(std::count(ids.begin(), ids.end(), unk), 0) << "sentence " << i;
      if (static_cast<int64_t>(ids.size()) <
          runtime::max_output_length(runtime::make_memory_plan(model->config(), translator.options()), options,
                                     static_cast<int64_t>(sources[i].size()) + 1)) {
        ended_sources.push_back(sources[i]);
        outputs.push_back(ids);
        log_probs.push_back(results[i].hypotheses[0].log_prob);
      }
    }
    ASSERT_GT(outputs.size(), 10u);
    std::vector<ScoringResult> scores;
    translator.score_ids(ended_sources, outputs, options, scores);
    for (size_t i = 0; i < outputs.size(); ++i)
      EXPECT_NEAR(log_probs[i], scores[i].log_prob(), 1e-4 * std::max(1.0f, std::abs(scores[i].log_prob()))) << i;
  }
}

// score_ids gives each target token's log-probability by teacher forcing, EOS last: the
// reference's, in any batch; the greedy output scores its own log_prob.
TEST(DecodingOptions, ScoringGivesTeacherForcedLogProbabilities) {
  auto model = default_model();
  const ModelConfig& config = model->config();
  Translator translator(model, small_translator());
  auto sources = test::random_source_ids(7, config.source_vocab_size, 43, 10);
  auto targets = test::random_source_ids(7, config.target_vocab_size, 44, 12);
  sources[2].clear();  // an empty source is scored too (EOS alone)
  targets[4].clear();  // an empty target: EOS alone
  std::vector<ScoringResult> scores;
  TranslateOptions options;
  options.max_batch_size = 3;
  translator.score_ids(sources, targets, options, scores);
  EXPECT_EQ(translator.last_call_batches(), 3);
  ASSERT_EQ(scores.size(), sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    std::vector<int32_t> with_eos = targets[i];
    with_eos.push_back(config.eos_id);
    ASSERT_EQ(scores[i].ids, with_eos) << i;
    ASSERT_EQ(scores[i].log_probs.size(), with_eos.size()) << i;
    const auto steps = forced_log_probs(*model, translator.options(), sources[i], targets[i]);
    ASSERT_EQ(steps.size(), with_eos.size());
    double sum = 0.0;
    for (size_t t = 0; t < with_eos.size(); ++t) {
      EXPECT_NEAR(scores[i].log_probs[t], steps[t][with_eos[t]], 1e-4) << i << " " << t;
      sum += steps[t][with_eos[t]];
    }
    EXPECT_NEAR(scores[i].log_prob(), sum, 1e-3) << i;
  }

  // The greedy translation's own score.
  TranslateOptions greedy = test::beam_options(1);
  std::vector<TokenTranslation> translations;
  sources[2] = {5, 6};
  translator.translate_ids(sources, greedy, translations);
  std::vector<std::vector<int32_t>> outputs;
  for (const auto& t : translations) outputs.push_back(t.hypotheses[0].ids);
  translator.score_ids(sources, outputs, {}, scores);
  for (size_t i = 0; i < sources.size(); ++i)
    if (static_cast<int64_t>(outputs[i].size()) < runtime::max_output_length(
                                                      runtime::make_memory_plan(config, translator.options()),
                                                      greedy, static_cast<int64_t>(sources[i].size()) + 1)) {
      EXPECT_NEAR(scores[i].log_prob(), translations[i].hypotheses[0].log_prob, 1e-3) << i;
    }

  // Bad requests name what is wrong.
  auto expect_error = [&](const std::vector<std::vector<int32_t>>& s, const std::vector<std::vector<int32_t>>& t,
                          const std::string& message) {
    try {
      translator.score_ids(s, t, {}, scores);
      ADD_FAILURE() << "no error, expected " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_error({{5}}, {}, "targets has 0 entries for 1 sources");
  expect_error({{5}}, {{config.eos_id}}, "sentence 1: target token id 3 is EOS");
  expect_error({{5}, {6}}, {{5}, std::vector<int32_t>(translator.max_target_len(), 5)},
               "sentence 2: a target of " + std::to_string(translator.max_target_len() + 1) + " tokens with EOS");
  expect_error({{5}}, {{static_cast<int32_t>(config.target_vocab_size)}}, "outside the target vocabulary");
}

// Both normalizations against divisors computed by hand, then on beam 4's n-best lists: every
// score is the log-probability over its divisor (length with EOS, unless the output was cut at
// the limit), the lists are sorted by it, and the two rules rank some sentence differently.
TEST(DecodingOptions, LengthNormalizationsDivideAsComputedByHand) {
  // gnmt: ((5 + 7) / 6)^1 = 2, ((5 + 1) / 6)^0.6 = 1; power: 4^0.5 = 2, 9^1.5 = 27, 5^0 = 1.
  EXPECT_FLOAT_EQ(length_normalizer(LengthNormalization::gnmt, 7, 1.0f), 2.0f);
  EXPECT_FLOAT_EQ(length_normalizer(LengthNormalization::gnmt, 1, 0.6f), 1.0f);
  EXPECT_FLOAT_EQ(length_normalizer(LengthNormalization::power, 4, 0.5f), 2.0f);
  EXPECT_FLOAT_EQ(length_normalizer(LengthNormalization::power, 9, 1.5f), 27.0f);
  EXPECT_FLOAT_EQ(length_normalizer(LengthNormalization::power, 5, 0.0f), 1.0f);

  test::TinyModelOptions model_options;
  model_options.eos_bias = 1.0f;  // outputs that end, of many lengths
  model_options.seed = 5;
  auto model = model_named(model_options, "normalization");
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(8, model->config().source_vocab_size, 43, 10);
  std::vector<std::vector<int32_t>> best[2];
  for (const auto normalization : {LengthNormalization::gnmt, LengthNormalization::power}) {
    SCOPED_TRACE(length_normalization_name(normalization));
    TranslateOptions options = test::beam_options(4, 4);
    options.length_penalty = 2.0f;  // strong, so that the rules disagree
    options.length_normalization = normalization;
    std::vector<TokenTranslation> results;
    translator.translate_ids(sources, options, results);
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& hypotheses = results[i].hypotheses;
      ASSERT_EQ(hypotheses.size(), 4u);
      for (size_t h = 0; h < hypotheses.size(); ++h) {
        const auto& hypothesis = hypotheses[h];
        const double length = static_cast<double>(hypothesis.ids.size()) +
                              (static_cast<int64_t>(hypothesis.ids.size()) == translator.max_target_len() ? 0 : 1);
        const double divisor = normalization == LengthNormalization::power ? std::pow(length, 2.0)
                                                                           : std::pow((5.0 + length) / 6.0, 2.0);
        EXPECT_NEAR(hypothesis.score, hypothesis.log_prob / divisor, 1e-5 * std::abs(hypothesis.log_prob))
            << "sentence " << i << " hypothesis " << h;
        if (h > 0) {
          EXPECT_GE(hypotheses[h - 1].score, hypothesis.score) << "sentence " << i;
        }
      }
      best[normalization == LengthNormalization::power].push_back(hypotheses[0].ids);
    }
  }
  EXPECT_NE(best[0], best[1]) << "length^2 and ((5 + length) / 6)^2 should rank some sentence differently";
}

// A model's decoding.* metadata gives the defaults: the beam of a Translator left at 0, and the
// length penalty, repetition penalty and n-gram size of every call that leaves them unset; an
// option given explicitly wins. Compared with the same weights without metadata.
TEST(DecodingOptions, TheModelsDecodingSettingsAreTheDefaults) {
  test::TinyModelOptions plain_options;
  plain_options.eos_bias = -1.0f;
  plain_options.seed = 5;
  test::TinyModelOptions with_defaults = plain_options;
  with_defaults.metadata = {{"decoding.beam", "3"}, {"decoding.length_penalty", "1.7"},
                            {"decoding.repetition_penalty", "1.3"}, {"decoding.no_repeat_ngram_size", "2"},
                            {"training.note", "not a decoding setting"}};
  auto plain = model_named(plain_options, "plain");
  auto model = model_named(with_defaults, "with_decoding_defaults");
  EXPECT_EQ(model->decoding_defaults().beam, 3);
  EXPECT_FLOAT_EQ(model->decoding_defaults().length_penalty, 1.7f);
  EXPECT_EQ(plain->decoding_defaults().beam, 4);
  EXPECT_FLOAT_EQ(plain->decoding_defaults().length_penalty, 0.6f);

  TranslatorOptions unset;  // beam 0: the model's
  unset.max_batch = 4;
  Translator translator(model, unset);
  EXPECT_EQ(translator.options().max_beam, 3);
  TranslatorOptions four = unset;
  four.max_beam = 4;
  EXPECT_EQ(Translator(model, four).options().max_beam, 4) << "a beam given explicitly wins";
  Translator plain_translator(plain, four);

  const auto sources = test::random_source_ids(6, model->config().source_vocab_size, 41, 10);
  TranslateOptions model_values;  // what the metadata says, given explicitly to the plain model
  model_values.beam = 3;
  model_values.n_best = 3;
  model_values.length_penalty = 1.7f;
  model_values.repetition_penalty = 1.3f;
  model_values.no_repeat_ngram_size = 2;
  TranslateOptions defaults;
  defaults.n_best = 3;
  std::vector<TokenTranslation> got, expected, xf_defaults;
  translator.translate_ids(sources, defaults, got);
  plain_translator.translate_ids(sources, model_values, expected);
  TranslateOptions plain_defaults = defaults;
  plain_defaults.beam = 3;
  plain_translator.translate_ids(sources, plain_defaults, xf_defaults);
  size_t differ = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    ASSERT_EQ(got[i].hypotheses.size(), expected[i].hypotheses.size());
    for (size_t h = 0; h < got[i].hypotheses.size(); ++h) {
      EXPECT_EQ(got[i].hypotheses[h].ids, expected[i].hypotheses[h].ids) << i << " " << h;
      EXPECT_FLOAT_EQ(got[i].hypotheses[h].score, expected[i].hypotheses[h].score) << i << " " << h;
    }
    differ += got[i].hypotheses[0].score != xf_defaults[i].hypotheses[0].score;
  }
  EXPECT_GT(differ, 0u) << "the model's settings should change the scores from xf's defaults";

  // Explicit options win over the model's.
  TranslateOptions explicit_options = plain_defaults;
  explicit_options.length_penalty = 0.6f;
  explicit_options.repetition_penalty = 1.0f;
  explicit_options.no_repeat_ngram_size = 0;
  std::vector<TokenTranslation> overridden;
  translator.translate_ids(sources, explicit_options, overridden);
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(overridden[i].hypotheses[0].ids, xf_defaults[i].hypotheses[0].ids) << i;
    EXPECT_FLOAT_EQ(overridden[i].hypotheses[0].score, xf_defaults[i].hypotheses[0].score) << i;
  }
}

// A decoding setting that is not one, or out of range, makes the file refused at open, naming it.
TEST(DecodingOptions, BadDecodingMetadataIsRefusedAtOpen) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"decoding.beam", "0"}, {"decoding.beam", "2.5"}, {"decoding.length_penalty", "fast"},
      {"decoding.repetition_penalty", "0"}, {"decoding.no_repeat_ngram_size", "-1"}, {"decoding.lenght_penalty", "1"}};
  for (size_t i = 0; i < bad.size(); ++i) {
    test::TinyModelOptions options;
    options.metadata = {bad[i]};
    try {
      model_named(options, "bad_decoding_" + std::to_string(i));
      ADD_FAILURE() << bad[i].first << "=" << bad[i].second << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("metadata " + bad[i].first + ": "), std::string::npos) << e.what();
    }
  }
}

// int8.arithmetic (xf/model.h): a name xf does not know is refused at open, naming the entry;
// Marian's arithmetic refuses an int8 output layer (a shortlist's gathered rows would be
// multiplied by xf's) with one line when a translator is made, and is read from the file.
TEST(DecodingOptions, Int8ArithmeticMetadataIsCheckedAtOpen) {
  test::TinyModelOptions options;
  options.metadata = {{"int8.arithmetic", "marian"}};
  try {
    model_named(options, "bad_int8_arithmetic");
    ADD_FAILURE() << "int8.arithmetic=marian was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metadata int8.arithmetic: expected xf, marian-intgemm-avx2, marian-intgemm-avx512bw, marian-intgemm-avx512vnni; got 'marian'"),
              std::string::npos)
        << e.what();
  }
  options.matrix_dtype = DType::int8;
  options.metadata = {{"int8.arithmetic", "marian-intgemm-avx2"}};
  const auto model = model_named(options, "int8_marian_arithmetic");
  EXPECT_EQ(model->int8_arithmetic(), Int8Arithmetic::marian_intgemm_avx2);
  EXPECT_EQ(default_model()->int8_arithmetic(), Int8Arithmetic::xf);
  for (const auto& [name, arithmetic] : {std::pair<std::string, Int8Arithmetic>{"xf", Int8Arithmetic::xf},
                                         {"marian-intgemm-avx512bw", Int8Arithmetic::marian_intgemm_avx512bw},
                                         {"marian-intgemm-avx512vnni", Int8Arithmetic::marian_intgemm_avx512vnni}})
    EXPECT_EQ(int8_arithmetic_from_metadata({{"training.note", "x"}, {"int8.arithmetic", name}}), arithmetic) << name;
  try {
    Translator translator(model, small_translator());
    ADD_FAILURE() << "an int8 output layer was accepted under Marian's arithmetic";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int8.arithmetic marian-intgemm-* needs an f32 output layer"),
              std::string::npos)
        << e.what();
  }
}

TEST(DecodingOptions, BatchesCutByTokensGiveTheSameTranslations) {
  auto model = default_model();
  TranslatorOptions topts = small_translator();
  topts.max_batch = 8;
  Translator translator(model, topts);
  std::vector<std::vector<int32_t>> sources = test::random_source_ids(12, model->config().source_vocab_size, 38, 20);
  TranslateOptions options = test::beam_options(2);
  std::vector<TokenTranslation> by_examples, by_tokens;
  translator.translate_ids(sources, options, by_examples);
  EXPECT_EQ(translator.last_call_batches(), 2);  // 12 sentences, 8 a batch
  options.max_batch_size = 3;
  translator.translate_ids(sources, options, by_examples);
  EXPECT_EQ(translator.last_call_batches(), 4);

  // Longest first: count the batches a budget of 30 padded tokens gives.
  std::vector<size_t> lengths;
  for (const auto& s : sources) lengths.push_back(s.size() + 1);
  std::sort(lengths.rbegin(), lengths.rend());
  int64_t expected = 0;
  for (size_t i = 0; i < lengths.size();) {
    size_t count = 1;
    while (i + count < lengths.size() && count < 8 && (count + 1) * lengths[i] <= 30) ++count;
    i += count;
    ++expected;
  }
  options.batch_type = BatchType::tokens;
  options.max_batch_size = 30;
  translator.translate_ids(sources, options, by_tokens);
  EXPECT_EQ(translator.last_call_batches(), expected);
  EXPECT_GT(expected, 4);
  ASSERT_EQ(by_tokens.size(), by_examples.size());
  for (size_t i = 0; i < sources.size(); ++i) EXPECT_EQ(by_tokens[i].hypotheses[0].ids, by_examples[i].hypotheses[0].ids);
  // A sentence longer than the budget makes a batch alone.
  options.max_batch_size = 1;
  translator.translate_ids(sources, options, by_tokens);
  EXPECT_EQ(translator.last_call_batches(), 12);
}

// The sampling code with top-k 1 picks the argmax: greedy search, whatever the seed.
TEST(DecodingOptions, SamplingTopOneEqualsGreedy) {
  auto model = default_model();
  const ModelConfig& config = model->config();
  TranslatorOptions topts = small_translator();
  topts.max_beam = 1;
  const auto plan = runtime::make_memory_plan(config, topts);
  auto backend = runtime::make_cpu_backend(*model, plan, 1);
  const auto sources = test::random_source_ids(4, config.source_vocab_size, 39, 15);
  const int64_t longest = test::longest_with_eos(sources);
  std::vector<TokenTranslation> greedy(4), sampled(4);
  std::vector<TokenTranslation*> greedy_out = test::pointers_to(greedy),
                                 sampled_out = test::pointers_to(sampled);
  runtime::Search search(plan, config);
  for (uint64_t seed : {1u, 2u, 3u}) {
    for (int pass = 0; pass < 2; ++pass) {
      test::stage_sources(search, config, sources, longest);
      TranslateOptions options = test::beam_options(1);
      options.seed = seed;
      options.sampling_temperature = 0.7f;
      search.always_sample = pass == 1;
      search.translate(*backend, 4, longest, 1, options, (pass == 0 ? greedy_out : sampled_out).data());
    }
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(sampled[i].hypotheses[0].ids, greedy[i].hypotheses[0].ids) << "seed " << seed << " sentence " << i;
      EXPECT_NEAR(sampled[i].hypotheses[0].log_prob, greedy[i].hypotheses[0].log_prob, 1e-5);
    }
  }
}

std::vector<std::vector<int32_t>> output_ids(const std::vector<TokenTranslation>& results) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : results) out.push_back(r.hypotheses[0].ids);
  return out;
}

TEST(DecodingOptions, SamplingIsReproducibleForASeedAndVariesWithIt) {
  auto model = default_model();
  TranslatorOptions topts = small_translator();
  Translator translator(model, topts);
  const auto sources = test::random_source_ids(10, model->config().source_vocab_size, 40, 12);
  TranslateOptions options = test::beam_options(1);
  options.sampling_topk = 0;
  options.seed = 7;
  std::vector<TokenTranslation> results, greedy;
  translator.translate_ids(sources, options, results);
  const auto first = output_ids(results);
  // Same seed: the same draws, again and on another Translator. (Each sentence draws from its
  // own stream, but another batching may round the logits differently and flip a draw.)
  translator.translate_ids(sources, options, results);
  EXPECT_EQ(output_ids(results), first);
  Translator other(model, topts);
  other.translate_ids(sources, options, results);
  EXPECT_EQ(output_ids(results), first);
  // Other seeds: other draws; and draws differ from the argmax.
  for (uint64_t seed : {8u, 9u}) {
    options.seed = seed;
    translator.translate_ids(sources, options, results);
    EXPECT_NE(output_ids(results), first) << "seed " << seed;
  }
  options.sampling_topk = 1;
  translator.translate_ids(sources, options, greedy);
  EXPECT_NE(output_ids(greedy), first);
}

// Each sampled token is among the top-k, inside the nucleus, and the score is the model's.
TEST(DecodingOptions, SampledTokensStayInsideTopKAndTopP) {
  auto model = default_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(8, model->config().source_vocab_size, 41, 12);
  struct Setting {
    int topk;
    float topp;
    float temperature;
  };
  for (const Setting setting : {Setting{3, 1.0f, 1.0f}, Setting{0, 0.6f, 1.0f}, Setting{5, 0.8f, 1.5f}}) {
    SCOPED_TRACE("top-k " + std::to_string(setting.topk) + " top-p " + std::to_string(setting.topp));
    TranslateOptions options = test::beam_options(1);
    options.sampling_topk = setting.topk;
    options.sampling_topp = setting.topp;
    options.sampling_temperature = setting.temperature;
    std::vector<TokenTranslation> results;
    size_t non_argmax = 0;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      options.seed = seed;
      translator.translate_ids(sources, options, results);
      for (size_t i = 0; i < sources.size(); ++i) {
        const auto& h = results[i].hypotheses[0];
        const auto steps = forced_log_probs(*model, translator.options(), sources[i], h.ids);
        double log_prob = 0.0;
        for (size_t t = 0; t < steps.size(); ++t) {
          const int32_t token = t < h.ids.size() ? h.ids[t] : model->config().eos_id;
          const std::vector<double>& lp = steps[t];
          // The token's rank (ties to the lower id).
          size_t rank = 0;
          for (size_t v = 0; v < lp.size(); ++v)
            rank += lp[v] > lp[token] || (lp[v] == lp[token] && v < static_cast<size_t>(token));
          if (setting.topk > 0) {
            EXPECT_LT(rank, static_cast<size_t>(setting.topk));
          }
          // The nucleus over the top-k candidates: the tokens before this one hold less than top-p.
          std::vector<double> sorted(lp.begin(), lp.end());
          std::sort(sorted.rbegin(), sorted.rend());
          const size_t k = setting.topk == 0 ? sorted.size() : static_cast<size_t>(setting.topk);
          double above = 0.0, total = 0.0;
          for (size_t r = 0; r < k; ++r) {
            const double p = std::exp((sorted[r] - sorted[0]) / setting.temperature);
            total += p;
            if (r < rank) above += p;
          }
          EXPECT_LT(above, setting.topp * total + 1e-9) << "token outside the nucleus";
          non_argmax += rank > 0;
          log_prob += lp[token];
        }
        EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * std::max(1.0, std::abs(log_prob)));
      }
    }
    EXPECT_GT(non_argmax, 0u) << "sampling never left the argmax";
  }
}

TEST(DecodingOptions, TextPrefixAndPieces) {
  auto model = default_model();
  Translator translator(model, small_translator());
  const auto lines = test::sample_sentences(3, 77);
  const std::vector<std::string> prefixes = {"the cat", "", "a"};
  TranslateOptions options = test::beam_options(2);
  const auto results = translator.translate(lines, options, prefixes);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto prefix_ids = model->encode_target(prefixes[i]);
    const auto& ids = results[i].hypotheses[0].ids;
    ASSERT_GE(ids.size(), prefix_ids.size());
    EXPECT_TRUE(std::equal(prefix_ids.begin(), prefix_ids.end(), ids.begin())) << "line " << i;
    const auto pieces = model->target_pieces(ids.data(), ids.size());
    EXPECT_EQ(model->target_piece_ids(pieces), ids);
  }
  EXPECT_THROW(model->source_piece_ids({"▁the", "no-such-piece"}), Error);
  EXPECT_THROW(translator.translate(lines, options, {"a"}), Error);
}

void expect_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no error, expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(DecodingOptions, BadOptionsAreClearErrors) {
  auto model = default_model();
  Translator translator(model, small_translator());
  const auto sources = test::random_source_ids(2, model->config().source_vocab_size, 42, 5);
  std::vector<TokenTranslation> results;
  auto with = [&](const std::function<void(TranslateOptions&)>& set,
                  const std::vector<std::vector<int32_t>>& prefixes = {}) {
    return [&, set, prefixes] {
      TranslateOptions options;
      set(options);
      translator.translate_ids(sources, options, results, prefixes);
    };
  };
  expect_error(with([](TranslateOptions& o) { o.sampling_topk = 5; }), "needs greedy search (beam 1), got beam 4");
  expect_error(with([](TranslateOptions& o) { o.beam = 1, o.sampling_topk = -1; }), "sampling_topk must be");
  expect_error(with([](TranslateOptions& o) { o.sampling_topp = 0.0f; }), "sampling_topp must be in (0, 1]");
  expect_error(with([](TranslateOptions& o) { o.sampling_temperature = 0.0f; }), "sampling_temperature must be");
  expect_error(with([](TranslateOptions& o) { o.repetition_penalty = -1.0f; }), "repetition_penalty must be");
  expect_error(with([](TranslateOptions& o) { o.length_penalty = -1.0f; }), "length_penalty must be a finite number, 0 or more");
  expect_error(with([](TranslateOptions& o) { o.no_repeat_ngram_size = -2; }), "no_repeat_ngram_size must be");
  expect_error(with([](TranslateOptions& o) { o.max_decoding_length = -1; }), "max_decoding_length must be");
  expect_error(with([](TranslateOptions& o) { o.max_batch_size = -1; }), "max_batch_size must be");
  expect_error(with([](TranslateOptions&) {}, {{5}}), "target_prefix has 1 entries for 2 sources");
  expect_error(with([](TranslateOptions&) {}, {{5}, {model->config().eos_id}}), "sentence 2: target prefix token id 3 is EOS");
  expect_error(with([](TranslateOptions&) {}, {{5}, {100000}}), "is outside the target vocabulary");
  expect_error(with([](TranslateOptions& o) { o.max_decoding_length = 2; }, {{5, 6, 7}, {}}),
               "sentence 1: a target prefix of 3 tokens is longer than its output limit of 2");
  expect_error([] { parse_batch_type("words"); }, "unknown batch type 'words'");
  TranslatorOptions all_cores = small_translator();
  all_cores.threads = 0;
  EXPECT_GE(Translator(model, all_cores).options().threads, 1);
  all_cores.threads = -1;
  expect_error([&] { Translator bad(model, all_cores); }, "threads must be 0 (every core) or more");
}

}  // namespace
}  // namespace xf
