// xf-eval: BLEU and chrF2 of a hypothesis file against references, as sacreBLEU computes them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tool_main.h"
#include "xf/error.h"
#include "xf/metrics.h"

namespace {

using xf::cli::UsageError;

const char* const kUsage = R"(usage: xf-eval --hyp FILE --ref FILE [--ref FILE...] [--json]
       xf-eval --hyp FILE --ref-tsv FILE [--source-column N] [--target-column N] [--json]
       xf-eval --ref-tsv FILE --print-sources [--source-column N] [--target-column N]
       xf-eval ... --by-length [--src FILE] [--length-buckets 5,10,15,25]
       xf-eval --hyp FILE --ref-tsv FILE --casual-tsv FILE --casual-hyp FILE [...]

Scores a hypothesis file (one translation a line, UTF-8) with BLEU and chrF2 exactly as
sacreBLEU 2.x does by default (13a tokenization, 4-grams, exp smoothing; chrF: 6 character
n-grams, beta 2, whitespace removed). Prints, like sacreBLEU:
  BLEU = 34.56 70.1/45.2/30.3/21.0 (BP = 0.980 ratio = 0.980 hyp_len = 1234 ref_len = 1259)
  chrF2 = 55.67

  --hyp FILE            hypotheses, one a line
  --ref FILE            references parallel to the hypotheses; repeat for several references
  --ref-tsv FILE        references from a TSV file (no header): rows that share a source text
                        are that source's references. The hypothesis file then holds one line
                        per DISTINCT source, in order of first appearance in the TSV.
  --source-column N     TSV column of the source text (default 0)
  --target-column N     TSV column of the reference translation (default 1)
  --print-sources       print the distinct TSV sources in that order, one a line, and exit
                        (e.g. xf-eval --ref-tsv test.tsv --print-sources | xf-run ... > hyp.txt)
  --by-length           also score the sentences by the number of words of their source
                        (whitespace-separated), each bucket as a corpus of its own, printed
                        as a table (| source words | sentences | BLEU | chrF2 |) after the
                        totals; an empty bucket shows '-' (JSON: null). The sources come from
                        --ref-tsv, or from --src with --ref
  --src FILE            sources parallel to the hypotheses (for --by-length with --ref)
  --length-buckets LIST upper edges of the buckets, ascending (default 5,10,15,25: 1-5, 6-10,
                        11-15, 16-25 and 26+ words)
  --casual-tsv FILE     a casual version of the --ref-tsv set (xf-join --modify: lowercase,
  --casual-hyp FILE     no final punctuation, typos) and the translations of its distinct
                        sources; each pair of them is scored too and shown beside the clean
                        score, with its difference, in a table (| set | sentences | BLEU |
                        chrF2 | BLEU - clean |) after the totals (JSON: "casual"). Repeat the
                        pair for several versions, given in the same order
  --json                print the scores as one JSON object at full precision

Files are split on '\n' (CRLF accepted). Exit status: 0 on success, 1 on bad input (missing
file, invalid UTF-8, line counts that disagree) or when the output cannot be written, 2 on a
bad command line.
)";

struct Options {
  std::string hyp_path;
  std::vector<std::string> ref_paths;
  std::string ref_tsv_path;
  int source_column = 0;
  int target_column = 1;
  bool print_sources = false;
  bool json = false;
  bool by_length = false;
  std::string src_path;
  std::vector<int64_t> length_edges = xf::metrics::kDefaultLengthEdges;
  std::vector<std::string> casual_tsv_paths, casual_hyp_paths;
};

std::vector<int64_t> parse_edges(const std::string& option, const std::string& value) {
  const std::string error =
      option + " expects ascending word counts from 1 like 5,10,15,25, got '" + value + "'";
  const std::vector<int64_t> edges = xf::cli::integer_list(value, 100000, error);
  for (size_t i = 0; i < edges.size(); ++i) {
    if (edges[i] < 1 || (i > 0 && edges[i] <= edges[i - 1])) throw UsageError{error};
  }
  return edges;
}

