// xf-eval the program: output lines, JSON, TSV sources, exit codes and one-line errors. Expected
// scores come from sacreBLEU (data/expected.txt, written by data/make_expected.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "run_command.h"
#include "temp_dir.h"
#include "test_data.h"
#include "xf/metrics.h"

namespace xf::metrics {
namespace {

using testing::data_path;
using testing::expected;
using testing::expected_number;
using testing::write_temp_file;

using ProgramRun = xf::test::CommandRun;

// Runs xf-eval with `arguments` (already shell-quoted where needed).
ProgramRun run_xf_eval(const std::string& arguments) {
  static const std::string dir = xf::test::make_temp_dir("xf_eval");  // removed at exit
  return xf::test::run_command(std::string("'") + XF_EVAL_PATH + "' " + arguments, dir);
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// An error is one line on stderr, "xf-eval: ...", nothing on stdout.
void expect_xf_eval_error(const ProgramRun& run, int exit_code, const std::string& fragment) {
  xf::test::expect_one_line_error(run, exit_code, fragment);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err.rfind("xf-eval: ", 0), 0u) << run.err;
}

double json_number(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return -1.0;
  return std::strtod(json.c_str() + at + key.size() + 4, nullptr);
}

TEST(XfEval, PrintsSacrebleuLinesForParallelReferences) {
  const ProgramRun run = run_xf_eval("--hyp " + quoted(data_path("hyp.txt")) + " --ref " + quoted(data_path("ref.a.txt")) +
                              " --ref " + quoted(data_path("ref.b.txt")));
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected().at("text.multi") + "\n");
}

TEST(XfEval, GroupsTsvReferencesBySource) {
  const ProgramRun run = run_xf_eval("--hyp " + quoted(data_path("hyp.tsv-sources.txt")) + " --ref-tsv " +
                              quoted(data_path("refs.tsv")));
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected().at("text.tsv") + "\n");
}

TEST(XfEval, PrintsDistinctSourcesInFirstAppearanceOrder) {
  const ProgramRun run = run_xf_eval("--ref-tsv " + quoted(data_path("refs.tsv")) + " --print-sources");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "Stop!\nI'm hit!\nHello.\nIt costs 3.50 euros.\nWhere is the station?\nNothing.\n");
}

TEST(XfEval, JsonHasFullPrecisionScores) {
  const ProgramRun run = run_xf_eval("--json --hyp " + quoted(data_path("hyp.txt")) + " --ref " +
                              quoted(data_path("ref.a.txt")));
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NEAR(json_number(run.out, "bleu"), expected_number("corpus_bleu.single.score"), 1e-9) << run.out;
  EXPECT_NEAR(json_number(run.out, "chrf2"), expected_number("corpus_chrf.single"), 1e-9) << run.out;
  EXPECT_NEAR(json_number(run.out, "bleu_bp"), expected_number("corpus_bleu.single.bp"), 1e-12) << run.out;
  EXPECT_EQ(json_number(run.out, "hyp_len"), expected_number("corpus_bleu.single.hyp_len")) << run.out;
  EXPECT_EQ(json_number(run.out, "ref_len"), expected_number("corpus_bleu.single.ref_len")) << run.out;
  EXPECT_EQ(json_number(run.out, "sentences"), 36) << run.out;
}

