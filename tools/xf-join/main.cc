// xf-join: a test or dev set of long sentences made from a TSV of short ones, by joining 2-4
// of its distinct sources (and their references) the way xf-train --join-probability joins
// training pairs (plan_joins, trainer/src/data/batching.cc), so a model can be chosen on long
// input without a long corpus. With --modify, a casual version of the set instead: its sources
// as people type them, by the modifiers of xf-train --modify-* (text_modifiers.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/metrics.h"
#include "xf/trainer/data.h"
#include "xf/trainer/text_modifiers.h"
#include "tool_main.h"

namespace {

const char* const kUsage = R"(usage: xf-join --in FILE.tsv --out FILE.tsv [--seed N] [--max-pairs N] [--probability P]
       xf-join --in FILE.tsv --out FILE.tsv --modify LIST [--seed N]

Writes a TSV of longer sentence pairs made from FILE.tsv (source<TAB>target, no header). The
rows that share a source are its references (as xf-eval --ref-tsv groups them); the distinct
sources are taken in an order shuffled by --seed, and each output source is, with probability
--probability (default 1: every one), the next 2..--max-pairs (default 4) of them joined with
spaces, else one alone. Every input source is used once. A joined source gets as many
references as its part with the most: reference r joins reference r of each part (its last when
it has fewer). The output is one row per reference, ready for xf-eval --ref-tsv; the same input
and options give the same file.

  xf-join --in $XF_DATA/dev.tsv --out dev-long.tsv --seed 1

--modify LIST writes a casual version instead (nothing joined): every source with the comma-
separated modifiers of LIST, those of xf-train --modify-* at probability 1 (text_modifiers.h):
  lowercase             the source lowercased (references as written)
  uppercase, titlecase  source and references upper case / Each Word Capitalised
  no-final-punctuation  the source's final . ! ? ... dropped (references keep theirs)
  typo                  one typo in the source (two letters swapped, one dropped, one repeated
                        or a neighbouring key), drawn by --seed and the source's place
At most one of the three case modifiers. The rows keep their order (grouped by source as
xf-eval --ref-tsv groups them); two sources that become the same text become one source with
the references of both.

  xf-join --in $XF_DATA/test.tsv --out test-casual.tsv --modify lowercase,no-final-punctuation
  xf-join --in $XF_DATA/test.tsv --out test-typo.tsv --modify typo --seed 1

Exit status: 0 on success, 1 on bad input, 2 on a bad command line.
)";

using xf::cli::UsageError;

struct Options {
  std::string in_path, out_path;
  uint64_t seed = 1;
  size_t max_pairs = 4;
  double probability = 1;
  xf::trainer::ModifierDraw modify;  // --modify: every source gets these
  bool modifying = false;
  bool joining_option = false;  // --max-pairs or --probability given
};

// "lowercase,no-final-punctuation" -> the draw that applies them (a typo's kind and place are
// drawn per source later).
xf::trainer::ModifierDraw parse_modifiers(const std::string& option, const std::string& list) {
  using Case = xf::trainer::ModifierDraw::Case;
  xf::trainer::ModifierDraw draw;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    const Case before = draw.letter_case;
    if (name == "lowercase") draw.letter_case = Case::lower;
    else if (name == "uppercase") draw.letter_case = Case::upper;
    else if (name == "titlecase") draw.letter_case = Case::title;
    else if (name == "no-final-punctuation") draw.drop_final_punctuation = true;
    else if (name == "typo") draw.typo = true;
    else
      throw UsageError{option + ": '" + name + "' is not one of lowercase, uppercase, titlecase, "
                       "no-final-punctuation, typo"};
    if (before != Case::as_written && draw.letter_case != before)
      throw UsageError{option + ": at most one of lowercase, uppercase, titlecase"};
    start = comma + 1;
  }
  return draw;
}