int parse_column(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const long column = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || column < 0 || column > 1000)
    throw UsageError{option + " expects a column number from 0, got '" + value + "'"};
  return static_cast<int>(column);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] { return xf::cli::option_value(argc, argv, i); };
    if (arg == "--hyp") options.hyp_path = value();
    else if (arg == "--ref") options.ref_paths.push_back(value());
    else if (arg == "--ref-tsv") options.ref_tsv_path = value();
    else if (arg == "--source-column") options.source_column = parse_column(arg, value());
    else if (arg == "--target-column") options.target_column = parse_column(arg, value());
    else if (arg == "--print-sources") options.print_sources = true;
    else if (arg == "--json") options.json = true;
    else if (arg == "--by-length") options.by_length = true;
    else if (arg == "--src") options.src_path = value();
    else if (arg == "--length-buckets") options.length_edges = parse_edges(arg, value());
    else if (arg == "--casual-tsv") options.casual_tsv_paths.push_back(value());
    else if (arg == "--casual-hyp") options.casual_hyp_paths.push_back(value());
    else throw xf::cli::unknown_option(arg);
  }
  if (!options.ref_paths.empty() && !options.ref_tsv_path.empty())
    throw UsageError{"give either --ref or --ref-tsv, not both"};
  if (options.print_sources) {
    if (options.ref_tsv_path.empty()) throw UsageError{"--print-sources needs --ref-tsv"};
    return options;
  }
  if (options.hyp_path.empty()) throw UsageError{"missing --hyp FILE (try --help)"};
  if (options.ref_paths.empty() && options.ref_tsv_path.empty())
    throw UsageError{"missing --ref FILE or --ref-tsv FILE (try --help)"};
  if (!options.src_path.empty() && !options.by_length) throw UsageError{"--src is for --by-length"};
  if (!options.src_path.empty() && !options.ref_tsv_path.empty())
    throw UsageError{"--src with --ref-tsv: the TSV gives the sources already"};
  if (options.casual_tsv_paths.size() != options.casual_hyp_paths.size())
    throw UsageError{"--casual-tsv and --casual-hyp come in pairs: " +
                     std::to_string(options.casual_tsv_paths.size()) + " --casual-tsv, " +
                     std::to_string(options.casual_hyp_paths.size()) + " --casual-hyp"};
  if (!options.casual_tsv_paths.empty() && options.ref_tsv_path.empty())
    throw UsageError{"--casual-tsv is scored beside a clean --ref-tsv set: give --ref-tsv"};
  if (options.by_length && options.ref_tsv_path.empty() && options.src_path.empty())
    throw UsageError{"--by-length with --ref needs --src FILE (the sources of the hypotheses)"};
  return options;
}

// The scores of each bucket, as a Markdown table.
void print_length_table(const std::vector<xf::metrics::LengthBucket>& buckets) {
  std::printf("| source words | sentences | BLEU | chrF2 |\n| --- | ---: | ---: | ---: |\n");
  for (const auto& bucket : buckets) {
    if (bucket.sentences == 0) {
      std::printf("| %s | 0 | - | - |\n", bucket.label().c_str());
    } else {
      std::printf("| %s | %zu | %.2f | %.2f |\n", bucket.label().c_str(), bucket.sentences,
                  bucket.bleu.score, bucket.chrf);
    }
  }
}

std::string length_json(const std::vector<xf::metrics::LengthBucket>& buckets) {
  std::string json = ", \"by_length\": [";
  char item[256];
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& bucket = buckets[b];
    if (bucket.sentences == 0) {
      std::snprintf(item, sizeof item, "%s{\"words\": \"%s\", \"sentences\": 0, \"bleu\": null, \"chrf2\": null}",
                    b ? ", " : "", bucket.label().c_str());
    } else {
      std::snprintf(item, sizeof item, "%s{\"words\": \"%s\", \"sentences\": %zu, \"bleu\": %.17g, \"chrf2\": %.17g}",
                    b ? ", " : "", bucket.label().c_str(), bucket.sentences, bucket.bleu.score, bucket.chrf);
    }
    json += item;
  }
  return json + "]";
}

void print_json(const xf::metrics::BleuScore& bleu, double chrf, size_t sentences, size_t references,
                const std::string& extra) {
  const auto& s = bleu.stats;
  std::printf(
      "{\"bleu\": %.17g, \"chrf2\": %.17g, \"bleu_precisions\": [%.17g, %.17g, %.17g, %.17g], "
      "\"bleu_bp\": %.17g, \"bleu_ratio\": %.17g, \"hyp_len\": %lld, \"ref_len\": %lld, "
      "\"bleu_counts\": [%lld, %lld, %lld, %lld], \"bleu_totals\": [%lld, %lld, %lld, %lld], "
      "\"sentences\": %zu, \"references\": %zu%s}\n",
      bleu.score, chrf, bleu.precisions[0], bleu.precisions[1], bleu.precisions[2], bleu.precisions[3],
      bleu.brevity_penalty, bleu.ratio, (long long)s.hyp_len, (long long)s.ref_len, (long long)s.correct[0],
      (long long)s.correct[1], (long long)s.correct[2], (long long)s.correct[3], (long long)s.total[0],
      (long long)s.total[1], (long long)s.total[2], (long long)s.total[3], sentences, references,
      extra.c_str());
}

// One set's hypotheses against its references, their counts checked.
struct SetScore {
  std::string name;
  size_t sentences = 0;
  xf::metrics::BleuScore bleu;
  double chrf = 0;
};

std::vector<std::string> read_hypotheses(const std::string& path, size_t expected,
                                         const std::string& references_origin) {
  std::vector<std::string> hypotheses = xf::metrics::read_text_lines(path);
  if (hypotheses.size() != expected)
    throw xf::Error("hypothesis file " + path + " has " + std::to_string(hypotheses.size()) +
                    " lines but " + references_origin + " has " + std::to_string(expected));
  if (hypotheses.empty()) throw xf::Error("hypothesis file " + path + " is empty: nothing to score");
  return hypotheses;
}

