// xf-join end to end: every distinct source used once, joins of 2..--max-pairs sources with
// their references joined part by part, one row per reference, the same file for the same seed,
// and one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include "run_command.h"
#include "temp_dir.h"

namespace {

using xf::test::read_file;

xf::test::CommandRun run_join(const std::string& arguments, const std::string& dir) {
  return xf::test::run_command(std::string("'") + XF_JOIN + "' " + arguments, dir);
}

std::vector<std::pair<std::string, std::string>> read_rows(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream lines(read_file(path));
  std::string line;
  while (std::getline(lines, line)) {
    const size_t tab = line.find('\t');
    rows.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return rows;
}

TEST(XfJoin, JoinsEverySourceOnceWithItsReferences) {
  const std::string dir = xf::test::make_temp_dir("xf_join");
  // Source k has k % 3 + 1 references "rK.j"; sources are one word each ("sK").
  std::string tsv;
  std::map<std::string, std::vector<std::string>> references;
  for (int k = 0; k < 40; ++k) {
    for (int j = 0; j <= k % 3; ++j) {
      const std::string source = "s" + std::to_string(k), reference = "r" + std::to_string(k) + "." + std::to_string(j);
      tsv += source + "\t" + reference + "\n";
      references[source].push_back(reference);
    }
  }
  const std::string in = dir + "/in.tsv";
  std::ofstream(in) << tsv;
  const xf::test::CommandRun done = run_join("--in '" + in + "' --out '" + dir + "/a.tsv' --seed 3", dir);
  ASSERT_EQ(done.status, 0) << done.err;
  EXPECT_NE(done.err.find("40 sources -> "), std::string::npos) << done.err;

  std::multiset<std::string> used;
  std::string previous_source;
  std::vector<std::string> rows_of_source;
  size_t outputs = 0, joined = 0;
  auto check_source = [&]() {
    if (previous_source.empty()) return;
    ++outputs;
    std::vector<std::string> parts;
    std::istringstream words(previous_source);
    for (std::string word; words >> word;) parts.push_back(word);
    ASSERT_LE(parts.size(), 4u);
    joined += parts.size() > 1;
    size_t most = 0;
    for (const auto& part : parts) {
      used.insert(part);
      most = std::max(most, references.at(part).size());
    }
    ASSERT_EQ(rows_of_source.size(), most) << previous_source;
    for (size_t r = 0; r < most; ++r) {
      std::string expected;
      for (const auto& part : parts) {
        const auto& refs = references.at(part);
        expected += (expected.empty() ? "" : " ") + refs[std::min(r, refs.size() - 1)];
      }
      EXPECT_EQ(rows_of_source[r], expected);
    }
  };
  for (const auto& [source, reference] : read_rows(dir + "/a.tsv")) {
    if (source != previous_source) {
      check_source();
      previous_source = source;
      rows_of_source.clear();
    }
    rows_of_source.push_back(reference);
  }
  check_source();
  EXPECT_EQ(used.size(), 40u);
  EXPECT_EQ(std::set<std::string>(used.begin(), used.end()).size(), 40u);  // each once
  EXPECT_GE(joined, outputs - 1);  // every output a join but perhaps the last, left alone
  EXPECT_LE(outputs, 20u);

  // Deterministic by seed; --probability 0 copies the sources one by one.
  ASSERT_EQ(run_join("--in '" + in + "' --out '" + dir + "/b.tsv' --seed 3", dir).status, 0);
  EXPECT_EQ(read_file(dir + "/a.tsv"), read_file(dir + "/b.tsv"));
  ASSERT_EQ(run_join("--in '" + in + "' --out '" + dir + "/c.tsv' --seed 4", dir).status, 0);
  EXPECT_NE(read_file(dir + "/a.tsv"), read_file(dir + "/c.tsv"));
  ASSERT_EQ(run_join("--in '" + in + "' --out '" + dir + "/d.tsv' --probability 0", dir).status, 0);
  for (const auto& [source, reference] : read_rows(dir + "/d.tsv")) {
    EXPECT_EQ(source.find(' '), std::string::npos) << source;
  }
}

// --modify: every source as people type it, the rows in their order, the references changed
// only by the case modifiers that change both sides; a typo drawn by seed.
TEST(XfJoin, ModifyWritesCasualVersionsOfEverySource) {
  const std::string dir = xf::test::make_temp_dir("xf_join_modify");
  const std::string in = dir + "/in.tsv";
  std::ofstream(in) << "Where is the station?\tOù est la gare ?\n"
                    << "Hello world.\tBonjour le monde.\n"
                    << "Hello world.\tSalut le monde !\n"
                    << "Thank you!\tMerci !\n";
  auto modified = [&](const std::string& list, const std::string& seed) {
    const xf::test::CommandRun run =
        run_join("--in '" + in + "' --out '" + dir + "/o.tsv' --modify " + list + " --seed " + seed, dir);
    EXPECT_EQ(run.status, 0) << run.err;
    return read_rows(dir + "/o.tsv");
  };
  using Rows = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(modified("lowercase,no-final-punctuation", "1"),
            (Rows{{"where is the station", "Où est la gare ?"},
                  {"hello world", "Bonjour le monde."},
                  {"hello world", "Salut le monde !"},
                  {"thank you", "Merci !"}}));
  EXPECT_EQ(modified("uppercase", "1"),
            (Rows{{"WHERE IS THE STATION?", "OÙ EST LA GARE ?"},
                  {"HELLO WORLD.", "BONJOUR LE MONDE."},
                  {"HELLO WORLD.", "SALUT LE MONDE !"},
                  {"THANK YOU!", "MERCI !"}}));
  // One typo a source: one letter more, less, swapped or replaced, the same in each of the
  // source's rows; references as written; another seed, other typos.
  const Rows typos = modified("typo", "1");
  ASSERT_EQ(typos.size(), 4u);
  EXPECT_EQ(typos[1].first, typos[2].first);
  const Rows clean = read_rows(in);
  for (size_t i = 0; i < typos.size(); ++i) {
    EXPECT_EQ(typos[i].second, clean[i].second);
    EXPECT_NE(typos[i].first, clean[i].first);
    const long length_change = static_cast<long>(typos[i].first.size()) - static_cast<long>(clean[i].first.size());
    EXPECT_LE(std::abs(length_change), 1) << typos[i].first;
  }
  EXPECT_EQ(modified("typo", "1"), typos);
  EXPECT_NE(modified("typo", "2"), typos);
}

TEST(XfJoin, BadCommandLinesAndInputsAreOneLine) {
  const std::string dir = xf::test::make_temp_dir("xf_join_errors");
  for (const auto& [arguments, code, fragment] : std::vector<std::tuple<std::string, int, std::string>>{
           {"--in x.tsv", 2, "needs --in FILE and --out FILE"},
           {"--bogus 1", 2, "unknown option '--bogus'"},
           {"--in a --out b --max-pairs 1", 2, "--max-pairs expects a number from 2 to 64, got '1'"},
           {"--in a --out b --probability 2", 2, "--probability expects a number from 0 to 1"},
           {"--in a --out b --modify lower", 2, "--modify: 'lower' is not one of lowercase"},
           {"--in a --out b --modify lowercase,titlecase", 2, "at most one of lowercase, uppercase"},
           {"--in a --out b --modify typo --probability 0.5", 2, "leave out --max-pairs and --probability"},
           {"--in /nonexistent/in.tsv --out '" + dir + "/o.tsv'", 1, "/nonexistent/in.tsv"}}) {
    const xf::test::CommandRun run = run_join(arguments, dir);
    EXPECT_EQ(run.status, code) << arguments;
    EXPECT_EQ(run.err.rfind("xf-join: ", 0), 0u) << run.err;
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
    EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
  }
}

}  // namespace
