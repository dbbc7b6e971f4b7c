#pragma once
// Translation quality metrics computed exactly as sacreBLEU 2.x does by default:
//  - BLEU: 13a tokenization, n-gram order 4, 'exp' smoothing, brevity penalty from the reference
//    length closest to each hypothesis (ties: the shorter), effective order off unless asked.
//  - chrF2: character n-grams up to 6, no word n-grams, beta 2, whitespace removed; with several
//    references, each sentence keeps the statistics of its best-scoring reference.
// Text is UTF-8; "whitespace" is what Python's str.isspace() accepts (it includes U+00A0 and
// U+202F), and chrF counts code points, as Python does. Functions that take text expect valid
// UTF-8 (check it with check_utf8 or read it with read_text_lines); they throw xf::Error on
// malformed arguments (a hypothesis without references, mismatched counts).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xf/utf8.h"

namespace xf::metrics {

constexpr int kBleuMaxOrder = 4;
constexpr int kChrfCharOrder = 6;
constexpr int kChrfBeta = 2;

// ---- Text --------------------------------------------------------------------------------------

// UTF-8 validity (xf/utf8.h, in xf_common), also under these names.
using xf::check_utf8;
using xf::is_valid_utf8;

// `text` without trailing whitespace (Python's str.rstrip()).
std::string_view rstrip_whitespace(std::string_view text);

// sacreBLEU's '13a' tokenizer (mteval-v13a): unescapes &quot; &amp; &lt; &gt;, splits off ASCII
// punctuation and symbols, periods and commas unless next to digits, and a dash after a digit;
// tokens are returned separated by single spaces.
std::string tokenize_13a(std::string_view line);

// ---- BLEU --------------------------------------------------------------------------------------

// Sufficient statistics; they add up over sentences.
struct BleuStats {
  int64_t hyp_len = 0;  // hypothesis tokens
  int64_t ref_len = 0;  // closest reference length, summed
  std::array<int64_t, kBleuMaxOrder> correct{};  // clipped n-gram matches, order 1..4
  std::array<int64_t, kBleuMaxOrder> total{};    // hypothesis n-grams, order 1..4
  BleuStats& operator+=(const BleuStats& other);
};

struct BleuScore {
  double score = 0.0;                              // 0..100
  std::array<double, kBleuMaxOrder> precisions{};  // 0..100, smoothed
  double brevity_penalty = 0.0;
  double ratio = 0.0;  // hyp_len / ref_len (0 when ref_len is 0)
  BleuStats stats;
  // "BLEU = 34.56 70.1/45.2/30.3/21.0 (BP = 0.980 ratio = 0.980 hyp_len = 10 ref_len = 11)"
  std::string to_string() const;
};

// Statistics of one hypothesis against its references (at least one).
BleuStats bleu_sentence_stats(std::string_view hypothesis, const std::vector<std::string>& references);
// The score from (summed) statistics. effective_order: stop at the first order with no
// hypothesis n-grams instead of scoring it 0 (sacrebleu.sentence_bleu turns it on).
BleuScore bleu_from_stats(const BleuStats& stats, bool effective_order = false);
// references[i] holds the references of hypotheses[i]; their numbers may differ per sentence.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references,
                      bool effective_order = false);

// ---- chrF --------------------------------------------------------------------------------------

struct ChrfOrderStats {
  int64_t hyp = 0;    // hypothesis n-grams (0 when the reference has none of this order)
  int64_t ref = 0;    // reference n-grams
  int64_t match = 0;  // clipped matches
};
struct ChrfStats {
  std::array<ChrfOrderStats, kChrfCharOrder> orders{};  // character n-gram order 1..6
  ChrfStats& operator+=(const ChrfStats& other);
};

// Statistics against the best-scoring reference (the first one on ties).
ChrfStats chrf_sentence_stats(std::string_view hypothesis, const std::vector<std::string>& references);
// chrF2 (0..100) from (summed) statistics, averaging precision and recall over the orders
// that have both hypothesis and reference n-grams (sacreBLEU's default, eps_smoothing off).
double chrf_from_stats(const ChrfStats& stats);
double corpus_chrf(const std::vector<std::string>& hypotheses,
                   const std::vector<std::vector<std::string>>& references);
// "chrF2 = 55.67"
std::string chrf_to_string(double chrf);

// ---- Scores by source length ------------------------------------------------------------------

// Where a model breaks is hidden in one corpus score: short sentences dominate it. These split
// the sentences by the number of words of their source (runs of whitespace-separated text) and
// score each bucket as a corpus of its own.

// The buckets' upper edges, ascending: {5, 10, 15, 25} gives 1-5, 6-10, 11-15, 16-25 and 26+
// words (a source of no words falls in the first bucket).
inline const std::vector<int64_t> kDefaultLengthEdges = {5, 10, 15, 25};

struct LengthBucket {
  int64_t min_words = 0;
  int64_t max_words = -1;  // -1: no upper edge (the last bucket)
  size_t sentences = 0;
  BleuScore bleu;          // meaningful only when sentences > 0
  double chrf = 0.0;
  std::string label() const;  // "1-5", "26+"
};

// The number of words of `text`, split on whitespace as Python's str.split() does.
int64_t count_words(std::string_view text);

// One bucket per edge plus the last, open one; sources[i] is the source of hypotheses[i].
// Empty buckets are returned with sentences = 0. Throws xf::Error when the counts differ or the
// edges are not positive and ascending.
std::vector<LengthBucket> scores_by_source_length(
    const std::vector<std::string>& sources, const std::vector<std::string>& hypotheses,
    const std::vector<std::vector<std::string>>& references,
    const std::vector<int64_t>& edges = kDefaultLengthEdges);

// ---- Files -------------------------------------------------------------------------------------

// The lines of a UTF-8 text file, split on '\n' only (as sacreBLEU reads files; a final newline
// does not start another line; one trailing '\r' is dropped so CRLF files work). Throws
// xf::Error naming the file (and line) when it cannot be read or is not valid UTF-8.
std::vector<std::string> read_text_lines(const std::string& path);

// References grouped by source sentence from a TSV file (no header): rows with the same source
// text form one group, groups in order of the source's first appearance.
struct GroupedReferences {
  std::vector<std::string> sources;                  // distinct, first-appearance order
  std::vector<std::vector<std::string>> references;  // [sources.size()][references of that source]
};
GroupedReferences group_references_by_source(const std::string& tsv_path, int source_column = 0,
                                             int target_column = 1);

// Turns parallel reference files ([file][line]) into references per line ([line][file]); the
// files must have equal line counts. `paths` names the files in error messages.
std::vector<std::vector<std::string>> references_per_line(
    const std::vector<std::vector<std::string>>& reference_files, const std::vector<std::string>& paths);

}  // namespace xf::metrics
