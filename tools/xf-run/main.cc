// xf-run: translates stdin (or --input) to stdout (or --output), one line each, in order.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "line_reader.h"
#include "progress.h"
#include "stop_signals.h"
#include "translator_cli.h"
#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/translator.h"

namespace {

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-run --model FILE [options] < input > output

Translates stdin (or --input) to stdout (or --output): one output line per input line, in
order. Lines are decoded in batches sorted by length; what has been read is translated as soon
as the input pauses, so an app can write a line into a pipe and read its translation. An empty
line gives an empty line.

%s  --ids                 read and write space-separated token ids instead of text: input ids
                        are source pieces without EOS, output ids exclude EOS
  --input FILE          read the sources from FILE instead of stdin
  --output FILE         write the translations to FILE instead of stdout
  --with-scores         append a tab and the score to each 1-best translation
  --stream              write each translation as its tokens come (greedy search: token by
                        token; beam search: sentence by sentence), lines in input order; for a
                        terminal or an app reading a pipe. Text and 1-best only
  --target-prefix FILE  line i of FILE starts the translation of input line i (text, or ids
                        with --ids; an empty line forces nothing)

With --n-best N > 1, each input line gives N lines, best first, in the form
  INDEX ||| TRANSLATION ||| SCORE
(INDEX counts input lines from 0; SCORE is the log-probability with the length penalty).
An empty line has a single hypothesis, the empty one.
A line longer than --max-source-len is truncated (only the bytes its first tokens can come
from are held, so memory does not grow with a line); a line that is not valid UTF-8 (or, with
--ids, holds a bad id) gives an empty output line. Each gets a warning naming its line, and a
count is printed at the end; the exit status stays 0 (--strict: stop there with status 1).
On stderr: while it is a terminal, a progress line every few seconds; at the end, always, a
summary line (lines, tokens, tokens/s, warnings).
Exit status: 0 on success, 1 on bad input (model file, a bad target prefix; with --strict, a
bad line) or when the output cannot be written (full disk, closed pipe), 2 on a bad command line.
)";

struct Options {
  xf::cli::TranslatorCli cli;
  bool ids = false;
  std::string input, output, target_prefix;  // empty: stdin, stdout, none
  bool with_scores = false;
  bool stream = false;
};

// --stream: each output line written as its tokens come (StreamCallback), in input order: the
// sentence being written shows its text so far; later ones wait until it is done.
class StreamWriter {
 public:
  StreamWriter(const xf::Model& model, const xf::Paragraphs& paragraphs, int fd)
      : model_(model), paragraphs_(paragraphs), fd_(fd), ids_(paragraphs.sentences().size()),
        shown_(ids_.size()), done_(ids_.size()), last_of_line_(ids_.size()) {
    for (size_t line = 0; line < paragraphs.texts(); ++line)
      last_of_line_[paragraphs.first(line) + paragraphs.count(line) - 1] = true;
  }

  void on_step(const xf::StreamStep& step) {
    if (step.id >= 0) {
      ids_[step.index].push_back(step.id);
    } else {
      ids_[step.index].resize(step.length);  // what the loop guard kept
      done_[step.index] = true;
    }
    while (next_ < ids_.size()) {
      show(next_);
      if (!done_[next_]) break;
      const std::string& after = last_of_line_[next_] ? kNewline : paragraphs_.gap(next_);
      xf::write_all(fd_, after.data(), after.size(), "output");
      ++next_;
    }
  }

 private:
  // Writes what the sentence's text has gained since it was last shown (its text so far starts
  // with what was shown, but for a cut loop: that much stays).
  void show(size_t sentence) {
    const std::string text = model_.decode_target(ids_[sentence].data(), ids_[sentence].size());
    std::string& shown = shown_[sentence];
    if (text.size() <= shown.size() || text.compare(0, shown.size(), shown) != 0) return;
    xf::write_all(fd_, text.data() + shown.size(), text.size() - shown.size(), "output");
    shown = text;
  }

