// Runs the built xf-inspect on valid and bad files: the table on stdout for a valid file;
// exit 1 and exactly one line "xf-inspect: <the reader's message>" on stderr for a bad one,
// a tokenizer that does not load or does not match its vocabulary included; exit 2 on a bad
// command line.
#include <gtest/gtest.h>

#include <sstream>

#include "format_test_support.h"
#include "run_command.h"
#include "tiny_model.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/trainer/data.h"

namespace xf::test {
namespace {

CommandRun run_inspect(const std::string& arguments, const TempDir& dir) {
  return run_command(std::string("'") + XF_INSPECT + "' " + arguments, dir.path());
}

std::vector<std::vector<std::string>> token_lines(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string w; words >> w;) tokens.push_back(w);
    lines.push_back(tokens);
  }
  return lines;
}

bool has_line(const std::vector<std::vector<std::string>>& lines,
              const std::vector<std::string>& tokens) {
  return std::count(lines.begin(), lines.end(), tokens) == 1;
}

// The tiny SentencePiece model's piece count.
uint32_t tiny_pieces() {
  return static_cast<uint32_t>(trainer::Tokenizer::from_model_proto(tiny_sentencepiece_model(), "tiny").vocab_size());
}

// A target tokenizer of its own: the tiny one's first `pieces` pieces.
std::string tiny_target_tokenizer(int32_t pieces) {
  std::vector<int32_t> kept;
  for (int32_t id = 0; id < pieces; ++id) kept.push_back(id);
  return trainer::sentencepiece_model_subset(tiny_sentencepiece_model(), kept);
}

TEST(XfInspect, PrintsConfigMetadataTokenizersAndTable) {
  TempDir dir;
  ModelConfig config = tiny_config();
  config.source_vocab_size = tiny_pieces();
  config.shared_embeddings = false;
  config.target_vocab_size = 10;
  config.output_bias = true;
  config.norm_position = NormPosition::pre;
  ModelWriter writer(config);
  const std::string target = tiny_target_tokenizer(10);
  writer.set_source_tokenizer(tiny_sentencepiece_model());
  writer.set_target_tokenizer(target);
  writer.set_metadata("source_language", "en");
  writer.set_metadata("bleu", "41.8");
  add_parameters(writer, random_parameters(config, DType::int8, 9));
  const std::string path = dir.file("model.xfm");
  writer.write(path);

  const CommandRun r = run_inspect("'" + path + "'", dir);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "");
  const auto lines = token_lines(r.out);
  EXPECT_TRUE(has_line(lines, {"format", "version", "1"}));
  EXPECT_TRUE(has_line(lines, {"source_vocab_size", std::to_string(tiny_pieces())}));
  EXPECT_TRUE(has_line(lines, {"target_vocab_size", "10"}));
  EXPECT_TRUE(has_line(lines, {"d_model", "8"}));
  EXPECT_TRUE(has_line(lines, {"d_ff", "16"}));
  EXPECT_TRUE(has_line(lines, {"norm_position", "pre"}));
  EXPECT_TRUE(has_line(lines, {"shared_embeddings", "0"}));
  EXPECT_TRUE(has_line(lines, {"output_bias", "1"}));
  EXPECT_TRUE(has_line(lines, {"source_language", "en"}));
  EXPECT_TRUE(has_line(lines, {"bleu", "41.8"}));
  EXPECT_TRUE(has_line(lines, {"source", std::to_string(tiny_sentencepiece_model().size()), "bytes,",
                               std::to_string(tiny_pieces()), "pieces"})) << r.out;
  EXPECT_TRUE(has_line(lines, {"target", std::to_string(target.size()), "bytes,", "10", "pieces"})) << r.out;

  // One row per tensor: name, dtype, shape, bytes; then the total.
  const auto model = ModelFile::open(path);
  uint64_t total = 0, scales = 0;
  for (const TensorView& t : model->tensors()) {
    std::string shape = "[";
    for (uint32_t i = 0; i < t.rank; ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    shape += "]";
    EXPECT_TRUE(has_line(lines, {std::string(t.name), "int8", shape, std::to_string(t.bytes)}))
        << t.name;
    total += t.bytes;
    scales += t.rows() * 4;
  }
  EXPECT_TRUE(has_line(lines, {"total:", std::to_string(model->tensors().size()), "tensors,",
                               std::to_string(total), "bytes", "(+", std::to_string(scales),
                               "bytes", "of", "int8", "row", "scales)"}))
      << r.out;
}

