// Lexical shortlists at decoding time: which target ids a batch's output layer covers (Marian's
// selection), the output layer, softmax and top-k over those rows alone with the ids mapped
// back, a shortlist of every target giving the full vocabulary's outputs, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend.h"
#include "backend_probe.h"
#include "error_of.h"
#include "memory_plan.h"
#include "output_shortlist.h"
#include "search_support.h"
#include "tiny_model.h"
#include "xf/format/shortlist.h"
#include "xf/kernels_cpu/isa.h"
#include "xf/translator.h"
#include "xf/weight_layout.h"

namespace xf {
namespace {

// Source id s lists `per_source` pseudo-random targets.
LexicalShortlist random_lists(uint32_t source_vocab, uint32_t target_vocab, uint32_t first_num, uint32_t per_source,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  LexicalShortlist lists;
  lists.first_num = first_num;
  lists.best_num = per_source;
  lists.offsets.assign(1, 0);
  for (uint32_t s = 0; s < source_vocab; ++s) {
    std::set<uint32_t> targets;
    while (targets.size() < per_source) targets.insert(rng() % target_vocab);
    lists.targets.insert(lists.targets.end(), targets.begin(), targets.end());
    lists.offsets.push_back(lists.targets.size());
  }
  return lists;
}

// Which ids of a target vocabulary of `size` are 1 in mask.
std::vector<int32_t> ids_in(const uint8_t* mask, uint32_t size) {
  std::vector<int32_t> ids;
  for (uint32_t i = 0; i < size; ++i)
    if (mask[i]) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

TEST(ShortlistSelection, IsMarianGenerateForEachSentenceAloneAndTheirUnion) {
  LexicalShortlist lists;
  lists.first_num = 3;
  lists.offsets = {0, 0, 0, 0, 0, 0, 2, 3, 5};  // 5 -> {20, 30}; 6 -> {9}; 7 -> {11, 40}
  lists.targets = {20, 30, 9, 11, 40};
  // Two sentences of stride 4: [5, 6, 3(EOS), pad], [7, 3(EOS), 7(beyond the length), pad].
  const std::vector<int32_t> source = {5, 6, 3, 0, 7, 3, 6, 0};
  const std::vector<int32_t> lengths = {3, 2};
  runtime::OutputShortlist separate(lists, 50, /*shared_vocabulary=*/false, 2);
  // Each sentence's own (Marian's generate for it alone): 0..2 and its candidates, padded with
  // the first ids from first_num on not in yet to a multiple of 8; the batch: their union.
  EXPECT_EQ(separate.select(source.data(), lengths.data(), 2, 4),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 9, 11, 20, 30, 40}));
  EXPECT_EQ(ids_in(separate.sentence_targets(0), 50), (std::vector<int32_t>{0, 1, 2, 3, 4, 9, 20, 30}));
  EXPECT_EQ(ids_in(separate.sentence_targets(1), 50), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 11, 40}));
  // With one vocabulary the source ids come in too: the first sentence's 0..2, 3, 5, 6, 9, 20, 30
  // padded with 4, 7, 8, 10..13 to 16; the second's 0..3, 7, 11, 40 with 4 to 8.
  runtime::OutputShortlist shared(lists, 50, /*shared_vocabulary=*/true, 2);
  EXPECT_EQ(shared.select(source.data(), lengths.data(), 2, 4),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 30, 40}));
  EXPECT_EQ(ids_in(shared.sentence_targets(0), 50),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 30}));
  EXPECT_EQ(ids_in(shared.sentence_targets(1), 50), (std::vector<int32_t>{0, 1, 2, 3, 4, 7, 11, 40}));
  // One sentence: only its own candidates; a source id past the lists' end has none.
  const std::vector<int32_t> one = {6, 45, 3, 0};
  const std::vector<int32_t> one_length = {3};
  EXPECT_EQ(separate.select(one.data(), one_length.data(), 1, 4), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 9}));
  EXPECT_EQ(ids_in(separate.sentence_targets(0), 50), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 9}));
}

