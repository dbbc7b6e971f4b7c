// xf-distill: sequence-level distillation's corpus. Translates a parallel corpus's sources with
// a teacher model through the runtime and writes them with the teacher's outputs as targets, a
// TSV that xf-train reads; degenerate outputs are dropped; a killed run resumes where its last
// chunk was recorded (trainer/include/xf/trainer/distillation.h).
#include <sys/stat.h>

#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../xf-run/translator_cli.h"
#include "progress.h"
#include "stop_signals.h"
#include "xf/error.h"
#include "xf/trainer/data.h"
#include "xf/trainer/distillation.h"
#include "xf/translator.h"

namespace {

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-distill --model TEACHER.xfm --in CORPUS.tsv --out DISTILLED.tsv [options]

Translates the sources of CORPUS (TSV source<TAB>target, or the CSV export, read as xf-train
reads it) with the teacher and writes DISTILLED.tsv: each source with the teacher's translation
as its target, in the corpus's order and columns, for xf-train --train. Each source is
translated whole (not split into sentences: a training pair is one example) with the teacher's
own decoding settings (its file's decoding.* defaults, else beam 4), which the options below
override. Outputs that are degenerate are dropped and counted:
  empty         no words
  length ratio  the longer of source and output has more than --max-length-ratio (default 3)
                times the words of the shorter, and at least 6 words
  repeats       some n-gram of --repeat-ngram (default 3) words occurs more than --max-repeats
                (default 2) times in the output
A source longer than --max-source-len is not translated (counted, no output).
With --n-best N (<= --beam), the teacher's N best are scored by sentence BLEU against the
corpus's target and the best of those that are not degenerate is kept (Bergamot's choice).

Resuming: the pairs are done in chunks of --chunk (default 8 x --max-batch); after each, the
rows are appended to DISTILLED.tsv, fsync'ed, and DISTILLED.tsv.progress (the settings, the
pairs done, the output's length, the counts) is replaced atomically. Run the same command again
after a kill: it cuts DISTILLED.tsv back to the recorded length (a chunk cut short, a torn last
line) and goes on from the next pair, so no pair is lost or written twice. A run with other
settings is refused; a finished run says so and writes nothing. DISTILLED.tsv.progress stays as
the record of the run (remove both files to start again).

  --in FILE             the corpus (required)
  --out FILE            the distilled TSV (required)
  --src-lang L, --tgt-lang L
                        the direction, as xf-train's (default en fr; a TSV holds en<TAB>fr)
  --limit N             only the corpus's first N pairs (default: all)
  --chunk N             pairs a chunk (default 8 x --max-batch)
  --max-length-ratio R  (0: no check), --repeat-ngram N (0: no check), --max-repeats N
%s
On stderr: a progress line every few seconds while it is a terminal, and at the end a summary:
pairs kept, dropped by reason, not translated, and (n-best) how many kept outputs were not the
teacher's 1-best.
Exit status: 0 on success (a finished run included), 1 on bad input (corpus, model, a progress
record of other settings, an output without a record), 2 on a bad command line.
)";

struct Options {
  xf::cli::TranslatorCli cli;
  std::string in_path, out_path;
  xf::trainer::CorpusLanguages languages;
  uint64_t limit = 0;  // 0: all
  int chunk = 0;       // 0: 8 x max_batch
  xf::trainer::DegenerateFilters filters;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options.cli.parse(argc, argv, i)) continue;
    const auto value = [&] { return xf::cli::option_value(argc, argv, i); };
    if (arg == "--in") options.in_path = value();
    else if (arg == "--out") options.out_path = value();
    else if (arg == "--src-lang") options.languages.source = value();
    else if (arg == "--tgt-lang") options.languages.target = value();
    else if (arg == "--limit") options.limit = static_cast<uint64_t>(xf::cli::parse_integer(arg, value(), 1, 1L << 40));
    else if (arg == "--chunk") options.chunk = static_cast<int>(xf::cli::parse_integer(arg, value(), 1, 1 << 24));
    else if (arg == "--max-length-ratio") options.filters.max_length_ratio = xf::cli::parse_number(arg, value());
    else if (arg == "--repeat-ngram") options.filters.repeat_ngram = static_cast<int>(xf::cli::parse_integer(arg, value(), 0, 64));
    else if (arg == "--max-repeats") options.filters.max_repeats = static_cast<int>(xf::cli::parse_integer(arg, value(), 1, 1 << 20));
    else throw xf::cli::unknown_option(arg);
  }
  if (options.cli.model_path.empty()) throw UsageError{"--model is required (try --help)"};
  if (options.in_path.empty()) throw UsageError{"--in is required (try --help)"};
  if (options.out_path.empty()) throw UsageError{"--out is required (try --help)"};
  if (options.filters.max_length_ratio > 0 && options.filters.max_length_ratio < 1)
    throw UsageError{"--max-length-ratio expects 0 (no check) or a ratio of at least 1"};
  if (options.cli.translate.sampling()) throw UsageError{"--sampling-topk: distillation keeps the teacher's search"};
  options.cli.translate.disable_sentence_splitting = true;
  options.cli.finish(nullptr);
  return options;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// An option given, or "model" (the teacher's default applies).
