// Parallel text parsing: TSV, the Hugging Face CSV export (RFC 4180 quoting), directions,
// UTF-8 validation and the one-line errors that name file and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "error_of.h"
#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

using test::error_of;

TEST(DataCorpus, TsvReadsPairsInFileOrder) {
  CorpusLanguages en_fr;
  auto pairs = parse_tsv("Go.\tVa !\r\nHi.\tSalut !\n\nRun!\tCours !", "t.tsv", en_fr);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].source, "Go.");
  EXPECT_EQ(pairs[0].target, "Va !");  // '\r' stripped
  EXPECT_EQ(pairs[1].source, "Hi.");
  EXPECT_EQ(pairs[2].target, "Cours !");  // last line without '\n'
}

TEST(DataCorpus, TsvReverseDirectionSwapsColumns) {
  CorpusLanguages fr_en;
  fr_en.source = "fr";
  fr_en.target = "en";
  auto pairs = parse_tsv("Go.\tVa !\n", "t.tsv", fr_en);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].source, "Va !");
  EXPECT_EQ(pairs[0].target, "Go.");
}

TEST(DataCorpus, TsvRejectsLanguagesItDoesNotHold) {
  CorpusLanguages de;
  de.source = "de";
  EXPECT_NE(error_of([&] { parse_tsv("a\tb\n", "t.tsv", de); }).find("t.tsv"), std::string::npos);
}

CorpusLanguages strict_en_fr() {
  CorpusLanguages languages;
  languages.strict = true;
  return languages;
}

TEST(DataCorpus, TsvWrongFieldCountNamesFileAndLine) {
  const CorpusLanguages en_fr = strict_en_fr();
  EXPECT_EQ(error_of([&] { parse_tsv("a\tb\nno tab here\n", "x.tsv", en_fr); }),
            "x.tsv:2: expected two tab-separated fields, found one");
  EXPECT_EQ(error_of([&] { parse_tsv("a\tb\tc\n", "x.tsv", en_fr); }),
            "x.tsv:1: expected two tab-separated fields, found more");
}

TEST(DataCorpus, BadUtf8NamesFileAndLine) {
  const CorpusLanguages en_fr = strict_en_fr();
  // Line 3 holds a lone continuation byte.
  std::string text = "ok\tbien\nca\xC3\xA7\tfine\nbad \x80 byte\tmal\n";
  EXPECT_EQ(error_of([&] { parse_tsv(text, "data.tsv", en_fr); }), "data.tsv:3: invalid UTF-8");
}

TEST(DataCorpus, CsvQuotingCommasNewlinesAndDoubledQuotes) {
  CorpusLanguages en_fr;
  std::string text =
      "English words/sentences,French words/sentences\r\n"
      "Hi.,Salut!\r\n"
      "\"Yes, sir.\",\"Oui, monsieur.\"\n"
      "\"He said \"\"no\"\".\",\"Il a dit \"\"non\"\".\"\n"
      "\"two\nlines\",deux\n";
  auto pairs = parse_csv(text, "hf.csv", en_fr);
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_EQ(pairs[0].source, "Hi.");
  EXPECT_EQ(pairs[0].target, "Salut!");
  EXPECT_EQ(pairs[1].source, "Yes, sir.");
  EXPECT_EQ(pairs[1].target, "Oui, monsieur.");
  EXPECT_EQ(pairs[2].source, "He said \"no\".");
  EXPECT_EQ(pairs[2].target, "Il a dit \"non\".");
  EXPECT_EQ(pairs[3].source, "two\nlines");
  EXPECT_EQ(pairs[3].target, "deux");
}

TEST(DataCorpus, CsvColumnsFoundByNameInEitherOrderAndDirection) {
  std::string text =
      "id,French words/sentences,English words/sentences\n"
      "7,Bonjour,Hello\n";
  CorpusLanguages fr_en;
  fr_en.source = "fr";
  fr_en.target = "en";
  auto pairs = parse_csv(text, "hf.csv", fr_en);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].source, "Bonjour");
  EXPECT_EQ(pairs[0].target, "Hello");
  CorpusLanguages en_fr;
  pairs = parse_csv(text, "hf.csv", en_fr);
  EXPECT_EQ(pairs[0].source, "Hello");
  EXPECT_EQ(pairs[0].target, "Bonjour");
}

TEST(DataCorpus, CsvErrorsNameFileAndLine) {
  const CorpusLanguages en_fr = strict_en_fr();
  const std::string header = "English words/sentences,French words/sentences\n";
  EXPECT_EQ(error_of([&] { parse_csv("a,b\n", "h.csv", en_fr); }),
            "h.csv:1: the CSV header has no column 'English words/sentences'");
  EXPECT_EQ(error_of([&] { parse_csv(header + "x,y\n\"open,z\n", "h.csv", en_fr); }),
            "h.csv:3: quoted field is not closed");
  EXPECT_EQ(error_of([&] { parse_csv(header + "x,y\n\"q\"z,w\n", "h.csv", en_fr); }),
            "h.csv:3: unexpected character after a closing quote");
  EXPECT_EQ(error_of([&] { parse_csv(header + "x,y,z\n", "h.csv", en_fr); }),
            "h.csv:2: expected 2 fields, found 3");
  // The record starting on line 3 spans lines 3-4 (a quoted newline) and holds bad UTF-8.
  EXPECT_EQ(error_of([&] { parse_csv(header + "x,y\n\"a\nb\",\xFF\n", "h.csv", en_fr); }),
            "h.csv:3: invalid UTF-8");
}