double parse_number(const std::string& option, const std::string& value, double low, double high) {
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(number >= low && number <= high))
    throw UsageError{option + " expects a number from " + std::to_string(static_cast<long long>(low)) +
                     " to " + std::to_string(static_cast<long long>(high)) + ", got '" + value + "'"};
  return number;
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] { return xf::cli::option_value(argc, argv, i); };
    if (arg == "--in") options.in_path = value();
    else if (arg == "--out") options.out_path = value();
    else if (arg == "--seed") options.seed = static_cast<uint64_t>(parse_number(arg, value(), 0, 1e15));
    else if (arg == "--max-pairs") {
      options.max_pairs = static_cast<size_t>(parse_number(arg, value(), 2, 64));
      options.joining_option = true;
    } else if (arg == "--probability") {
      options.probability = parse_number(arg, value(), 0, 1);
      options.joining_option = true;
    } else if (arg == "--modify") {
      options.modify = parse_modifiers(arg, value());
      options.modifying = true;
    }
    else throw xf::cli::unknown_option(arg);
  }
  if (options.in_path.empty() || options.out_path.empty())
    throw UsageError{"needs --in FILE and --out FILE (try --help)"};
  if (options.modifying && options.joining_option)
    throw UsageError{"--modify writes a casual set, nothing joined: leave out --max-pairs and --probability"};
  return options;
}

// The casual version of the set (--modify): each source and its references as modify_pair
// makes them, the typo (when asked) drawn from a generator of the source's own.
std::string casual_rows(const xf::metrics::GroupedReferences& grouped, const Options& options) {
  std::string text;
  for (size_t i = 0; i < grouped.sources.size(); ++i) {
    xf::trainer::ModifierDraw draw = options.modify;
    xf::trainer::SplitMix64 rng(xf::trainer::SplitMix64(options.seed * 0x9e3779b97f4a7c15ull + i).next());
    draw.typo_kind = static_cast<xf::trainer::TypoKind>(rng.below(xf::trainer::kTypoKinds));
    draw.typo_choice = rng.next();
    for (const std::string& reference : grouped.references[i]) {
      const xf::trainer::TextPair pair = xf::trainer::modify_pair({grouped.sources[i], reference}, draw);
      text += pair.source + "\t" + pair.target + "\n";
    }
  }
  return text;
}

int run(const Options& options) {
  namespace m = xf::metrics;
  namespace t = xf::trainer;
  const m::GroupedReferences grouped = m::group_references_by_source(options.in_path);
  if (grouped.sources.empty()) throw xf::Error(options.in_path + ": no sentence pairs");
  if (options.modifying) {
    const std::string text = casual_rows(grouped, options);
    xf::write_file_atomically(options.out_path, text.data(), text.size());
    std::fprintf(stderr, "xf-join: %zu sources modified, written to %s\n", grouped.sources.size(),
                 options.out_path.c_str());
    return 0;
  }
  // plan_joins needs only each pair's lengths: words stand in for tokens (no length limit here).
  t::TokenizedCorpus lengths;
  for (size_t i = 0; i < grouped.sources.size(); ++i) {
    lengths.add(std::vector<int32_t>(static_cast<size_t>(m::count_words(grouped.sources[i])), 0),
                std::vector<int32_t>(static_cast<size_t>(m::count_words(grouped.references[i][0])), 0));
  }
  t::JoinOptions joins;
  joins.probability = options.probability;
  joins.max_pairs = options.max_pairs;
  const std::vector<t::BatchIndices> groups = t::plan_joins(lengths, joins, options.seed, /*epoch=*/0);

  std::string text;
  for (const t::BatchIndices& group : groups) {
    std::string source;
    size_t reference_count = 0;
    for (uint32_t i : group) {
      source += (source.empty() ? "" : " ") + grouped.sources[i];
      reference_count = std::max(reference_count, grouped.references[i].size());
    }
    for (size_t r = 0; r < reference_count; ++r) {
      std::string reference;
      for (uint32_t i : group) {
        const auto& references = grouped.references[i];
        reference += (reference.empty() ? "" : " ") + references[std::min(r, references.size() - 1)];
      }
      text += source + "\t" + reference + "\n";
    }
  }
  xf::write_file_atomically(options.out_path, text.data(), text.size());
  std::fprintf(stderr, "xf-join: %zu sources -> %zu (%zu joined), written to %s\n",
               grouped.sources.size(), groups.size(),
               static_cast<size_t>(std::count_if(groups.begin(), groups.end(),
                                                 [](const auto& g) { return g.size() > 1; })),
               options.out_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xf::cli::tool_main("xf-join", kUsage, argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