TEST(XfInspect, SharedAndMissingTokenizers) {
  TempDir dir;
  ModelConfig config = tiny_config();
  config.source_vocab_size = config.target_vocab_size = tiny_pieces();
  for (bool with_tokenizer : {true, false}) {
    ModelWriter writer(config);
    if (with_tokenizer) writer.set_source_tokenizer(tiny_sentencepiece_model());
    add_parameters(writer, random_parameters(config, DType::f32, 2));
    writer.write(dir.file("model.xfm"));
    const CommandRun r = run_inspect("'" + dir.file("model.xfm") + "'", dir);
    EXPECT_EQ(r.status, 0);
    const auto lines = token_lines(r.out);
    if (with_tokenizer) {
      EXPECT_TRUE(has_line(lines, {"source", std::to_string(tiny_sentencepiece_model().size()), "bytes,",
                                   std::to_string(tiny_pieces()), "pieces"})) << r.out;
      EXPECT_TRUE(has_line(lines, {"target", "shared", "with", "source"})) << r.out;
    } else {
      EXPECT_TRUE(has_line(lines, {"source", "none"})) << r.out;
      EXPECT_TRUE(has_line(lines, {"target", "none"})) << r.out;
      EXPECT_TRUE(has_line(lines, {"(none)"})) << "no metadata:\n" << r.out;
    }
  }
}

// An SSRU decoder (format version 3) and a stored shortlist are shown.
TEST(XfInspect, SsruDecoderAndShortlist) {
  TempDir dir;
  ModelConfig config = tiny_config();
  config.decoder_layer_kind = DecoderLayerKind::ssru;
  ModelWriter writer(config);
  add_parameters(writer, random_parameters(config, DType::f32, 2));
  LexicalShortlist lists;
  lists.first_num = 5;
  lists.best_num = 2;
  lists.offsets = {0, 2, 3};
  lists.targets = {4, 9, 7};
  writer.set_shortlist(lists);
  writer.write(dir.file("model.xfm"));
  const CommandRun r = run_inspect("'" + dir.file("model.xfm") + "'", dir);
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = token_lines(r.out);
  EXPECT_TRUE(has_line(lines, {"format", "version", "3"})) << r.out;
  EXPECT_TRUE(has_line(lines, {"decoder_layer_kind", "ssru"})) << r.out;
  EXPECT_TRUE(has_line(lines, {"first", "5,", "best", "2,", "2", "source", "ids,", "3", "candidates"})) << r.out;
  EXPECT_NE(r.out.find("decoder.layers.0.ssru.input_forget.weight"), std::string::npos) << r.out;
}

TEST(XfInspect, BadFilesGiveOneLineAndExitOne) {
  TempDir dir;
  std::vector<uint8_t> valid = valid_model_bytes(tiny_config(), DType::f32, 3);
  std::vector<uint8_t> wrong_identifier = valid;
  wrong_identifier[13] = 'Y';
  std::vector<uint8_t> corrupt_header = valid;
  corrupt_header[40] ^= 0xff;
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"empty.xfm", {}},
      {"truncated.xfm", std::vector<uint8_t>(valid.begin(), valid.begin() + valid.size() / 2)},
      {"identifier.xfm", wrong_identifier},
      {"checksum.xfm", corrupt_header},
  };
  for (const auto& [name, bytes] : files) {
    const std::string path = dir.file(name);
    write_bytes(path, bytes);
    const std::string problem = open_error(path);
    ASSERT_NE(problem, "") << name;
    const CommandRun r = run_inspect("'" + path + "'", dir);
    EXPECT_EQ(r.status, 1) << name;
    EXPECT_EQ(r.out, "") << name;
    EXPECT_EQ(r.err, "xf-inspect: " + problem + "\n") << name;
  }
  // Not a file at all.
  const CommandRun missing = run_inspect("'" + dir.file("absent.xfm") + "'", dir);
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.err,
            "xf-inspect: " + dir.file("absent.xfm") + ": cannot open: No such file or directory\n");
  const CommandRun directory = run_inspect("'" + dir.path() + "'", dir);
  EXPECT_EQ(directory.status, 1);
  EXPECT_EQ(directory.err, "xf-inspect: " + dir.path() + ": is a directory, not a model file\n");
}