SetScore score_casual_set(const std::string& tsv_path, const std::string& hyp_path) {
  namespace m = xf::metrics;
  const m::GroupedReferences grouped = m::group_references_by_source(tsv_path);
  const std::vector<std::string> hypotheses =
      read_hypotheses(hyp_path, grouped.references.size(), tsv_path + " (distinct sources)");
  return {tsv_path, hypotheses.size(), m::corpus_bleu(hypotheses, grouped.references),
          m::corpus_chrf(hypotheses, grouped.references)};
}

// The clean set first, then each casual one with its BLEU difference to the clean.
void print_casual_table(const SetScore& clean, const std::vector<SetScore>& casual) {
  std::printf("| set | sentences | BLEU | chrF2 | BLEU - clean |\n| --- | ---: | ---: | ---: | ---: |\n");
  std::printf("| %s | %zu | %.2f | %.2f | |\n", clean.name.c_str(), clean.sentences,
              clean.bleu.score, clean.chrf);
  for (const SetScore& set : casual) {
    std::printf("| %s | %zu | %.2f | %.2f | %+.2f |\n", set.name.c_str(), set.sentences,
                set.bleu.score, set.chrf, set.bleu.score - clean.bleu.score);
  }
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string casual_json(const std::vector<SetScore>& casual) {
  std::string json = ", \"casual\": [";
  char numbers[160];
  for (size_t i = 0; i < casual.size(); ++i) {
    std::snprintf(numbers, sizeof numbers, ", \"sentences\": %zu, \"bleu\": %.17g, \"chrf2\": %.17g}",
                  casual[i].sentences, casual[i].bleu.score, casual[i].chrf);
    json += (i ? ", {\"ref_tsv\": " : "{\"ref_tsv\": ") + json_string(casual[i].name) + numbers;
  }
  return json + "]";
}

int run(const Options& options) {
  namespace m = xf::metrics;
  std::vector<std::vector<std::string>> references;  // [hypothesis][its references]
  std::string references_origin;                     // names the references in messages
  std::vector<std::string> sources;                  // for --by-length
  if (!options.ref_tsv_path.empty()) {
    m::GroupedReferences grouped =
        m::group_references_by_source(options.ref_tsv_path, options.source_column, options.target_column);
    if (options.print_sources) {
      for (const std::string& source : grouped.sources) {
        std::fwrite(source.data(), 1, source.size(), stdout);
        std::fputc('\n', stdout);
      }
      return 0;
    }
    references = std::move(grouped.references);
    sources = std::move(grouped.sources);
    references_origin = options.ref_tsv_path + " (distinct sources)";
  } else {
    std::vector<std::vector<std::string>> files;
    for (const std::string& path : options.ref_paths) files.push_back(m::read_text_lines(path));
    references = m::references_per_line(files, options.ref_paths);
    references_origin = options.ref_paths[0];
  }
  const std::vector<std::string> hypotheses =
      read_hypotheses(options.hyp_path, references.size(), references_origin);

  std::vector<m::LengthBucket> buckets;
  if (options.by_length) {
    if (!options.src_path.empty()) {
      sources = m::read_text_lines(options.src_path);
      if (sources.size() != hypotheses.size())
        throw xf::Error("source file " + options.src_path + " has " + std::to_string(sources.size()) +
                        " lines but hypothesis file " + options.hyp_path + " has " +
                        std::to_string(hypotheses.size()));
    }
    buckets = m::scores_by_source_length(sources, hypotheses, references, options.length_edges);
  }

  const m::BleuScore bleu = m::corpus_bleu(hypotheses, references);
  const double chrf = m::corpus_chrf(hypotheses, references);
  std::vector<SetScore> casual;
  for (size_t i = 0; i < options.casual_tsv_paths.size(); ++i) {
    casual.push_back(score_casual_set(options.casual_tsv_paths[i], options.casual_hyp_paths[i]));
  }
  if (options.json) {
    size_t reference_count = 0;
    for (const auto& refs : references) reference_count += refs.size();
    print_json(bleu, chrf, hypotheses.size(), reference_count,
               (options.by_length ? length_json(buckets) : std::string()) +
                   (casual.empty() ? std::string() : casual_json(casual)));
  } else {
    std::printf("%s\n%s\n", bleu.to_string().c_str(), m::chrf_to_string(chrf).c_str());
    if (options.by_length) print_length_table(buckets);
    if (!casual.empty()) {
      print_casual_table({options.ref_tsv_path, hypotheses.size(), bleu, chrf}, casual);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xf::cli::tool_main("xf-eval", kUsage, argc, argv,
                            [](int argc, char** argv) { return run(parse_options(argc, argv)); });
}
