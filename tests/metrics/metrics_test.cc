// xf_metrics against sacreBLEU: every expected figure here was computed by sacreBLEU 2.x from
// the committed sample (data/make_expected.py), never by the code under test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_data.h"
#include "xf/error.h"
#include "xf/metrics.h"

namespace xf::metrics {
namespace {

using testing::data_path;
using testing::expected;
using testing::expected_number;
using testing::expected_numbers;
using testing::write_temp_file;

constexpr double kTolerance = 1e-9;  // scores are 0..100; sacreBLEU's doubles agree far closer

struct Sample {
  std::vector<std::string> hypotheses;
  std::vector<std::vector<std::string>> references;  // [hypothesis][reference]
};

Sample parallel_sample(bool two_references) {
  std::vector<std::string> paths = {data_path("ref.a.txt")};
  if (two_references) paths.push_back(data_path("ref.b.txt"));
  std::vector<std::vector<std::string>> files;
  for (const auto& path : paths) files.push_back(read_text_lines(path));
  return {read_text_lines(data_path("hyp.txt")), references_per_line(files, paths)};
}

Sample tsv_sample() {
  GroupedReferences grouped = group_references_by_source(data_path("refs.tsv"));
  return {read_text_lines(data_path("hyp.tsv-sources.txt")), std::move(grouped.references)};
}

void expect_bleu_matches(const BleuScore& bleu, const std::string& key) {
  EXPECT_NEAR(bleu.score, expected_number(key + ".score"), kTolerance);
  const std::vector<double> precisions = expected_numbers(key + ".precisions");
  const std::vector<double> counts = expected_numbers(key + ".counts");
  const std::vector<double> totals = expected_numbers(key + ".totals");
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    EXPECT_NEAR(bleu.precisions[n], precisions.at(n), kTolerance) << "order " << n + 1;
    EXPECT_EQ(bleu.stats.correct[n], counts.at(n)) << "order " << n + 1;
    EXPECT_EQ(bleu.stats.total[n], totals.at(n)) << "order " << n + 1;
  }
  EXPECT_NEAR(bleu.brevity_penalty, expected_number(key + ".bp"), kTolerance);
  EXPECT_NEAR(bleu.ratio, expected_number(key + ".ratio"), kTolerance);
  EXPECT_EQ(bleu.stats.hyp_len, expected_number(key + ".hyp_len"));
  EXPECT_EQ(bleu.stats.ref_len, expected_number(key + ".ref_len"));
}

// ---- 13a tokenization ----------------------------------------------------------------------------

TEST(Tokenize13a, MatchesSacrebleuOnEdgeCases) {
  const std::vector<std::string> cases = read_text_lines(data_path("tokenize_13a.cases.txt"));
  const std::vector<std::string> tokenized = read_text_lines(data_path("tokenize_13a.expected.txt"));
  ASSERT_EQ(cases.size(), tokenized.size());
  ASSERT_GT(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(tokenize_13a(cases[i]), tokenized[i]) << "case line " << i + 1 << ": '" << cases[i] << "'";
}

TEST(Tokenize13a, JoinsLinesLikeSacrebleu) {
  // Strings from: python3 -c "from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a as T;
  //   print(repr(T()('well-\nknown fact\nhere')))" and likewise for the others.
  EXPECT_EQ(tokenize_13a("well-\nknown fact\nhere"), "wellknown fact here");
  EXPECT_EQ(tokenize_13a("a -\nb"), "a b");
  EXPECT_EQ(tokenize_13a("5-\n6"), "56");
  EXPECT_EQ(tokenize_13a("x<skipped>-\ny"), "xy");
}

// ---- Text helpers --------------------------------------------------------------------------------

TEST(Utf8, AcceptsWhatPythonDecodesAndRejectsTheRest) {
  // The verdicts of Python's bytes.decode('utf-8') on the same bytes.
  EXPECT_TRUE(is_valid_utf8("plain ASCII"));
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_TRUE(is_valid_utf8("\xE2\x80\xAF"));      // U+202F
  EXPECT_TRUE(is_valid_utf8("\xEF\xBF\xBF"));      // U+FFFF
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(is_valid_utf8("\xE0\x9F\xBF"));      // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("ab\xE2\x82"));  // truncated
  EXPECT_FALSE(is_valid_utf8("\x80"));        // lone continuation byte
  try {
    check_utf8("ok \xFF", "hyp.txt:7");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "hyp.txt:7: invalid UTF-8 at byte 4");
  }
}

TEST(RstripWhitespace, StripsPythonWhitespaceOnly) {
  EXPECT_EQ(rstrip_whitespace("abc \t\xC2\xA0\xE2\x80\xAF\xE3\x80\x80\r"), "abc");  // NBSP, NNBSP, U+3000
  EXPECT_EQ(rstrip_whitespace("abc\xE2\x80\x8B"), "abc\xE2\x80\x8B");  // U+200B is no space in Python
  EXPECT_EQ(rstrip_whitespace("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(rstrip_whitespace(" \xC2\x85"), "");
}

// ---- Corpus and sentence scores ------------------------------------------------------------------

TEST(CorpusBleu, OneReferenceMatchesSacrebleu) {
  const Sample sample = parallel_sample(false);
  expect_bleu_matches(corpus_bleu(sample.hypotheses, sample.references), "corpus_bleu.single");
}

TEST(CorpusBleu, TwoReferencesMatchSacrebleu) {
  const Sample sample = parallel_sample(true);
  expect_bleu_matches(corpus_bleu(sample.hypotheses, sample.references), "corpus_bleu.multi");
}

TEST(CorpusBleu, ReferencesGroupedFromTsvMatchSacrebleu) {
  const Sample sample = tsv_sample();
  expect_bleu_matches(corpus_bleu(sample.hypotheses, sample.references), "corpus_bleu.tsv");
}

TEST(CorpusChrf, MatchesSacrebleu) {
  const Sample single = parallel_sample(false), multi = parallel_sample(true), tsv = tsv_sample();
  EXPECT_NEAR(corpus_chrf(single.hypotheses, single.references), expected_number("corpus_chrf.single"), kTolerance);
  EXPECT_NEAR(corpus_chrf(multi.hypotheses, multi.references), expected_number("corpus_chrf.multi"), kTolerance);
  EXPECT_NEAR(corpus_chrf(tsv.hypotheses, tsv.references), expected_number("corpus_chrf.tsv"), kTolerance);
}

TEST(ScoreText, FormatsLikeSacrebleu) {
  for (const char* key : {"single", "multi"}) {
    const Sample sample = parallel_sample(std::string(key) == "multi");
    const std::string text = corpus_bleu(sample.hypotheses, sample.references).to_string() + "\n" +
                             chrf_to_string(corpus_chrf(sample.hypotheses, sample.references));
    EXPECT_EQ(text, expected().at(std::string("text.") + key));
  }
}

TEST(SentenceScores, MatchSacrebleuWithAndWithoutEffectiveOrder) {
  const Sample sample = parallel_sample(true);
  int checked = 0;
  for (size_t i = 0; i < sample.hypotheses.size(); ++i) {
    const std::string index = std::to_string(i);
    if (!expected().count("sentence_bleu." + index)) continue;
    const BleuStats stats = bleu_sentence_stats(sample.hypotheses[i], sample.references[i]);
    EXPECT_NEAR(bleu_from_stats(stats).score, expected_number("sentence_bleu." + index), kTolerance) << "line " << i;
    EXPECT_NEAR(bleu_from_stats(stats, true).score, expected_number("sentence_bleu_effective." + index), kTolerance)
        << "line " << i;
    EXPECT_NEAR(chrf_from_stats(chrf_sentence_stats(sample.hypotheses[i], sample.references[i])),
                expected_number("sentence_chrf." + index), kTolerance)
        << "line " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

TEST(SentenceScores, StatisticsAddUpToTheCorpus) {
  const Sample sample = parallel_sample(true);
  BleuStats bleu_total;
  ChrfStats chrf_total;
  for (size_t i = 0; i < sample.hypotheses.size(); ++i) {
    bleu_total += bleu_sentence_stats(sample.hypotheses[i], sample.references[i]);
    chrf_total += chrf_sentence_stats(sample.hypotheses[i], sample.references[i]);
  }
  EXPECT_NEAR(bleu_from_stats(bleu_total).score, expected_number("corpus_bleu.multi.score"), kTolerance);
  EXPECT_NEAR(chrf_from_stats(chrf_total), expected_number("corpus_chrf.multi"), kTolerance);
}

TEST(CorpusScores, RejectMissingOrMismatchedReferences) {
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), Error);
  EXPECT_THROW(corpus_chrf({"a", "b"}, {{"a"}}), Error);
  EXPECT_THROW(corpus_bleu({"a"}, {{}}), Error);
  EXPECT_THROW(corpus_chrf({"a"}, {{}}), Error);
}

// ---- Scores by source length ---------------------------------------------------------------------

TEST(CountWords, SplitsOnPythonWhitespace) {
  EXPECT_EQ(count_words(""), 0);
  EXPECT_EQ(count_words("   "), 0);
  EXPECT_EQ(count_words("Hello."), 1);
  EXPECT_EQ(count_words("  It costs\t3.50  euros. "), 4);
  EXPECT_EQ(count_words("a\u00a0b\u202fc"), 3);  // no-break spaces split, as in str.split()
  EXPECT_EQ(count_words("caf\u00e9 d\u00e9j\u00e0"), 2);
}

std::string words(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += (i ? " w" : "w") + std::to_string(i);
  return text;
}

// Sources of 0, 5, 6, 10, 11, 25 and 26 words: each edge on both sides. Each bucket is scored
// as the corpus of its own sentences; a bucket without sentences is returned empty.
TEST(ScoresByLength, BucketEdgesAndEachBucketScoredAsItsOwnCorpus) {
  const Sample sample = parallel_sample(true);
  const std::vector<int> lengths = {0, 5, 6, 10, 11, 25, 26, 3, 7, 30};
  std::vector<std::string> sources, hypotheses;
  std::vector<std::vector<std::string>> references;
  for (size_t i = 0; i < lengths.size(); ++i) {
    sources.push_back(words(lengths[i]));
    hypotheses.push_back(sample.hypotheses[i]);
    references.push_back(sample.references[i]);
  }
  const auto buckets = scores_by_source_length(sources, hypotheses, references);
  ASSERT_EQ(buckets.size(), 5u);
  const std::vector<std::string> labels = {"1-5", "6-10", "11-15", "16-25", "26+"};
  const std::vector<std::vector<size_t>> members = {{0, 1, 7}, {2, 3, 8}, {4}, {5}, {6, 9}};
  for (size_t b = 0; b < 5; ++b) {
    EXPECT_EQ(buckets[b].label(), labels[b]);
    ASSERT_EQ(buckets[b].sentences, members[b].size()) << labels[b];
    std::vector<std::string> bucket_hypotheses;
    std::vector<std::vector<std::string>> bucket_references;
    for (size_t i : members[b]) {
      bucket_hypotheses.push_back(hypotheses[i]);
      bucket_references.push_back(references[i]);
    }
    EXPECT_EQ(buckets[b].bleu.score, corpus_bleu(bucket_hypotheses, bucket_references).score) << labels[b];
    EXPECT_EQ(buckets[b].chrf, corpus_chrf(bucket_hypotheses, bucket_references)) << labels[b];
  }
  EXPECT_NE(buckets[0].bleu.score, buckets[1].bleu.score);  // the buckets hold different sentences

  // Only short sources: the longer buckets are there, empty.
  const auto short_only = scores_by_source_length({words(2), words(9)}, {hypotheses[0], hypotheses[1]},
                                                  {references[0], references[1]});
  ASSERT_EQ(short_only.size(), 5u);
  EXPECT_EQ(short_only[0].sentences, 1u);
  EXPECT_EQ(short_only[1].sentences, 1u);
  for (size_t b = 2; b < 5; ++b) EXPECT_EQ(short_only[b].sentences, 0u) << labels[b];

  // Edges of one's own; bad edges and counts are errors.
  const auto custom = scores_by_source_length(sources, hypotheses, references, {6});
  ASSERT_EQ(custom.size(), 2u);
  EXPECT_EQ(custom[0].label(), "1-6");
  EXPECT_EQ(custom[1].label(), "7+");
  EXPECT_EQ(custom[0].sentences, 4u);  // 0, 5, 6, 3 words
  EXPECT_THROW(scores_by_source_length(sources, hypotheses, references, {5, 5}), Error);
  EXPECT_THROW(scores_by_source_length(sources, hypotheses, references, {0}), Error);
  EXPECT_THROW(scores_by_source_length({"a"}, hypotheses, references), Error);
}

// ---- Files ---------------------------------------------------------------------------------------

TEST(ReadTextLines, SplitsOnNewlinesOnly) {
  using Lines = std::vector<std::string>;
  EXPECT_EQ(read_text_lines(write_temp_file("crlf", "a\r\nb")), (Lines{"a", "b"}));
  EXPECT_EQ(read_text_lines(write_temp_file("blank", "a\n\n")), (Lines{"a", ""}));
  EXPECT_EQ(read_text_lines(write_temp_file("empty", "")), Lines{});
  // U+2028 and U+0085 are line breaks for Python's splitlines(), not for sacreBLEU's reader.
  EXPECT_EQ(read_text_lines(write_temp_file("seps", "x\xE2\x80\xA8y\xC2\x85z\rw\n")), (Lines{"x\xE2\x80\xA8y\xC2\x85z\rw"}));
}

TEST(ReadTextLines, NamesTheFileAndLineAtFault) {
  const std::string path = write_temp_file("bad_utf8", "fine\nbad \xC3\x28 byte\n");
  try {
    read_text_lines(path);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ":2: invalid UTF-8 at byte 5");
  }
  try {
    read_text_lines("/nonexistent/xf-metrics-test.txt");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open /nonexistent/xf-metrics-test.txt: No such file or directory");
  }
}

TEST(GroupReferencesBySource, KeepsFirstAppearanceOrder) {
  const GroupedReferences grouped = group_references_by_source(data_path("refs.tsv"));
  // data/refs.tsv: "Stop!" rows 1-3 and 7, "I'm hit!" rows 4, 5 and 11, ...
  const std::vector<std::string> sources = {"Stop!", "I'm hit!", "Hello.", "It costs 3.50 euros.",
                                            "Where is the station?", "Nothing."};
  EXPECT_EQ(grouped.sources, sources);
  ASSERT_EQ(grouped.references.size(), sources.size());
  EXPECT_EQ(grouped.references[0], (std::vector<std::string>{"Ça suffit !", "Stop !", "Arrête-toi !", "Arrête !"}));
  EXPECT_EQ(grouped.references[1].size(), 3u);
  EXPECT_EQ(grouped.references[5], std::vector<std::string>{"Rien."});
}

TEST(GroupReferencesBySource, HonoursColumnsAndRejectsShortRows) {
  const std::string path = write_temp_file("cols.tsv", "id1\tr1\tS\nid2\tr2\tS\nid3\tr3\tT\n");
  const GroupedReferences grouped = group_references_by_source(path, 2, 1);
  EXPECT_EQ(grouped.sources, (std::vector<std::string>{"S", "T"}));
  EXPECT_EQ(grouped.references[0], (std::vector<std::string>{"r1", "r2"}));

  const std::string short_rows = write_temp_file("short.tsv", "a\tb\nno tab here\n");
  try {
    group_references_by_source(short_rows);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), short_rows + ":2: expected at least 2 tab-separated columns, found 1");
  }
  EXPECT_THROW(group_references_by_source(path, 1, 1), Error);
}

TEST(ReferencesPerLine, TransposesAndChecksLineCounts) {
  const auto per_line = references_per_line({{"a1", "a2"}, {"b1", "b2"}}, {"a.txt", "b.txt"});
  EXPECT_EQ(per_line, (std::vector<std::vector<std::string>>{{"a1", "b1"}, {"a2", "b2"}}));
  try {
    references_per_line({{"a1", "a2"}, {"b1"}}, {"a.txt", "b.txt"});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "reference file b.txt has 1 lines but a.txt has 2");
  }
}

}  // namespace
}  // namespace xf::metrics
