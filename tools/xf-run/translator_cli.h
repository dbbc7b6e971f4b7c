#pragma once
// Command-line options shared by xf-run and xf-bench: the model, the translator's plan and the
// decoding options. Header-only; each tool includes it.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "tool_main.h"
#include "xf/error.h"
#include "xf/translator.h"

namespace xf::cli {

inline long parse_integer(const std::string& option, const std::string& value, long min, long max) {
  char* end = nullptr;
  errno = 0;
  const long number = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || number < min || number > max)
    throw UsageError{option + " expects an integer from " + std::to_string(min) + " to " +
                     std::to_string(max) + ", got '" + value + "'"};
  return number;
}

inline float parse_number(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const float number = std::strtof(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(number >= 0.0f && number < 1e6f))
    throw UsageError{option + " expects a non-negative number, got '" + value + "'"};
  return number;
}

// A number above 0 and at most `max` (a temperature, a penalty, a probability).
inline float parse_positive_number(const std::string& option, const std::string& value, float max) {
  char* end = nullptr;
  const float number = std::strtof(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(number > 0.0f && number <= max)) {
    char range[64];
    std::snprintf(range, sizeof(range), "%g", max);
    throw UsageError{option + " expects a number above 0 and at most " + range + ", got '" + value + "'"};
  }
  return number;
}

struct TranslatorCli {
  std::string model_path;
  TranslatorOptions translator;
  TranslateOptions translate;
  bool max_source_len_given = false;
  bool strict = false;
  FileAccess model_access = FileAccess::map;