  inline static const std::string kNewline = "\n";
  const xf::Model& model_;
  const xf::Paragraphs& paragraphs_;
  int fd_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<std::string> shown_;
  std::vector<bool> done_, last_of_line_;
  size_t next_ = 0;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options.cli.parse(argc, argv, i)) continue;
    if (arg == "--ids") options.ids = true;
    else if (arg == "--input") options.input = xf::cli::option_value(argc, argv, i);
    else if (arg == "--output") options.output = xf::cli::option_value(argc, argv, i);
    else if (arg == "--target-prefix") options.target_prefix = xf::cli::option_value(argc, argv, i);
    else if (arg == "--with-scores") options.with_scores = true;
    else if (arg == "--stream") options.stream = true;
    else throw xf::cli::unknown_option(arg);
  }
  if (options.cli.model_path.empty()) throw UsageError{"--model is required (try --help)"};
  if (options.stream && (options.ids || options.with_scores || options.cli.translate.n_best > 1))
    throw UsageError{"--stream writes 1-best text: not with --ids, --with-scores or --n-best"};
  options.cli.finish(nullptr);
  return options;
}

// Translates one block of lines and writes the results to `output_fd`, checking every write.
// prefixes: empty, or one target prefix line per line.
// cut[i]: line i was longer than the reader's cap (the SourceReader's max_line_bytes).
void translate_block(xf::Translator& translator, const Options& options, xf::cli::SourceReader& reader,
                     const std::vector<std::string>& lines, const std::vector<bool>& cut,
                     const std::vector<std::string>& prefixes,
                     size_t first_line, std::vector<xf::TokenTranslation>& results, int output_fd) {
  const xf::Model& model = translator.model();
  // Text lines are paragraphs: their sentences are translated together, joined back by line.
  const xf::Paragraphs paragraphs(lines, !options.ids && !options.cli.translate.disable_sentence_splitting);
  const size_t count = paragraphs.sentences().size();
  std::vector<std::vector<int32_t>> sources(count), prefix_ids(prefixes.empty() ? 0 : count);
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t line_number = first_line + i + 1;
    for (size_t k = 0; k < paragraphs.count(i); ++k) {
      const size_t j = paragraphs.first(i) + k;
      reader.read(paragraphs.sentences()[j], cut[i] && k + 1 == paragraphs.count(i), line_number, sources[j]);
    }
    if (prefixes.empty()) continue;
    try {
      std::vector<int32_t>& prefix = prefix_ids[paragraphs.first(i)];
      if (options.ids) xf::cli::parse_token_ids(prefixes[i], model.config().target_vocab_size, "target", prefix);
      else prefix = model.encode_target(prefixes[i]);
    } catch (const xf::Error& e) {
      throw xf::Error(options.target_prefix + ": line " + std::to_string(line_number) + ": " + e.what());
    }
  }
  if (options.stream) {
    StreamWriter writer(model, paragraphs, output_fd);
    xf::TranslateOptions streaming = options.cli.translate;
    streaming.callback = [&writer](const xf::StreamStep& step) { writer.on_step(step); };
    translator.translate_ids(sources, streaming, results, prefix_ids);
    return;
  }
  translator.translate_ids(sources, options.cli.translate, results, prefix_ids);
  const std::vector<xf::TranslationResult> lines_out = xf::join_translations(model, paragraphs, results);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    for (const xf::Hypothesis& h : lines_out[i].hypotheses) {
      std::string text;
      if (options.ids) {
        for (size_t k = 0; k < h.ids.size(); ++k) text += (k ? " " : "") + std::to_string(h.ids[k]);
      } else {
        text = h.text;
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
  xf::write_all(output_fd, out.data(), out.size(), "output");
}

int run(const Options& options_in) {
  Options options = options_in;
  auto model = xf::Model::open(options.cli.model_path, options.cli.model_access);
  if (!options.ids && !model->has_tokenizer())
    throw xf::Error(options.cli.model_path + ": the model has no tokenizer; use --ids");
  options.cli.finish(model.get());
  xf::Translator translator(model, options.cli.translator);
  xf::cli::SourceReader reader("xf-run", *model, options.cli.translator.max_source_len, options.ids,
                               options.cli.strict);
  int input_fd = STDIN_FILENO, output_fd = STDOUT_FILENO;
  if (!options.input.empty()) {
    input_fd = ::open(options.input.c_str(), O_RDONLY | O_CLOEXEC);
    if (input_fd < 0) throw xf::Error(options.input + ": cannot open the input: " + std::strerror(errno));
  }
  int prefix_fd = -1;
  const bool with_prefix = !options.target_prefix.empty();
  if (with_prefix) {
    prefix_fd = ::open(options.target_prefix.c_str(), O_RDONLY | O_CLOEXEC);
    if (prefix_fd < 0)
      throw xf::Error(options.target_prefix + ": cannot open the target prefixes: " + std::strerror(errno));
  }
  if (!options.output.empty()) {
    output_fd = ::open(options.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (output_fd < 0) throw xf::Error(options.output + ": cannot write the output: " + std::strerror(errno));
  }
  // Blocks of several batches when input is plentiful, so that sorting by length has
  // something to sort; fewer when the input pauses.
  const size_t block = static_cast<size_t>(options.cli.translator.max_batch) * 8;
  std::vector<std::string> lines, prefixes;
  std::vector<bool> cut;
  std::vector<xf::TokenTranslation> results;
  size_t first_line = 0;
  xf::cli::Progress progress("xf-run");
  const auto flush = [&] {
    if (lines.empty()) return;
    translate_block(translator, options, reader, lines, cut, prefixes, first_line, results, output_fd);
    uint64_t tokens = 0;  // results are by sentence
    for (const xf::TokenTranslation& r : results)
      if (!r.hypotheses.empty()) tokens += r.hypotheses.front().ids.size();
    progress.add(lines.size(), tokens);
    first_line += lines.size();
    lines.clear();
    cut.clear();
    prefixes.clear();
  };
  // Lines are held up to what the plan can use: the rest of a longer line is dropped as read.
  xf::cli::LineReader input(input_fd, reader.max_line_bytes());
  // A target prefix longer than the longest output is refused; its bytes are bounded alike.
  xf::cli::LineReader prefix_input(
      prefix_fd, model->source_bytes_for(static_cast<size_t>(translator.max_target_len())));
  std::string line;
  for (;;) {
    const xf::cli::LineReader::Status status = input.next(line, /*wait=*/lines.empty());
    if (status == xf::cli::LineReader::Status::end) break;
    if (status == xf::cli::LineReader::Status::paused) {
      flush();
      continue;
    }
    lines.push_back(line);
    cut.push_back(input.cut());
    if (with_prefix) {
      prefixes.emplace_back();
      const size_t line_number = first_line + lines.size();
      if (prefix_input.next(prefixes.back(), /*wait=*/true) == xf::cli::LineReader::Status::end)
        throw xf::Error(options.target_prefix + ": ends after " + std::to_string(line_number - 1) +
                        " lines, before the input");
      if (prefix_input.cut())
        throw xf::Error(options.target_prefix + ": line " + std::to_string(line_number) +
                        ": longer than the longest output of " + std::to_string(translator.max_target_len()) +
                        " tokens");
    }
    if (lines.size() == block) flush();
  }
  flush();
  if (prefix_fd >= 0) ::close(prefix_fd);
  if (output_fd != STDOUT_FILENO && ::close(output_fd) != 0)
    throw xf::Error(options.output + ": cannot write the output: " + std::strerror(errno));
  reader.print_summary(first_line);
  progress.finish(reader.truncated() + reader.unreadable());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGINT, SIGTERM, SIGHUP and SIGUSR1 end xf-run as by default, but taken by a thread of their
  // own: no handler ever interrupts a thread inside a kernel (stop_signals.h).
  xf::cli::block_stop_signals();
  return xf::cli::tool_main("xf-run", xf::cli::translator_tool_help(kUsage), argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
