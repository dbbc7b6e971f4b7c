// xf-shortlist end to end on the tiny model: a corpus whose target is its source (each piece
// translates to itself) gives a Marian lex file whose lines name the model's pieces, at most
// --top-k a source piece, most probable first, each piece's top target itself.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "run_command.h"
#include "tiny_model.h"
#include "xf/format/shortlist.h"
#include "xf/model.h"

namespace {

using xf::test::run_command;

TEST(XfShortlist, WritesMarianLexLinesOfTheModelsPiecesTopKBySource) {
  xf::test::TempDir dir("shortlist");
  const std::vector<std::string> lines = xf::test::sample_sentences(300, 5);
  const std::string corpus = dir.file("corpus.tsv"), lex = dir.file("lex.s2t");
  {
    std::ofstream out(corpus);
    for (const std::string& line : lines) out << line << "\t" << line << "\n";
  }
  const xf::test::CommandRun run =
      run_command(std::string(XF_SHORTLIST) + " --model " + xf::test::tiny_model_file() + " --in " + corpus +
                      " --out " + lex + " --top-k 3 --iterations 8",
                  dir.path());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("xf-shortlist: 300 pairs, 8 EM rounds: "), std::string::npos) << run.err;
  auto model = xf::Model::open(xf::test::tiny_model_file());
  std::ifstream in(lex);
  std::map<std::string, std::vector<std::pair<std::string, float>>> by_source;
  std::string previous_source;
  size_t entries = 0;
  for (std::string line; std::getline(in, line); ++entries) {
    std::istringstream fields(line);
    std::string target, source, rest;
    float probability = -1;
    ASSERT_TRUE(fields >> target >> source >> probability) << line;
    EXPECT_FALSE(fields >> rest) << line;
    EXPECT_NO_THROW(model->target_piece_ids({target})) << line;
    EXPECT_NO_THROW(model->source_piece_ids({source})) << line;
    EXPECT_GT(probability, 0.0f);
    EXPECT_LE(probability, 1.0f);
    // A source's lines are together, most probable first.
    if (source != previous_source) EXPECT_EQ(by_source.count(source), 0u) << source;
    auto& row = by_source[source];
    if (!row.empty()) EXPECT_LE(probability, row.back().second) << line;
    row.push_back({target, probability});
    previous_source = source;
  }
  ASSERT_GT(by_source.size(), 20u);
  size_t itself = 0;
  for (const auto& [source, row] : by_source) {
    EXPECT_LE(row.size(), 3u) << source;
    itself += row.front().first == source;
  }
  EXPECT_GE(itself, by_source.size() * 9 / 10) << itself << " of " << by_source.size();
}

// --binary writes the same lists as the text, read as the runtime reads it with --shortlist-first
// FREQUENT --shortlist-best TOP_K: Marian's binary form of the model's ids.
TEST(XfShortlist, BinaryHoldsTheTextsListsAsReadWithFrequentAndTopK) {
  xf::test::TempDir dir("shortlist");
  const std::vector<std::string> lines = xf::test::sample_sentences(300, 7);
  const std::string corpus = dir.file("corpus.tsv"), lex = dir.file("lex.s2t"), bin = dir.file("lex.s2t.bin");
  {
    std::ofstream out(corpus);
    for (size_t i = 0; i < lines.size(); ++i) out << lines[i] << "\t" << lines[(i * 7) % lines.size()] << " " << lines[i] << "\n";
  }
  const std::string command = std::string(XF_SHORTLIST) + " --model " + xf::test::tiny_model_file() + " --in " +
                              corpus + " --top-k 4 --frequent 6 --out ";
  const xf::test::CommandRun text_run = run_command(command + lex, dir.path());
  ASSERT_EQ(text_run.status, 0) << text_run.err;
  const xf::test::CommandRun binary_run = run_command(command + bin + " --binary", dir.path());
  ASSERT_EQ(binary_run.status, 0) << binary_run.err;
  ASSERT_TRUE(xf::is_binary_shortlist(bin));
  const xf::LexicalShortlist binary = xf::read_binary_shortlist(bin);
  auto model = xf::Model::open(xf::test::tiny_model_file());
  const xf::ModelConfig& c = model->config();
  xf::TextShortlistOptions options;
  options.first_num = 6;
  options.best_num = 4;
  const xf::LexicalShortlist text = xf::read_text_shortlist(
      lex, [&](std::string_view piece) { return static_cast<uint32_t>(model->source_piece_ids({std::string(piece)})[0]); },
      [&](std::string_view piece) { return static_cast<uint32_t>(model->target_piece_ids({std::string(piece)})[0]); },
      c.source_vocab_size, options);
  EXPECT_EQ(binary.first_num, 6u);
  EXPECT_EQ(binary.best_num, 4u);
  ASSERT_GT(text.targets.size(), 40u);
  EXPECT_EQ(binary.targets, text.targets);
  // The text's offsets run to the source vocabulary's end, the binary's to its last listed id.
  ASSERT_LE(binary.offsets.size(), text.offsets.size());
  EXPECT_EQ(binary.offsets, std::vector<uint64_t>(text.offsets.begin(), text.offsets.begin() + binary.offsets.size()));
  for (size_t i = binary.offsets.size(); i < text.offsets.size(); ++i) EXPECT_EQ(text.offsets[i], text.targets.size());
  EXPECT_NO_THROW(xf::check_shortlist(binary, c.source_vocab_size, c.target_vocab_size));
}

TEST(XfShortlist, Refusals) {
  xf::test::TempDir dir("shortlist");
  const std::string tool = XF_SHORTLIST;
  xf::test::expect_one_line_error(run_command(tool + " --in a --out b", dir.path()), 2, "--model is required");
  xf::test::expect_one_line_error(
      run_command(tool + " --model " + xf::test::tiny_model_file() + " --in a --out b --top-k 0", dir.path()), 2,
      "--top-k");
  xf::test::expect_one_line_error(
      run_command(tool + " --model " + xf::test::tiny_model_file() + " --in " + dir.file("none.tsv") + " --out b",
                  dir.path()),
      1, "none.tsv");
}

}  // namespace