  // Consumes argv[i] (and its value) when it is one of the shared options; returns false
  // otherwise. Throws UsageError on a bad value.
  bool parse(int argc, char** argv, int& i) {
    const std::string arg = argv[i];
    const auto value = [&] { return option_value(argc, argv, i); };
    if (arg == "--model") {
      model_path = value();
    } else if (arg == "--device") {
      const std::string name = value();
      if (name != "cpu" && name != "cuda") throw UsageError{"--device expects cpu or cuda, got '" + name + "'"};
      translator.device = parse_device(name);
    } else if (arg == "--beam") {
      translator.max_beam = static_cast<int>(parse_integer(arg, value(), 1, 64));
    } else if (arg == "--n-best") {
      translate.n_best = static_cast<int>(parse_integer(arg, value(), 1, 64));
    } else if (arg == "--max-batch" || arg == "--batch") {
      translator.max_batch = static_cast<int>(parse_integer(arg, value(), 1, 4096));
    } else if (arg == "--threads") {
      translator.threads = static_cast<int>(parse_integer(arg, value(), 0, 256));
    } else if (arg == "--max-source-len") {
      translator.max_source_len = static_cast<int>(parse_integer(arg, value(), 1, 1 << 20));
      max_source_len_given = true;
    } else if (arg == "--dtype") {
      const std::string name = value();
      if (name == "f32") translator.weight_dtype = DType::f32;
      else if (name == "int8") translator.weight_dtype = DType::int8;
      else if (name == "f16") translator.weight_dtype = DType::f16;
      else if (name != "stored") throw UsageError{"--dtype expects stored, f32, f16 or int8, got '" + name + "'"};
    } else if (arg == "--shortlist") {
      translator.shortlist = value();
      if (translator.shortlist.empty()) throw UsageError{"--shortlist expects a file or none, got ''"};
    } else if (arg == "--shortlist-first") {
      translator.shortlist_first = static_cast<int>(parse_integer(arg, value(), 0, 1 << 22));
    } else if (arg == "--shortlist-best") {
      translator.shortlist_best = static_cast<int>(parse_integer(arg, value(), 1, 1 << 22));
    } else if (arg == "--shortlist-threshold") {
      translator.shortlist_threshold = parse_number(arg, value());
    } else if (arg == "--strict") {
      strict = true;
    } else if (arg == "--no-mmap") {
      model_access = FileAccess::read;
    } else if (arg == "--length-penalty") {
      translate.length_penalty = parse_number(arg, value());
    } else if (arg == "--length-normalization") {
      const std::string name = value();
      if (name != "gnmt" && name != "power")
        throw UsageError{"--length-normalization expects gnmt or power, got '" + name + "'"};
      translate.length_normalization = parse_length_normalization(name);
    } else if (arg == "--max-len-a") {
      translate.max_len_a = translator.max_len_a = parse_number(arg, value());
    } else if (arg == "--max-len-b") {
      translate.max_len_b = translator.max_len_b = static_cast<int>(parse_integer(arg, value(), 0, 1 << 20));
    } else if (arg == "--max-decoding-length") {
      translate.max_decoding_length = static_cast<int>(parse_integer(arg, value(), 0, 1 << 20));
    } else if (arg == "--min-decoding-length") {
      translate.min_decoding_length = static_cast<int>(parse_integer(arg, value(), 0, 1 << 20));
    } else if (arg == "--disable-unk") {
      translate.disable_unk = true;
    } else if (arg == "--disable-loop-guard") {
      translate.disable_loop_guard = true;
    } else if (arg == "--disable-sentence-splitting") {
      translate.disable_sentence_splitting = true;
    } else if (arg == "--max-batch-size") {
      translate.max_batch_size = static_cast<int>(parse_integer(arg, value(), 0, 1 << 30));
    } else if (arg == "--batch-type") {
      const std::string name = value();
      if (name != "examples" && name != "tokens") throw UsageError{"--batch-type expects examples or tokens, got '" + name + "'"};
      translate.batch_type = parse_batch_type(name);
    } else if (arg == "--sampling-topk") {
      translate.sampling_topk = static_cast<int>(parse_integer(arg, value(), 0, 1 << 30));
    } else if (arg == "--sampling-topp") {
      translate.sampling_topp = parse_positive_number(arg, value(), 1.0f);
    } else if (arg == "--sampling-temperature") {
      translate.sampling_temperature = parse_positive_number(arg, value(), 1e6f);
    } else if (arg == "--seed") {
      translate.seed = static_cast<uint64_t>(parse_integer(arg, value(), 0, 0x7fffffffL));
    } else if (arg == "--repetition-penalty") {
      translate.repetition_penalty = parse_positive_number(arg, value(), 1e6f);
    } else if (arg == "--no-repeat-ngram-size") {
      translate.no_repeat_ngram_size = static_cast<int>(parse_integer(arg, value(), 0, 1 << 20));
    } else {
      return false;
    }
    return true;
  }

  // After parsing: checks what is required and fits the plan to the model, whose decoding
  // settings are the defaults of the options not given (the Translator applies the others).
  void finish(const Model* model) {
    if (model != nullptr) translator = translator.with_defaults(model->decoding_defaults());
    if (translator.max_beam != 0 && translate.n_best > translator.max_beam)
      throw UsageError{"--n-best " + std::to_string(translate.n_best) + " exceeds --beam " +
                       std::to_string(translator.max_beam)};
    if (translate.sampling() && translator.max_beam > 1)
      throw UsageError{"--sampling-topk " + std::to_string(translate.sampling_topk) +
                       " needs --beam 1 (sampling replaces the beam), got beam " +
                       std::to_string(translator.max_beam)};
    translate.beam = translator.max_beam;
    if (model != nullptr && !max_source_len_given)
      translator.max_source_len = static_cast<int>(
          std::min<uint32_t>(static_cast<uint32_t>(translator.max_source_len), model->config().max_positions));
  }
};

// Space-separated token ids (no EOS) of a vocabulary of `vocab_size` ids (`which`: "source" or
// "target", for the message), appended to `ids`. Throws xf::Error naming the bad word.
inline void parse_token_ids(const std::string& line, uint32_t vocab_size, const char* which,
                            std::vector<int32_t>& ids) {
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
    errno = 0;
    const long id = std::strtol(word.c_str(), &stop, 10);
    if (*stop != '\0' || errno != 0 || id < 0 || id > INT32_MAX) throw Error("'" + word + "' is not a token id");
    if (static_cast<uint32_t>(id) >= vocab_size)
      throw Error("token id " + word + " is outside the " + which + " vocabulary of " + std::to_string(vocab_size));
    ids.push_back(static_cast<int32_t>(id));
    i = end;
  }
}