// Without --strict-data a malformed pair is skipped: 3,000 good lines with one bad line at
// line 1,001 give the 3,000 good pairs, a warning naming the line and a summary by cause.
std::string good_lines(size_t count) {
  std::string text;
  for (size_t i = 0; i < count; ++i) text += "line " + std::to_string(i) + "\tligne " + std::to_string(i) + "\n";
  return text;
}

struct Skipped {
  std::vector<TextPair> pairs;
  std::string warnings;
};

Skipped parse_capturing_stderr(const std::string& text, const CorpusLanguages& languages,
                               const std::string& label = "c.tsv") {
  testing::internal::CaptureStderr();
  Skipped r;
  try {
    r.pairs = label.size() > 4 && label.substr(label.size() - 4) == ".csv" ? parse_csv(text, label, languages)
                                                                             : parse_tsv(text, label, languages);
  } catch (...) {
    testing::internal::GetCapturedStderr();
    throw;
  }
  r.warnings = testing::internal::GetCapturedStderr();
  return r;
}

void expect_skipped(const std::string& bad_line, const std::string& warning, const std::string& cause) {
  const std::string text = good_lines(1000) + bad_line + "\n" + good_lines(2000);
  const Skipped r = parse_capturing_stderr(text, CorpusLanguages{});
  ASSERT_EQ(r.pairs.size(), 3000u) << bad_line;
  EXPECT_EQ(r.pairs[1000].source, "line 0");
  EXPECT_EQ(r.warnings, "warning: c.tsv:1001: " + warning + "; pair skipped\n"
                        "warning: c.tsv: skipped 1 of 3001 pairs (1 " + cause + ")\n");
  // --strict-data refuses the corpus at that line.
  EXPECT_EQ(error_of([&] { parse_tsv(text, "c.tsv", strict_en_fr()); }), "c.tsv:1001: " + warning);
}

TEST(DataCorpus, SkipsALineWithoutATab) {
  expect_skipped("no tab here", "expected two tab-separated fields, found one", "with a field missing");
}

TEST(DataCorpus, SkipsALineWithExtraFields) {
  expect_skipped("a\tb\tc", "expected two tab-separated fields, found more", "with extra fields");
}

TEST(DataCorpus, SkipsALineWithInvalidUtf8) {
  expect_skipped("caf\xE9\tcaf\xC3\xA9", "invalid UTF-8", "with invalid UTF-8");
}

TEST(DataCorpus, SkipsALineWithAnEmptySide) {
  expect_skipped("\tvide", "empty first field", "with an empty side");
  expect_skipped("empty\t", "empty second field", "with an empty side");
}

TEST(DataCorpus, SkipsMalformedCsvRecords) {
  const std::string header = "English words/sentences,French words/sentences\n";
  std::string text = header;
  for (int i = 0; i < 200; ++i) text += "a" + std::to_string(i) + ",b\n";
  text += "x,y,z\n";
  const Skipped r = parse_capturing_stderr(text, CorpusLanguages{}, "h.csv");
  EXPECT_EQ(r.pairs.size(), 200u);
  EXPECT_EQ(r.warnings, "warning: h.csv:202: expected 2 fields, found 3; pair skipped\n"
                        "warning: h.csv: skipped 1 of 201 pairs (1 with extra fields)\n");
}

// Only the first few are named; the summary counts every cause; past the share the file is
// refused (probably the wrong format).
TEST(DataCorpus, NamesTheFirstFewAndRefusesTooManyBadLines) {
  std::string text = good_lines(1000);
  for (int i = 0; i < 4; ++i) text += "no tab " + std::to_string(i) + "\n";
  for (int i = 0; i < 3; ++i) text += "x\ty\tz\n";
  text += "\tempty\n";
  const Skipped r = parse_capturing_stderr(text, CorpusLanguages{});
  EXPECT_EQ(r.pairs.size(), 1000u);
  EXPECT_EQ(std::count(r.warnings.begin(), r.warnings.end(), '\n'), static_cast<long>(kWarnedBadLines) + 1)
      << r.warnings;
  EXPECT_NE(r.warnings.find("warning: c.tsv:1001: "), std::string::npos) << r.warnings;
  EXPECT_NE(r.warnings.find("warning: c.tsv: skipped 8 of 1008 pairs (4 with a field missing, 3 with extra "
                            "fields, 1 with an empty side)\n"),
            std::string::npos)
      << r.warnings;

  CorpusLanguages half_percent;
  half_percent.max_bad_share = 0.005;
  EXPECT_EQ(error_of([&] { parse_capturing_stderr(text, half_percent); }),
            "c.tsv: 8 of 1008 pairs are malformed (0.7937%, more than --max-bad-lines 0.5%): is it in the "
            "expected format?");
  EXPECT_EQ(error_of([&] { parse_capturing_stderr("a b c\nd e f\ng\th\n", CorpusLanguages{}); }),
            "c.tsv: 2 of 3 pairs are malformed (66.67%, more than --max-bad-lines 1%): is it in the "
            "expected format?");
}

TEST(DataCorpus, ReadDetectsCsvByHeaderAndReportsMissingFile) {
  std::string path = std::string(XF_BINARY_DIR) + "/data_corpus_test_hf.txt";
  {
    std::ofstream out(path, std::ios::binary);
    out << "English words/sentences,French words/sentences\n\"a, b\",c\n";
  }
  auto pairs = read_parallel_corpus(path, CorpusLanguages{});
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].source, "a, b");
  std::remove(path.c_str());
  EXPECT_NE(error_of([&] { read_parallel_corpus(path, CorpusLanguages{}); }).find(path + ": cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace xf::trainer