// --by-length: the totals as without it, then one table row per bucket. The sample's six
// sources have 1 to 4 words: all in 1-5, whose scores are then the totals; the other buckets
// are empty ('-', JSON null).
TEST(XfEval, ByLengthPrintsABucketTableWithEmptyBuckets) {
  const std::string args = "--hyp " + quoted(data_path("hyp.tsv-sources.txt")) + " --ref-tsv " +
                           quoted(data_path("refs.tsv"));
  const ProgramRun plain = run_xf_eval(args + " --json");
  const double bleu = json_number(plain.out, "bleu"), chrf = json_number(plain.out, "chrf2");
  char first_row[128];
  std::snprintf(first_row, sizeof first_row, "| 1-5 | 6 | %.2f | %.2f |\n", bleu, chrf);
  const ProgramRun run = run_xf_eval(args + " --by-length");
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected().at("text.tsv") + "\n" +
                         "| source words | sentences | BLEU | chrF2 |\n| --- | ---: | ---: | ---: |\n" +
                         first_row +
                         "| 6-10 | 0 | - | - |\n| 11-15 | 0 | - | - |\n| 16-25 | 0 | - | - |\n"
                         "| 26+ | 0 | - | - |\n");
  const ProgramRun json = run_xf_eval(args + " --by-length --json");
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_NE(json.out.find("\"by_length\": [{\"words\": \"1-5\", \"sentences\": 6, \"bleu\": "),
            std::string::npos) << json.out;
  EXPECT_NE(json.out.find("{\"words\": \"26+\", \"sentences\": 0, \"bleu\": null, \"chrf2\": null}]"),
            std::string::npos) << json.out;
  // Edges 1,3: "Stop!", "Hello.", "Nothing." (1 word); "I'm hit!" (2); two of 4 words.
  const ProgramRun custom = run_xf_eval(args + " --by-length --length-buckets 1,3");
  EXPECT_EQ(custom.status, 0) << custom.err;
  EXPECT_NE(custom.out.find("| 1-1 | 3 | "), std::string::npos) << custom.out;
  EXPECT_NE(custom.out.find("| 2-3 | 1 | "), std::string::npos) << custom.out;
  EXPECT_NE(custom.out.find("| 4+ | 2 | "), std::string::npos) << custom.out;
  // With parallel files the sources come from --src.
  const std::string sources = write_temp_file("sources.txt", "a b c d e f g\n");
  const std::string hyp = write_temp_file("one_hyp.txt", "le chat est sur la table\n");
  const std::string ref = write_temp_file("one_ref.txt", "le chat est sur la table\n");
  const ProgramRun with_src = run_xf_eval("--hyp " + quoted(hyp) + " --ref " + quoted(ref) + " --src " +
                                          quoted(sources) + " --by-length");
  EXPECT_EQ(with_src.status, 0) << with_src.err;
  EXPECT_NE(with_src.out.find("| 1-5 | 0 | - | - |\n| 6-10 | 1 | 100.00 | 100.00 |\n"), std::string::npos)
      << with_src.out;
  expect_xf_eval_error(run_xf_eval("--hyp " + quoted(hyp) + " --ref " + quoted(ref) + " --by-length"), 2,
                        "--by-length with --ref needs --src FILE");
  expect_xf_eval_error(run_xf_eval(args + " --by-length --length-buckets 5,3"), 2,
                        "--length-buckets expects ascending word counts");
  expect_xf_eval_error(run_xf_eval(args + " --by-length --length-buckets 5,"), 2,
                        "--length-buckets expects ascending word counts");
  const std::string two_sources = write_temp_file("two_sources.txt", "a\nb\n");
  expect_xf_eval_error(run_xf_eval("--hyp " + quoted(hyp) + " --ref " + quoted(ref) + " --src " +
                                    quoted(two_sources) + " --by-length"),
                        1, "source file " + two_sources + " has 2 lines but hypothesis file");
}