// Input lines -> source ids under the tools' rules for bad lines (never lose a line): a line
// longer than the plan is truncated to --max-source-len; a line that cannot be read (invalid
// UTF-8; with --ids, a word that is not an id of the vocabulary) gives no source. Each gets a
// warning on stderr naming its line; with --strict either is an xf::Error instead.
// Memory stays bounded by the plan, not by the input: lines are read with a LineReader capped at
// max_line_bytes(), and only the head of a line that --max-source-len tokens can use is
// tokenized.
class SourceReader {
 public:
  SourceReader(const char* tool, const Model& model, int max_source_len, bool ids, bool strict)
      : tool_(tool), model_(model), max_source_len_(max_source_len), ids_(ids), strict_(strict) {}

  // The most bytes of a line the tool needs to hold: what max_source_len tokens can come from
  // (text), or max_source_len ids of up to 10 digits and a separator each (--ids).
  size_t max_line_bytes() const {
    const size_t tokens = static_cast<size_t>(max_source_len_);
    return ids_ ? tokens * 16 : model_.source_bytes_for(tokens);
  }

  // Fills `source`; false when the line is unreadable (then `source` is empty). cut: the line
  // was longer than max_line_bytes() and `line` is its head.
  bool read(const std::string& line, bool cut, size_t line_number, std::vector<int32_t>& source) {
    source.clear();
    const std::string where = "line " + std::to_string(line_number);
    const size_t max_tokens = static_cast<size_t>(max_source_len_ - 1);
    bool truncated = cut;
    try {
      if (ids_) {
        // A cut line may end inside an id: only whole words count.
        const size_t whole = cut ? line.find_last_of(" \t") : std::string::npos;
        parse_ids(whole == std::string::npos ? line : line.substr(0, whole), source);
      } else {
        bool more = false;
        source = model_.encode_source(line, max_tokens, &more);
        truncated |= more;
      }
    } catch (const Error& e) {
      if (strict_) throw Error(where + ": " + e.what());
      std::fprintf(stderr, "%s: warning: %s: %s; its output is empty\n", tool_, where.c_str(), e.what());
      source.clear();
      ++unreadable_;
      return false;
    }
    if (source.size() > max_tokens) truncated = true;
    if (truncated) {
      const std::string problem = "more than --max-source-len " + std::to_string(max_source_len_) +
                                  " tokens with EOS" +
                                  (cut ? " (" + std::to_string(line.size()) + " bytes of it read)" : "");
      if (strict_) throw Error(where + ": " + problem);
      std::fprintf(stderr, "%s: warning: %s: %s; truncated\n", tool_, where.c_str(), problem.c_str());
      if (source.size() > max_tokens) source.resize(max_tokens);
      ++truncated_;
    }
    return true;
  }

  size_t truncated() const { return truncated_; }
  size_t unreadable() const { return unreadable_; }
  // One line on stderr when some line had a problem: how many of `lines`, by kind.
  void print_summary(size_t lines) const {
    if (truncated_ + unreadable_ == 0) return;
    std::fprintf(stderr, "%s: %zu of %zu lines had problems: %zu truncated to --max-source-len %d, %zu unreadable\n",
                 tool_, truncated_ + unreadable_, lines, truncated_, max_source_len_, unreadable_);
  }

 private:
  void parse_ids(const std::string& line, std::vector<int32_t>& ids) const {
    parse_token_ids(line, model_.config().source_vocab_size, "source", ids);
  }

  const char* tool_;
  const Model& model_;
  int max_source_len_;
  bool ids_, strict_;
  size_t truncated_ = 0, unreadable_ = 0;
};

