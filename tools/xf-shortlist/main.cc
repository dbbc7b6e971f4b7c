// xf-shortlist: a lexical shortlist (Marian's lex text format) learned from a parallel corpus
// with the model's own tokenizers: IBM Model 1's p(target piece | source piece) by EM, each
// source piece's --top-k most probable targets (trainer/include/xf/trainer/shortlist.h).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../xf-run/translator_cli.h"
#include "tool_main.h"
#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/format/shortlist.h"
#include "xf/model.h"
#include "xf/trainer/data.h"
#include "xf/trainer/shortlist.h"

namespace {

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-shortlist --model MODEL.xfm --in CORPUS.tsv --out lex.s2t [options]

Learns which target pieces each source piece translates to from CORPUS (TSV source<TAB>target
or the CSV export, read as xf-train reads it; for a student, the distilled corpus of xf-distill),
segmented by MODEL's own tokenizers, and writes a lexical shortlist in Marian's lex text format:
one line "TARGET_PIECE SOURCE_PIECE PROBABILITY" per kept pair, by source piece, most probable
first. The probabilities are IBM Model 1's p(target | source), estimated by --iterations rounds
of EM (with the empty word, which takes the pieces no source piece explains); each source piece
keeps its --top-k most probable targets of at least --min-probability.
With the shortlist, a batch's output layer covers the candidates of its source pieces and the
--frequent first target ids (Marian's `first`: SentencePiece orders pieces by their score, so
the first ids are about the most frequent pieces; the summary line says how many of the
corpus's --frequent most frequent target pieces they hold, and how many first ids hold them
all). xf-convert MODEL.xfm -o OUT.xfm --shortlist lex.s2t --shortlist-first FREQUENT
--shortlist-best TOP_K stores it in a model; Marian reads it as
`--shortlist lex.s2t FREQUENT TOP_K`.

  --model FILE          the model whose tokenizers and vocabularies the shortlist is for
  --in FILE             the corpus (required)
  --out FILE            the lex file (required; written atomically)
  --src-lang L, --tgt-lang L
                        the direction, as xf-train's (default en fr; a TSV holds en<TAB>fr)
  --top-k K             targets kept per source piece (default 50)
  --frequent N          the first target ids always in (default 50; the summary's coverage)
  --iterations N        EM rounds (default 5)
  --min-probability P   targets below P are left out (default 0.0001)
  --skip-frequent       a source piece's --top-k counts only targets from id --frequent on (the
                        first ids are in every batch: a place given to one is a place lost);
                        read the file with --shortlist-first FREQUENT or more
  --binary              write Marian's binary form instead (marian-conv's lex.*.s2t.bin: the
                        model's ids, --frequent as its first, --top-k as its best; no
                        probabilities): a fifth of the text's size, read without the piece
                        lookups (xf-run --shortlist FILE; only for this model's vocabularies)

Exit status: 0 on success, 1 on bad input (corpus, model), 2 on a bad command line.
)";

struct Options {
  std::string model_path, in_path, out_path;
  xf::trainer::CorpusLanguages languages;
  int top_k = 50, frequent = 50, iterations = 5;
  float min_probability = 1e-4f;
  bool binary = false;
  bool skip_frequent = false;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] { return xf::cli::option_value(argc, argv, i); };
    if (arg == "--model") options.model_path = value();
    else if (arg == "--in") options.in_path = value();
    else if (arg == "--out") options.out_path = value();
    else if (arg == "--src-lang") options.languages.source = value();
    else if (arg == "--tgt-lang") options.languages.target = value();
    else if (arg == "--top-k") options.top_k = static_cast<int>(xf::cli::parse_integer(arg, value(), 1, 1 << 20));
    else if (arg == "--frequent") options.frequent = static_cast<int>(xf::cli::parse_integer(arg, value(), 0, 1 << 24));
    else if (arg == "--iterations") options.iterations = static_cast<int>(xf::cli::parse_integer(arg, value(), 1, 1000));
    else if (arg == "--binary") options.binary = true;
    else if (arg == "--skip-frequent") options.skip_frequent = true;
    else if (arg == "--min-probability") options.min_probability = xf::cli::parse_positive_number(arg, value(), 1.0f);
    else throw xf::cli::unknown_option(arg);
  }
  if (options.model_path.empty()) throw UsageError{"--model is required (try --help)"};
  if (options.in_path.empty()) throw UsageError{"--in is required (try --help)"};
  if (options.out_path.empty()) throw UsageError{"--out is required (try --help)"};
  return options;
}