std::shared_ptr<const Model> model_with_shortlist(const std::optional<LexicalShortlist>& lists, const std::string& name,
                                                  bool with_tokenizer = false) {
  test::TinyModelOptions options = test::TinyModelOptions::without_tokenizer(9);
  options.with_tokenizer = with_tokenizer;
  options.shortlist = lists;
  return Model::open(test::tiny_model_file(options, name));
}

// The step's top-k over a shortlist against the full vocabulary's logits of the same step: the
// log-softmax over the selected ids alone, its best ids mapped back to token ids.
TEST(ShortlistOutput, TopKIsTheLogSoftmaxOverTheSelectedRowsWithTokenIds) {
  auto model = model_with_shortlist(std::nullopt, "plain");
  const ModelConfig& c = model->config();
  TranslatorOptions options = test::plan_options(2, 4);
  options.max_source_len = 8;
  runtime::MemoryPlan plan = runtime::make_memory_plan(c, options);
  plan.output_shortlist = true;
  auto backend = runtime::make_cpu_backend(*model, plan, 2);
  const std::vector<int32_t> source = {5, 9, 3, 0, 0, 0, 0, 0, 7, 11, 12, 3, 0, 0, 0, 0};
  const std::vector<int32_t> lengths = {3, 4};
  const int64_t beam = 4, rows = 2 * beam, k = 4;
  std::vector<int32_t> selected = {0, 2, 3, 6, 7, 13, 21, 22, 30, 41, 44, 47};
  std::vector<int32_t> tokens(rows, c.bos_id);
  std::vector<float> full(rows * c.target_vocab_size), values(rows * k), spread(rows * c.target_vocab_size);
  std::vector<int32_t> ids(rows * k);
  for (int64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // The full vocabulary's logits for this step, then the same step over the shortlist.
    backend->encode(source.data(), lengths.data(), 2, 8);
    for (int64_t s = 0; s <= step; ++s) {
      backend->decode_step(tokens.data(), beam, s);
      if (s < step) backend->reorder_cache(std::vector<int32_t>{0, 0, 1, 2, 4, 5, 5, 6}.data(), s);
    }
    runtime::probe(*backend).copy_logits(full.data());
    backend->encode(source.data(), lengths.data(), 2, 8);
    backend->restrict_output(selected.data(), static_cast<int64_t>(selected.size()));
    for (int64_t s = 0; s <= step; ++s) {
      backend->decode_step(tokens.data(), beam, s);
      if (s < step) backend->reorder_cache(std::vector<int32_t>{0, 0, 1, 2, 4, 5, 5, 6}.data(), s);
    }
    runtime::probe(*backend).copy_logits(spread.data());
    backend->top_k(nullptr, k, values.data(), ids.data());
    for (int64_t r = 0; r < rows; ++r) {
      double top = -1e300, total = 0.0;
      for (int32_t id : selected) top = std::max(top, static_cast<double>(full[r * c.target_vocab_size + id]));
      for (int32_t id : selected) total += std::exp(full[r * c.target_vocab_size + id] - top);
      std::vector<std::pair<double, int32_t>> expected;
      for (int32_t id : selected) expected.push_back({full[r * c.target_vocab_size + id] - top - std::log(total), id});
      std::sort(expected.begin(), expected.end(), [](auto a, auto b) { return a.first > b.first; });
      for (int64_t i = 0; i < k; ++i) {
        EXPECT_EQ(ids[r * k + i], expected[i].second) << "row " << r << " rank " << i;
        EXPECT_NEAR(values[r * k + i], expected[i].first, 1e-4) << "row " << r << " rank " << i;
      }
      // The logits the search may read: the selected ones, -inf elsewhere.
      for (int32_t v = 0; v < static_cast<int32_t>(c.target_vocab_size); ++v) {
        const bool in = std::binary_search(selected.begin(), selected.end(), v);
        if (in)
          EXPECT_NEAR(spread[r * c.target_vocab_size + v], full[r * c.target_vocab_size + v], 1e-4) << r << " " << v;
        else
          EXPECT_EQ(spread[r * c.target_vocab_size + v], -std::numeric_limits<float>::infinity()) << r << " " << v;
      }
    }
    for (int64_t r = 0; r < rows; ++r) tokens[r] = 4 + static_cast<int32_t>((r + step) % 7);
  }
}