template <typename T>
std::string given(const std::optional<T>& value) {
  if (!value) return "model";
  if constexpr (std::is_enum_v<T>) return std::to_string(static_cast<int>(*value));
  else return std::to_string(*value);
}

// What a resumed run must share with the run it continues: everything that changes its rows.
std::string settings_of(const Options& o) {
  const xf::TranslateOptions& t = o.cli.translate;
  const auto number = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return std::string(text);
  };
  return "in=" + o.in_path + "(" + std::to_string(file_size(o.in_path)) + " bytes) model=" + o.cli.model_path + "(" +
         std::to_string(file_size(o.cli.model_path)) + " bytes) " + o.languages.source + "-" + o.languages.target +
         " limit=" + std::to_string(o.limit) + " chunk=" + std::to_string(o.chunk) + " beam=" + std::to_string(t.beam) +
         " n_best=" + std::to_string(t.n_best) + " length_penalty=" + given(t.length_penalty) +
         " normalization=" + given(t.length_normalization) + " repetition_penalty=" + given(t.repetition_penalty) +
         " no_repeat_ngram=" + given(t.no_repeat_ngram_size) + " decoding_length=" +
         std::to_string(t.min_decoding_length) + "," + std::to_string(t.max_decoding_length) +
         " disable_unk=" + std::to_string(t.disable_unk) + " loop_guard=" + std::to_string(!t.disable_loop_guard) +
         " max_len=" + number(t.max_len_a) + "," +
         std::to_string(t.max_len_b) + " dtype=" + given(o.cli.translator.weight_dtype) +
         " ratio=" + number(o.filters.max_length_ratio) + " repeat=" + std::to_string(o.filters.repeat_ngram) + "," +
         std::to_string(o.filters.max_repeats) + " max_source_len=" + std::to_string(o.cli.translator.max_source_len);
}

// A field of the TSV: the teacher's output on one line, without tabs.
std::string one_field(std::string text) {
  for (char& c : text)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return text;
}

void print_counts(const xf::trainer::DistillProgress& p, bool n_best) {
  using xf::trainer::DropReason;
  std::fprintf(stderr,
               "xf-distill: %llu of %llu pairs done: %llu kept, dropped %llu empty, %llu length ratio, %llu repeated "
               "n-grams; %llu not translated (longer than --max-source-len)",
               static_cast<unsigned long long>(p.pairs_done), static_cast<unsigned long long>(p.pairs_total),
               static_cast<unsigned long long>(p.dropped[static_cast<int>(DropReason::kept)]),
               static_cast<unsigned long long>(p.dropped[static_cast<int>(DropReason::empty)]),
               static_cast<unsigned long long>(p.dropped[static_cast<int>(DropReason::length_ratio)]),
               static_cast<unsigned long long>(p.dropped[static_cast<int>(DropReason::repeats)]),
               static_cast<unsigned long long>(p.source_too_long));
  if (n_best) std::fprintf(stderr, "; %llu kept outputs not the 1-best", static_cast<unsigned long long>(p.nbest_changed));
  std::fprintf(stderr, "\n");
}