// The help text of the shared options.
inline const char* translator_options_help();

// A tool's help: `usage` with its "%s" replaced by the shared options' help.
inline std::string translator_tool_help(const std::string& usage) {
  const size_t at = usage.find("%s");
  return usage.substr(0, at) + translator_options_help() + usage.substr(at + 2);
}

inline const char* translator_options_help() {
  return R"(  --model FILE          the .xfm model (required)
  --device cpu|cuda     where to run (default cpu)
  --beam N              beam size; 1 is greedy search (default: the model's, else 4)
  --n-best N            hypotheses per sentence, <= beam (default 1)
  --max-batch N         sentences decoded together (default 32; --batch is the same)
  --threads N           CPU threads; 0: every core (default 1)
  --max-source-len N    longest source in tokens with EOS (default 256, at most the model's
                        max_positions); a longer line is truncated to it, with a warning
  --strict              stop at the first line that is too long or unreadable (invalid UTF-8,
                        a bad token id) with exit status 1, instead of warning and going on
  --no-mmap             read the model file into memory instead of mapping it, so that the
                        file may be replaced or changed while the program runs
  --dtype stored|f32|f16|int8
                        weight matrices as stored in the file (default; f16/bf16 are widened to
                        f32 on the CPU, computed in f16 on CUDA), or converted at load: f32, int8
                        with per-row scales (CPU only), or f16 (CUDA only: f16 compute)
  --shortlist FILE|none a lexical shortlist (Marian's): the output layer of each batch covers
                        only the target pieces its source can translate to. Default: the
                        model's own, if its file has one; none: never; FILE: Marian's binary
                        lex.*.s2t.bin (marian-conv) or text lex.s2t (extract_lex). CPU only
  --shortlist-first N, --shortlist-best N, --shortlist-threshold P
                        a text FILE pruned as Marian's --shortlist FILE N N P: target ids below
                        the first N always in, the best N candidates of each source piece, each
                        with a probability above P (defaults 100, 100, 0); a binary file keeps
                        its own
  --length-penalty A    length penalty alpha (default: the model's, else 0.6)
  --length-normalization gnmt|power
                        a hypothesis's score: log-probability / ((5 + length) / 6)^A (gnmt,
                        GNMT's) or / length^A (power: Marian's normalize, transformers'
                        length_penalty); length counts EOS (default: the model's, else gnmt)
  --max-len-a A, --max-len-b B
                        longest output: A * source tokens + B (default 1 * source + 50)
  --max-decoding-length N
                        at most N output tokens, EOS included (default 0: the model's, else
                        no cap)
  --min-decoding-length N
                        at least N output tokens before EOS (default 0)
  --disable-unk         never output the unknown token
  --disable-loop-guard  let a hypothesis longer than its source repeat a 4-token phrase a third
                        time (by default it ends before its second turn; see runtime/README.md)
  --disable-sentence-splitting
                        translate each text line whole (by default a line is split into
                        sentences, translated in one batch and joined with its own spacing)
  --max-batch-size N, --batch-type examples|tokens
                        cut batches at N sentences, or at N padded source tokens (sentences x
                        longest); at most --max-batch sentences (default 0: --max-batch)
  --sampling-topk K     sample the next token from the K most likely (0: all; default 1: no
                        sampling); needs --beam 1
  --sampling-topp P     ... from the smallest set of them holding P of the probability (default 1)
  --sampling-temperature T
                        ... with probabilities p^(1/T) (default 1)
  --seed N              the sampling's seed: the same seed, the same output (default 0)
  --repetition-penalty P
                        logits of tokens already output divided by P (multiplied when negative;
                        default: the model's, else 1: off)
  --no-repeat-ngram-size N
                        never repeat an n-gram of N tokens in an output (default: the model's,
                        else 0: off)
The model's defaults are the decoding settings stored in its metadata (decoding.beam,
decoding.length_penalty, ...; xf-inspect shows them); an option given here wins.
)";
}

}  // namespace xf::cli