// A shortlist that lists every target for every source gives the full vocabulary's outputs
// (through the shortlist's own path: its products, softmax and top-k), greedy and beam, and with
// an option that has the search adjust the logits.
TEST(ShortlistOutput, AShortlistOfEveryTargetGivesTheFullVocabularysOutputs) {
  const uint32_t vocab = test::TinyModelOptions{}.vocab_size;
  auto model = model_with_shortlist(random_lists(vocab, vocab, 0, vocab, 1), "every_target");
  ASSERT_TRUE(model->file().shortlist().has_value());
  TranslatorOptions with = test::plan_options(8, 4), without = with;
  with.max_source_len = without.max_source_len = 24;
  without.shortlist = "none";
  Translator shortlisted(model, with), full(model, without);
  const auto sources = test::random_source_ids(12, vocab, 4, 20);
  TranslateOptions penalty = test::beam_options(4, 4);
  penalty.repetition_penalty = 1.5f;
  for (const TranslateOptions& options : {test::beam_options(1), test::beam_options(4, 4), penalty}) {
    std::vector<TokenTranslation> a, b;
    shortlisted.translate_ids(sources, options, a);
    full.translate_ids(sources, options, b);
    for (size_t i = 0; i < sources.size(); ++i)
      for (size_t h = 0; h < b[i].hypotheses.size(); ++h) {
        EXPECT_EQ(a[i].hypotheses[h].ids, b[i].hypotheses[h].ids) << "beam " << options.beam << " sentence " << i;
        EXPECT_NEAR(a[i].hypotheses[h].score, b[i].hypotheses[h].score, 1e-4) << "beam " << options.beam << " " << i;
      }
  }
}

// A narrow shortlist: every output token is one of its batch's selected ids, and the outputs
// change (the full vocabulary's best tokens are not all in it).
TEST(ShortlistOutput, OutputsStayInsideTheSelection) {
  const uint32_t vocab = test::TinyModelOptions{}.vocab_size;
  const LexicalShortlist lists = random_lists(vocab, vocab, 4, 3, 2);
  auto model = model_with_shortlist(lists, "narrow");
  TranslatorOptions options = test::plan_options(1, 4);
  options.max_source_len = 24;
  Translator translator(model, options);
  runtime::OutputShortlist selection(lists, vocab, true, 1);
  const auto sources = test::random_source_ids(10, vocab, 6, 20);
  for (const auto& source : sources) {
    std::vector<int32_t> row = source;
    row.push_back(model->config().eos_id);
    const int32_t length = static_cast<int32_t>(row.size());
    const std::vector<int32_t> allowed = selection.select(row.data(), &length, 1, length);
    std::vector<TokenTranslation> results;
    translator.translate_ids({source}, test::beam_options(4, 4), results);
    for (const TokenHypothesis& h : results[0].hypotheses)
      for (int32_t id : h.ids) EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), id)) << id;
  }
}