// --casual-tsv/--casual-hyp: each casual set scored on its own references and shown beside the
// clean score with the difference; the JSON holds the same numbers.
TEST(XfEval, CasualSetsScoredBesideTheCleanOne) {
  const std::string clean_tsv = write_temp_file("clean.tsv",
      "Where is the station?\tOù est la gare ?\nHello world.\tBonjour le monde.\n");
  const std::string casual_tsv = write_temp_file("casual.tsv",
      "where is the station\tOù est la gare ?\nhello world\tBonjour le monde.\n");
  const std::string clean_hyp = write_temp_file("clean.fr", "Où est la gare ?\nBonjour le monde.\n");
  const std::string casual_hyp = write_temp_file("casual.fr", "Où est la gare ?\nLe monde bonjour.\n");
  const std::string arguments = "--ref-tsv " + quoted(clean_tsv) + " --hyp " + quoted(clean_hyp) +
                                " --casual-tsv " + quoted(casual_tsv) + " --casual-hyp " + quoted(casual_hyp);
  const ProgramRun run = run_xf_eval(arguments);
  ASSERT_EQ(run.status, 0) << run.err;
  const BleuScore casual = corpus_bleu({"Où est la gare ?", "Le monde bonjour."},
                                       {{"Où est la gare ?"}, {"Bonjour le monde."}});
  ASSERT_LT(casual.score, 90.0);
  char casual_row[512];
  std::snprintf(casual_row, sizeof casual_row, "| %s | 2 | %.2f | ", casual_tsv.c_str(), casual.score);
  EXPECT_NE(run.out.find("| " + clean_tsv + " | 2 | 100.00 | 100.00 | |\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(casual_row), std::string::npos) << run.out;
  char difference[32];
  std::snprintf(difference, sizeof difference, "| %+.2f |\n", casual.score - 100.0);
  EXPECT_NE(run.out.find(difference), std::string::npos) << run.out;

  const ProgramRun json = run_xf_eval(arguments + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const size_t at = json.out.find("\"casual\": [{\"ref_tsv\": ");
  ASSERT_NE(at, std::string::npos) << json.out;
  EXPECT_DOUBLE_EQ(json_number(json.out.substr(at), "bleu"), casual.score);
  EXPECT_DOUBLE_EQ(json_number(json.out, "bleu"), 100.0);  // the clean score comes first

  expect_xf_eval_error(run_xf_eval(arguments + " --casual-tsv " + quoted(casual_tsv)), 2,
                       "--casual-tsv and --casual-hyp come in pairs");
  expect_xf_eval_error(run_xf_eval("--ref " + quoted(clean_hyp) + " --hyp " + quoted(clean_hyp) +
                                   " --casual-tsv " + quoted(casual_tsv) + " --casual-hyp " + quoted(casual_hyp)),
                       2, "give --ref-tsv");
  const std::string short_hyp = write_temp_file("short.fr", "Où est la gare ?\n");
  expect_xf_eval_error(run_xf_eval("--ref-tsv " + quoted(clean_tsv) + " --hyp " + quoted(clean_hyp) +
                                   " --casual-tsv " + quoted(casual_tsv) + " --casual-hyp " + quoted(short_hyp)),
                       1, "has 1 lines but");
}

TEST(XfEval, HelpExitsZero) {
  const ProgramRun run = run_xf_eval("--help");
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.out.rfind("usage: xf-eval", 0), 0u) << run.out;
}

TEST(XfEval, BadCommandLinesExitTwo) {
  expect_xf_eval_error(run_xf_eval(""), 2, "missing --hyp");
  expect_xf_eval_error(run_xf_eval("--hyp x.txt"), 2, "missing --ref");
  expect_xf_eval_error(run_xf_eval("--bogus"), 2, "unknown option '--bogus'");
  expect_xf_eval_error(run_xf_eval("--hyp"), 2, "--hyp needs a value");
  expect_xf_eval_error(run_xf_eval("--hyp a --ref b --ref-tsv c"), 2, "not both");
  expect_xf_eval_error(run_xf_eval("--ref-tsv a --print-sources --source-column x"), 2, "--source-column");
  expect_xf_eval_error(run_xf_eval("--print-sources"), 2, "--print-sources needs --ref-tsv");
}

TEST(XfEval, BadInputsExitOneWithTheReason) {
  const std::string hyp = quoted(data_path("hyp.txt")), ref_a = quoted(data_path("ref.a.txt"));
  expect_xf_eval_error(run_xf_eval("--hyp /nonexistent/hyp.txt --ref " + ref_a), 1,
                        "cannot open /nonexistent/hyp.txt");
  expect_xf_eval_error(run_xf_eval("--hyp " + hyp + " --ref /nonexistent/ref.txt"), 1,
                        "cannot open /nonexistent/ref.txt");
  // 36 hypotheses against the 6 distinct sources of refs.tsv.
  expect_xf_eval_error(run_xf_eval("--hyp " + hyp + " --ref-tsv " + quoted(data_path("refs.tsv"))), 1,
                        "has 36 lines but " + data_path("refs.tsv") + " (distinct sources) has 6");
  const std::string short_ref = write_temp_file("short_ref.txt", "one line\n");
  expect_xf_eval_error(run_xf_eval("--hyp " + hyp + " --ref " + ref_a + " --ref " + quoted(short_ref)), 1,
                        "reference file " + short_ref + " has 1 lines");
  const std::string bad_hyp = write_temp_file("bad_hyp.txt", "ok\n\xFF\xFE\n");
  expect_xf_eval_error(run_xf_eval("--hyp " + quoted(bad_hyp) + " --ref " + quoted(bad_hyp)), 1,
                        bad_hyp + ":2: invalid UTF-8");
  const std::string empty = write_temp_file("empty.txt", "");
  expect_xf_eval_error(run_xf_eval("--hyp " + quoted(empty) + " --ref " + quoted(empty)), 1,
                        "hypothesis file " + empty + " is empty: nothing to score");
  const std::string bad_tsv = write_temp_file("bad.tsv", "src\tref\nsrc only\n");
  expect_xf_eval_error(run_xf_eval("--ref-tsv " + quoted(bad_tsv) + " --print-sources"), 1,
                        bad_tsv + ":2: expected at least 2 tab-separated columns");
}

}  // namespace
}  // namespace xf::metrics
