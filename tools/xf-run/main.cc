// xf-run: translates stdin to stdout, one line each, in order.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "translator_cli.h"
#include "xf/error.h"
#include "xf/translator.h"

namespace {

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-run --model FILE [options] < input > output

Translates stdin (or --input) to stdout (or --output): one output line per input line, in order
(lines are read in blocks and decoded in batches sorted by length). An empty line gives an
empty line.

%s  --ids                 read and write space-separated token ids instead of text: input ids
                        are source pieces without EOS, output ids exclude EOS
  --input FILE          read the sources from FILE instead of stdin
  --output FILE         write the translations to FILE instead of stdout
  --with-scores         append a tab and the score to each 1-best translation
  --target-prefix FILE  line i of FILE starts the translation of input line i (text, or ids
                        with --ids; an empty line forces nothing)
  --help                print this help

With --n-best N > 1, each input line gives N lines, best first, in the form
  INDEX ||| TRANSLATION ||| SCORE
(INDEX counts input lines from 0; SCORE is the log-probability with the length penalty).
An empty line has a single hypothesis, the empty one.
Exit status: 0 on success, 1 on bad input (model file, invalid UTF-8, a line over the limits:
the message names the line), 2 on a bad command line.
)";

struct Options {
  xf::cli::TranslatorCli cli;
  bool ids = false;
  std::string input, output, target_prefix;  // empty: stdin, stdout, none
  bool with_scores = false;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options.cli.parse(argc, argv, i)) continue;
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError{arg + " needs a value"};
      return argv[++i];
    };
    if (arg == "--ids") options.ids = true;
    else if (arg == "--input") options.input = value();
    else if (arg == "--output") options.output = value();
    else if (arg == "--target-prefix") options.target_prefix = value();
    else if (arg == "--with-scores") options.with_scores = true;
    else throw UsageError{"unknown option '" + arg + "' (try --help)"};
  }
  if (options.cli.model_path.empty()) throw UsageError{"--model is required (try --help)"};
  return options;
}

std::vector<int32_t> parse_ids(const std::string& line, size_t line_number) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ' || line[i] == '\t') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    const std::string word = line.substr(i, end - i);
    char* stop = nullptr;
    const long id = std::strtol(word.c_str(), &stop, 10);
    if (*stop != '\0' || id < 0 || id > INT32_MAX)
      throw xf::Error("line " + std::to_string(line_number) + ": '" + word + "' is not a token id");
    ids.push_back(static_cast<int32_t>(id));
    i = end;
  }
  return ids;
}

// Translates one block of lines and writes the results to `output`. prefixes: empty, or one
// target prefix line per line.
void translate_block(xf::Translator& translator, const Options& options,
                     const std::vector<std::string>& lines, const std::vector<std::string>& prefixes,
                     size_t first_line, std::vector<xf::TokenTranslation>& results, FILE* output) {
  const xf::Model& model = translator.model();
  const xf::ModelConfig& config = model.config();
  std::vector<std::vector<int32_t>> sources(lines.size()), prefix_ids(prefixes.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t line_number = first_line + i + 1;
    try {
      sources[i] = options.ids ? parse_ids(lines[i], line_number) : model.encode_source(lines[i]);
      if (!prefixes.empty())
        prefix_ids[i] = options.ids ? parse_ids(prefixes[i], line_number) : model.encode_target(prefixes[i]);
    } catch (const xf::Error& e) {
      if (options.ids) throw;
      throw xf::Error("line " + std::to_string(line_number) + ": " + e.what());
    }
    if (static_cast<int64_t>(sources[i].size()) + 1 > translator.options().max_source_len)
      throw xf::Error("line " + std::to_string(line_number) + ": " + std::to_string(sources[i].size() + 1) +
                      " tokens with EOS, more than --max-source-len " +
                      std::to_string(translator.options().max_source_len));
    for (int32_t id : sources[i])
      if (static_cast<uint32_t>(id) >= config.source_vocab_size)
        throw xf::Error("line " + std::to_string(line_number) + ": token id " + std::to_string(id) +
                        " is outside the source vocabulary of " + std::to_string(config.source_vocab_size));
  }
  translator.translate_ids(sources, options.cli.translate, results, prefix_ids);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    for (const xf::TokenHypothesis& h : results[i].hypotheses) {
      std::string text;
      if (options.ids) {
        for (size_t k = 0; k < h.ids.size(); ++k) text += (k ? " " : "") + std::to_string(h.ids[k]);
      } else {
        text = model.decode_target(h.ids.data(), h.ids.size());
      }
      char score[32];
      std::snprintf(score, sizeof score, "%.6f", h.score);
      if (options.cli.translate.n_best > 1) {
        out += std::to_string(first_line + i) + " ||| " + text + " ||| " + score + "\n";
      } else if (options.with_scores) {
        out += text + "\t" + score + "\n";
      } else {
        out += text + "\n";
      }
    }
  }
  if (std::fwrite(out.data(), 1, out.size(), output) != out.size() || std::fflush(output) != 0)
    throw xf::Error(std::string("cannot write the output: ") + std::strerror(errno));
}

// An input file, or stdin; its name for messages.
std::istream& open_input(const std::string& path, std::ifstream& file, const char* what) {
  if (path.empty()) return std::cin;
  file.open(path);
  if (!file) throw xf::Error(path + ": cannot open " + what + ": " + std::strerror(errno));
  return file;
}

int run(const Options& options_in) {
  Options options = options_in;
  auto model = xf::Model::open(options.cli.model_path);
  if (!options.ids && !model->has_tokenizer())
    throw xf::Error(options.cli.model_path + ": the model has no tokenizer; use --ids");
  options.cli.finish(model.get());
  xf::Translator translator(model, options.cli.translator);
  // Blocks of several batches, so that sorting by length has something to sort.
  const size_t block = static_cast<size_t>(options.cli.translator.max_batch) * 8;
  std::ifstream input_file, prefix_file;
  std::istream& input = open_input(options.input, input_file, "the input");
  const bool with_prefix = !options.target_prefix.empty();
  if (with_prefix) open_input(options.target_prefix, prefix_file, "the target prefixes");
  FILE* output = stdout;
  if (!options.output.empty()) {
    output = std::fopen(options.output.c_str(), "w");
    if (output == nullptr) throw xf::Error(options.output + ": cannot write the output: " + std::strerror(errno));
  }
  std::vector<std::string> lines, prefixes;
  std::vector<xf::TokenTranslation> results;
  std::string line;
  size_t first_line = 0;
  const auto read_line = [](std::istream& in, std::string& line) {
    if (!std::getline(in, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  const auto flush = [&] {
    translate_block(translator, options, lines, prefixes, first_line, results, output);
    first_line += lines.size();
    lines.clear();
    prefixes.clear();
  };
  while (read_line(input, line)) {
    lines.push_back(line);
    if (with_prefix) {
      prefixes.emplace_back();
      if (!read_line(prefix_file, prefixes.back()))
        throw xf::Error(options.target_prefix + ": ends after " + std::to_string(first_line + lines.size() - 1) +
                        " lines, before the input");
    }
    if (lines.size() == block) flush();
  }
  if (!lines.empty()) flush();
  if (output != stdout && std::fclose(output) != 0)
    throw xf::Error(options.output + ": cannot write the output: " + std::strerror(errno));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xf::cli::tool_main("xf-run", kUsage, argc, argv, parse_options, [](const Options& options) {
    std::ios::sync_with_stdio(false);
    return run(options);
  });
}