// A sentence decodes the same alone and in a batch under a narrow shortlist: its rows' softmax and
// top-k run over its own selection, not the batch's union (with the union, greedy picked ids that
// only other sentences' sources bring in). Greedy, beam 4, and a repetition penalty (the search
// then adjusts spread logits).
TEST(ShortlistOutput, ASentenceDecodesAloneAsInABatch) {
  const uint32_t vocab = test::TinyModelOptions{}.vocab_size;
  auto model = model_with_shortlist(random_lists(vocab, vocab, 4, 3, 5), "alone_or_batch");
  TranslatorOptions options = test::plan_options(12, 4);
  options.max_source_len = 24;
  Translator translator(model, options);
  const auto sources = test::random_source_ids(12, vocab, 4, 20);
  TranslateOptions penalty = test::beam_options(4, 4);
  penalty.repetition_penalty = 1.5f;
  const bool f32_rows_exact = cpu::cpu_isa() == cpu::CpuIsa::avx512 || cpu::cpu_isa() == cpu::CpuIsa::avx512_vnni;
  for (const TranslateOptions& decoding : {test::beam_options(1), test::beam_options(4, 4), penalty}) {
    std::vector<TokenTranslation> batch;
    translator.translate_ids(sources, decoding, batch);
    for (size_t i = 0; i < sources.size(); ++i) {
      std::vector<TokenTranslation> alone;
      translator.translate_ids({sources[i]}, decoding, alone);
      ASSERT_EQ(alone[0].hypotheses.size(), batch[i].hypotheses.size());
      for (size_t h = 0; h < alone[0].hypotheses.size(); ++h) {
        EXPECT_EQ(alone[0].hypotheses[h].ids, batch[i].hypotheses[h].ids) << "beam " << decoding.beam << " sentence " << i;
        // Bit for bit where one f32 row's sums do not depend on the row count (AVX-512); below,
        // xf's AVX2 panel kernel and oneDNN's SSE4.1 gemm sum a row in an order that does (open).
        if (f32_rows_exact)
          EXPECT_EQ(alone[0].hypotheses[h].score, batch[i].hypotheses[h].score) << "beam " << decoding.beam << " " << i;
        else
          EXPECT_NEAR(alone[0].hypotheses[h].score, batch[i].hypotheses[h].score,
                      1e-5f * std::abs(alone[0].hypotheses[h].score)) << "beam " << decoding.beam << " " << i;
      }
    }
  }
}

// The product's layout of a batch's shortlisted columns: a permutation of the union, each
// sentence's columns inside its runs (whole panels, ascending, apart), and grouped: sentences
// whose selections share only the first ids each cover the shared panels and their own
// (in the union's id order their ids interleave across most panels).
TEST(ShortlistLayout, EachSentencesColumnsLieInFewRunsOfAPermutationOfTheUnion) {
  const int64_t vocab = 400, sentences = 5, shared = 20;
  std::mt19937 rng(7);
  std::vector<uint8_t> targets(sentences * vocab, 0);
  for (int64_t s = 0; s < sentences; ++s) {
    std::fill(targets.begin() + s * vocab, targets.begin() + s * vocab + shared, 1);
    for (int i = 0; i < 40; ++i) targets[s * vocab + shared + (rng() % ((vocab - shared) / sentences)) * sentences + s] = 1;
  }
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    bool any = false;
    for (int64_t s = 0; s < sentences; ++s) any |= targets[s * vocab + id] != 0;
    if (any) ids.push_back(id);
  }
  const int64_t count = static_cast<int64_t>(ids.size());
  runtime::ShortlistColumnLayout layout(8, vocab);
  layout.arrange(ids.data(), count, targets.data(), sentences);
  for (int64_t s = 0; s < sentences; ++s) {
    std::vector<int32_t> columns;
    for (int64_t j = 0; j < count; ++j)
      if (targets[s * vocab + ids[j]]) columns.push_back(layout.column_of(j));
    layout.add_runs(s, columns.data(), static_cast<int64_t>(columns.size()));
  }
  std::vector<int32_t> laid_out(layout.ids(), layout.ids() + count);
  for (int64_t j = 0; j < count; ++j) ASSERT_EQ(laid_out[layout.column_of(j)], ids[j]) << "union entry " << j;
  std::sort(laid_out.begin(), laid_out.end());
  EXPECT_EQ(laid_out, ids);
  for (int64_t s = 0; s < sentences; ++s) {
    const int32_t* runs = layout.runs() + 2 * layout.run_offsets()[s];
    const int64_t run_count = layout.run_offsets()[s + 1] - layout.run_offsets()[s];
    int64_t own = 0, covered = 0;
    for (int64_t i = 0; i < run_count; ++i) {
      EXPECT_EQ(runs[2 * i] % kPanelRows, 0);
      EXPECT_LT(runs[2 * i], runs[2 * i + 1]);
      EXPECT_LE(runs[2 * i + 1], count);
      if (i > 0) EXPECT_LT(runs[2 * i - 1], runs[2 * i]) << "runs apart and ascending";
      covered += runs[2 * i + 1] - runs[2 * i];
    }
    for (int64_t j = 0; j < count; ++j) {
      if (!targets[s * vocab + ids[j]]) continue;
      ++own;
      bool inside = false;
      for (int64_t i = 0; i < run_count; ++i) inside |= layout.column_of(j) >= runs[2 * i] && layout.column_of(j) < runs[2 * i + 1];
      EXPECT_TRUE(inside) << "sentence " << s << " id " << ids[j];
    }
    const int64_t panels_needed = (shared + kPanelRows - 1) / kPanelRows + (own - shared + kPanelRows - 1) / kPanelRows + 1;
    EXPECT_LE(covered, panels_needed * kPanelRows) << "sentence " << s << ": " << own << " columns of " << count;
  }
}