// Marian's binary form (marian-conv's lex.*.s2t.bin) of the entries (by source id): each source
// id's targets ascending, the first `frequent` target ids always in.
std::vector<uint8_t> binary_lists(const std::vector<xf::trainer::ShortlistEntry>& entries, int frequent, int top_k) {
  xf::LexicalShortlist lists;
  lists.first_num = static_cast<uint32_t>(frequent);
  lists.best_num = static_cast<uint32_t>(top_k);
  for (size_t i = 0; i < entries.size();) {
    const int32_t source = entries[i].source;
    while (lists.source_ids() < static_cast<uint64_t>(source)) lists.offsets.push_back(lists.targets.size());
    const size_t first = lists.targets.size();
    for (; i < entries.size() && entries[i].source == source; ++i)
      lists.targets.push_back(static_cast<uint32_t>(entries[i].target));
    std::sort(lists.targets.begin() + static_cast<std::ptrdiff_t>(first), lists.targets.end());
    lists.offsets.push_back(lists.targets.size());
  }
  return xf::binary_shortlist_bytes(lists);
}

int run(const Options& options) {
  using namespace xf::trainer;
  auto model = xf::Model::open(options.model_path);
  if (!model->has_tokenizer()) throw xf::Error(options.model_path + ": the model has no tokenizer");
  const std::vector<TextPair> pairs = read_parallel_corpus(options.in_path, options.languages);
  std::vector<std::vector<int32_t>> sources, targets;
  sources.reserve(pairs.size());
  targets.reserve(pairs.size());
  for (const TextPair& pair : pairs) {
    sources.push_back(model->encode_source(pair.source));
    targets.push_back(model->encode_target(pair.target));
  }
  const xf::ModelConfig& config = model->config();
  const LexicalTable table =
      ibm_model1(sources, targets, config.source_vocab_size, config.target_vocab_size, options.iterations);
  const std::vector<ShortlistEntry> entries =
      top_targets(table, options.top_k, options.min_probability, options.skip_frequent ? options.frequent : 0);
  size_t sources_with_entries = 0;
  for (size_t i = 0; i < entries.size(); ++i)
    if (i == 0 || entries[i - 1].source != entries[i].source) ++sources_with_entries;
  if (options.binary) {
    const std::vector<uint8_t> bytes = binary_lists(entries, options.frequent, options.top_k);
    xf::write_file_atomically(options.out_path, bytes.data(), bytes.size());
  } else {
    std::string text;
    for (const ShortlistEntry& e : entries) {
      char probability[32];
      std::snprintf(probability, sizeof probability, "%.6g", e.probability);
      text += model->target_pieces(&e.target, 1).front() + " " + model->source_pieces(&e.source, 1).front() + " " +
              probability + "\n";
    }
    xf::write_file_atomically(options.out_path, text.data(), text.size());
  }
  // How well the first ids stand for the most frequent targets.
  const std::vector<int32_t> by_frequency = targets_by_frequency(targets, config.target_vocab_size);
  const size_t frequent = std::min<size_t>(static_cast<size_t>(options.frequent), by_frequency.size());
  size_t covered = 0;
  int32_t all_below = 0;  // the first all_below ids hold every one of them
  for (size_t i = 0; i < frequent; ++i) {
    covered += by_frequency[i] < options.frequent;
    all_below = std::max(all_below, by_frequency[i] + 1);
  }
  std::fprintf(stderr,
               "xf-shortlist: %zu pairs, %d EM rounds: %zu entries for %zu source pieces (at most %d each), "
               "written to %s; the first %d target ids hold %zu of the corpus's %zu most frequent target pieces "
               "(the first %d hold them all)\n",
               pairs.size(), options.iterations, entries.size(), sources_with_entries, options.top_k,
               options.out_path.c_str(), options.frequent, covered, frequent, all_below);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xf::cli::tool_main("xf-shortlist", kUsage, argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
