// Parallel text parsing: TSV, the Hugging Face CSV export (RFC 4180 quoting), directions,
// UTF-8 validation and the one-line errors that name file and line.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

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

TEST(DataCorpus, TsvWrongFieldCountNamesFileAndLine) {
  CorpusLanguages en_fr;
  EXPECT_EQ(error_of([&] { parse_tsv("a\tb\nno tab here\n", "x.tsv", en_fr); }),
            "x.tsv:2: expected two tab-separated fields, found one");
  EXPECT_EQ(error_of([&] { parse_tsv("a\tb\tc\n", "x.tsv", en_fr); }),
            "x.tsv:1: expected two tab-separated fields, found more");
}

TEST(DataCorpus, BadUtf8NamesFileAndLine) {
  CorpusLanguages en_fr;
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
  CorpusLanguages en_fr;
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