TEST(ShortlistFiles, BinaryAndTextFilesLoadAndBadOnesAreRefusedByName) {
  const std::string dir = test::make_temp_dir("shortlist_files");
  auto model = model_with_shortlist(std::nullopt, "with_tokenizer", /*with_tokenizer=*/true);
  const ModelConfig& c = model->config();
  TranslatorOptions options = test::plan_options(2, 2);
  options.max_source_len = 32;
  // Binary: Marian's layout, loaded and used.
  const std::string binary = dir + "/lex.s2t.bin";
  {
    const std::vector<uint8_t> bytes = binary_shortlist_bytes(random_lists(c.source_vocab_size, c.target_vocab_size, 8, 4, 3));
    std::ofstream(binary, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  options.shortlist = binary;
  EXPECT_NO_THROW(Translator(model, options).translate({"a b c"}));
  // Text: pieces of the model's vocabularies.
  const std::string text = dir + "/lex.s2t";
  {
    const std::vector<int32_t> ids = {4, 5, 6, 7};
    const auto pieces = model->source_pieces(ids.data(), ids.size());
    std::ofstream out(text);
    for (const auto& target : pieces)
      for (const auto& source : pieces) out << target << " " << source << " 0.5\n";
  }
  options.shortlist = text;
  options.shortlist_best = 2;
  EXPECT_NO_THROW(Translator(model, options).translate({"a b c"}));
  // Refusals: one line naming the file and the problem.
  options.shortlist = dir + "/absent.bin";
  EXPECT_EQ(test::error_of([&] { Translator(model, options); }),
            "shortlist " + dir + "/absent.bin: cannot open: No such file or directory");
  {
    LexicalShortlist wrong = random_lists(c.source_vocab_size, c.target_vocab_size + 100, 8, 4, 3);
    wrong.targets[0] = c.target_vocab_size + 50;
    std::sort(wrong.targets.begin(), wrong.targets.begin() + 4);
    const std::vector<uint8_t> bytes = binary_shortlist_bytes(wrong);
    std::ofstream(binary, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  options.shortlist = binary;
  const std::string message = test::error_of([&] { Translator(model, options); });
  EXPECT_EQ(message.rfind("shortlist " + binary + ": shortlist target id ", 0), 0u) << message;
  EXPECT_NE(message.find("is outside the target vocabulary (" + std::to_string(c.target_vocab_size) +
                         ") (does it belong to this model?)"),
            std::string::npos)
      << message;
  options.shortlist = text;
  options.shortlist_best = 0;
  EXPECT_EQ(test::error_of([&] { Translator(model, options); }), "shortlist_best must be 1 or more, got 0");
  // A text shortlist needs the model's pieces.
  auto no_tokenizer = model_with_shortlist(std::nullopt, "no_tokenizer");
  options.shortlist_best = 2;
  EXPECT_EQ(test::error_of([&] { Translator(no_tokenizer, options); }),
            "shortlist " + text + ": a text shortlist needs the model's vocabularies (the model has no tokenizer)");
}

}  // namespace
}  // namespace xf