// What xf-run refuses at load, xf-inspect refuses too: SentencePiece bytes that do not load, a
// tokenizer with another piece count than its vocabulary.
TEST(XfInspect, ATokenizerThatDoesNotLoadOrDoesNotMatchIsRefused) {
  TempDir dir;
  ModelConfig config = tiny_config();
  config.source_vocab_size = config.target_vocab_size = tiny_pieces();
  const auto write = [&](const ModelConfig& c, const std::string& source, const std::string& target,
                         const std::string& name) {
    ModelWriter writer(c);
    writer.set_source_tokenizer(source);
    if (!target.empty()) writer.set_target_tokenizer(target);
    add_parameters(writer, random_parameters(c, DType::f32, 4));
    writer.write(dir.file(name));
    return dir.file(name);
  };
  std::string garbage = tiny_sentencepiece_model();
  for (size_t i = 0; i < garbage.size(); i += 7) garbage[i] = static_cast<char>(garbage[i] ^ 0x5a);
  const std::string bad_bytes = write(config, garbage, "", "garbage.xfm");
  const CommandRun r = run_inspect("'" + bad_bytes + "'", dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("xf-inspect: " + bad_bytes + ": source tokenizer: cannot load the SentencePiece model: ", 0), 0u)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  ModelConfig more = config;
  more.source_vocab_size = more.target_vocab_size = tiny_pieces() + 5;
  const std::string wrong_count = write(more, tiny_sentencepiece_model(), "", "count.xfm");
  const CommandRun count = run_inspect("'" + wrong_count + "'", dir);
  EXPECT_EQ(count.status, 1);
  EXPECT_EQ(count.err, "xf-inspect: " + wrong_count + ": source tokenizer: the SentencePiece model has " +
                           std::to_string(tiny_pieces()) + " pieces but the vocabulary has " +
                           std::to_string(tiny_pieces() + 5) + "\n");

  ModelConfig pruned = config;
  pruned.shared_embeddings = false;
  pruned.target_vocab_size = 10;
  const std::string wrong_target = write(pruned, tiny_sentencepiece_model(), tiny_target_tokenizer(9), "target.xfm");
  const CommandRun target = run_inspect("'" + wrong_target + "'", dir);
  EXPECT_EQ(target.status, 1);
  EXPECT_EQ(target.err, "xf-inspect: " + wrong_target +
                            ": target tokenizer: the SentencePiece model has 9 pieces but the vocabulary has 10\n");
}

TEST(XfInspect, HelpAndBadArguments) {
  TempDir dir;
  const CommandRun help = run_inspect("--help", dir);
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.rfind("usage: xf-inspect MODEL.xfm\n", 0), 0u) << help.out;
  EXPECT_EQ(help.err, "");

  const CommandRun none = run_inspect("", dir);
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.err, "xf-inspect: no model file given (try --help)\n");
  const CommandRun option = run_inspect("--verbose", dir);
  EXPECT_EQ(option.status, 2);
  EXPECT_EQ(option.err, "xf-inspect: unknown option '--verbose' (try --help)\n");
  const CommandRun two = run_inspect("a.xfm b.xfm", dir);
  EXPECT_EQ(two.status, 2);
  EXPECT_EQ(two.err, "xf-inspect: one model file at a time (try --help)\n");
}

}  // namespace
}  // namespace xf::test