int run(const Options& options_in) {
  using namespace xf::trainer;
  Options options = options_in;
  auto model = xf::Model::open(options.cli.model_path, options.cli.model_access);
  if (!model->has_tokenizer()) throw xf::Error(options.cli.model_path + ": the teacher has no tokenizer");
  options.cli.finish(model.get());
  if (options.chunk == 0) options.chunk = 8 * options.cli.translator.max_batch;
  std::vector<TextPair> pairs = read_parallel_corpus(options.in_path, options.languages);
  if (options.limit > 0 && pairs.size() > options.limit) pairs.resize(options.limit);
  const bool source_first = options.languages.source == options.languages.tsv_first;
  const bool n_best = options.cli.translate.n_best > 1;

  ResumableOutput output(options.out_path, settings_of(options), pairs.size());
  if (output.resumed())
    std::fprintf(stderr, "xf-distill: resuming %s at pair %llu of %llu\n", options.out_path.c_str(),
                 static_cast<unsigned long long>(output.progress().pairs_done),
                 static_cast<unsigned long long>(pairs.size()));
  if (output.progress().pairs_done == pairs.size() && output.resumed()) {
    std::fprintf(stderr, "xf-distill: %s is already complete\n", options.out_path.c_str());
    print_counts(output.progress(), n_best);
    return 0;
  }
  xf::Translator translator(model, options.cli.translator);
  const size_t max_tokens = static_cast<size_t>(options.cli.translator.max_source_len - 1);
  xf::cli::Progress progress("xf-distill");
  std::vector<std::vector<int32_t>> sources;
  std::vector<size_t> translated;  // pair index of each source
  std::vector<xf::TokenTranslation> results;
  for (uint64_t begin = output.progress().pairs_done; begin < pairs.size();) {
    const uint64_t end = std::min<uint64_t>(pairs.size(), begin + static_cast<uint64_t>(options.chunk));
    DistillProgress done = output.progress();
    sources.clear();
    translated.clear();
    for (uint64_t i = begin; i < end; ++i) {
      bool too_long = false;
      std::vector<int32_t> ids = model->encode_source(pairs[i].source, max_tokens, &too_long);
      if (too_long || ids.size() > max_tokens) {
        ++done.source_too_long;
        continue;
      }
      sources.push_back(std::move(ids));
      translated.push_back(i);
    }
    translator.translate_ids(sources, options.cli.translate, results);
    std::string rows;
    uint64_t tokens = 0;
    std::vector<std::string> candidates;
    std::vector<size_t> fit;  // candidates' indices that are not degenerate
    for (size_t k = 0; k < translated.size(); ++k) {
      const TextPair& pair = pairs[translated[k]];
      candidates.clear();
      fit.clear();
      DropReason first_reason = DropReason::empty;
      for (const xf::TokenHypothesis& h : results[k].hypotheses) {
        candidates.push_back(one_field(model->decode_target(h.ids.data(), h.ids.size())));
        const DropReason reason = degenerate_output(pair.source, candidates.back(), options.filters);
        if (candidates.size() == 1) first_reason = reason;
        if (reason == DropReason::kept) fit.push_back(candidates.size() - 1);
      }
      if (fit.empty()) {
        ++done.dropped[static_cast<int>(first_reason)];
        continue;
      }
      size_t chosen = fit.front();
      if (n_best) {
        std::vector<std::string> fit_texts;
        for (size_t c : fit) fit_texts.push_back(candidates[c]);
        chosen = fit[best_by_sentence_bleu(fit_texts, pair.target)];
      }
      if (chosen != 0) ++done.nbest_changed;
      ++done.dropped[static_cast<int>(DropReason::kept)];
      tokens += results[k].hypotheses[chosen].ids.size();
      const std::string& text = candidates[chosen];
      const std::string source = one_field(pair.source);
      rows += source_first ? source + "\t" + text + "\n" : text + "\t" + source + "\n";
    }
    done.pairs_done = end;
    output.commit(rows, done);
    progress.add(end - begin, tokens);
    begin = end;
  }
  print_counts(output.progress(), n_best);
  progress.finish(0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A stop signal ends xf-distill as by default (a resumed run goes on from the last chunk), taken
  // by a thread of its own: no handler interrupts a thread inside a kernel (stop_signals.h).
  xf::cli::block_stop_signals();
  return xf::cli::tool_main("xf-distill", xf::cli::translator_tool_help(kUsage), argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
