// Corpus BLEU as sacreBLEU 2.x computes it by default (sacrebleu/metrics/bleu.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xf/error.h"
#include "xf/metrics.h"

namespace xf::metrics {
namespace {

// N-gram -> count. Tokens of a 13a-tokenized line are separated by single spaces, so an n-gram
// is the substring from its first token to its last, and the key views the tokenized line.
using NgramCounts = std::unordered_map<std::string_view, int64_t>;

struct TokenizedLine {
  std::string text;                                // 13a tokens joined by single spaces
  std::vector<std::pair<size_t, size_t>> tokens;   // [begin, end) byte ranges in `text`
};

TokenizedLine tokenize_for_bleu(std::string_view line) {
  TokenizedLine out;
  out.text = tokenize_13a(rstrip_whitespace(line));
  size_t begin = 0;
  while (begin < out.text.size()) {
    size_t end = out.text.find(' ', begin);
    if (end == std::string::npos) end = out.text.size();
    out.tokens.emplace_back(begin, end);
    begin = end + 1;
  }
  return out;
}

// Counts every n-gram of order 1..kBleuMaxOrder; the views point into line.text.
NgramCounts count_ngrams(const TokenizedLine& line) {
  NgramCounts counts;
  const std::string_view text = line.text;
  for (size_t n = 1; n <= kBleuMaxOrder; ++n)
    for (size_t i = 0; i + n <= line.tokens.size(); ++i) {
      const size_t begin = line.tokens[i].first, end = line.tokens[i + n - 1].second;
      ++counts[text.substr(begin, end - begin)];
    }
  return counts;
}

size_t ngram_order(std::string_view ngram) { return 1 + std::count(ngram.begin(), ngram.end(), ' '); }

// sacreBLEU's my_log: log with log(0) floored to -9999999999.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

}  // namespace

BleuStats& BleuStats::operator+=(const BleuStats& other) {
  hyp_len += other.hyp_len;
  ref_len += other.ref_len;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    correct[n] += other.correct[n];
    total[n] += other.total[n];
  }
  return *this;
}

BleuStats bleu_sentence_stats(std::string_view hypothesis, const std::vector<std::string>& references) {
  if (references.empty()) throw Error("BLEU: a hypothesis has no reference");

  // Reference n-gram counts: the maximum count over the references.
  std::vector<TokenizedLine> tokenized_refs;
  tokenized_refs.reserve(references.size());
  for (const std::string& ref : references) tokenized_refs.push_back(tokenize_for_bleu(ref));
  NgramCounts ref_counts;
  for (const TokenizedLine& ref : tokenized_refs)
    for (const auto& [ngram, count] : count_ngrams(ref)) {
      int64_t& best = ref_counts[ngram];
      best = std::max(best, count);
    }

  const TokenizedLine hyp = tokenize_for_bleu(hypothesis);
  BleuStats stats;
  stats.hyp_len = static_cast<int64_t>(hyp.tokens.size());

  // The reference length closest to the hypothesis length; the shorter one on ties.
  int64_t closest_diff = -1;
  for (const TokenizedLine& ref : tokenized_refs) {
    const int64_t ref_len = static_cast<int64_t>(ref.tokens.size());
    const int64_t diff = std::llabs(stats.hyp_len - ref_len);
    if (closest_diff == -1 || diff < closest_diff || (diff == closest_diff && ref_len < stats.ref_len)) {
      closest_diff = diff;
      stats.ref_len = ref_len;
    }
  }

  for (const auto& [ngram, count] : count_ngrams(hyp)) {
    const size_t order = ngram_order(ngram);
    stats.total[order - 1] += count;
    const auto found = ref_counts.find(ngram);
    if (found != ref_counts.end()) stats.correct[order - 1] += std::min(count, found->second);
  }
  return stats;
}

BleuScore bleu_from_stats(const BleuStats& stats, bool effective_order) {
  // The operations of sacrebleu's BLEU.compute_bleu in the same order, so the doubles agree.
  BleuScore result;
  result.stats = stats;
  result.ratio = stats.ref_len ? static_cast<double>(stats.hyp_len) / static_cast<double>(stats.ref_len) : 0.0;
  result.brevity_penalty = 1.0;
  if (stats.hyp_len < stats.ref_len)
    result.brevity_penalty =
        stats.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(stats.ref_len) / static_cast<double>(stats.hyp_len)) : 0.0;

  // No match at all: the score is 0 and so are the precisions.
  if (std::all_of(stats.correct.begin(), stats.correct.end(), [](int64_t c) { return c == 0; })) return result;

  double smooth_mteval = 1.0;  // 'exp' smoothing: each order without matches halves the next
  int orders_used = kBleuMaxOrder;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (stats.total[n] == 0) break;  // the remaining precisions stay 0
    if (effective_order) orders_used = n + 1;
    if (stats.correct[n] == 0) {
      smooth_mteval *= 2.0;
      result.precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(stats.total[n]));
    } else {
      result.precisions[n] = 100.0 * static_cast<double>(stats.correct[n]) / static_cast<double>(stats.total[n]);
    }
  }
  double log_sum = 0.0;
  for (int n = 0; n < orders_used; ++n) log_sum += floored_log(result.precisions[n]);
  result.score = result.brevity_penalty * std::exp(log_sum / orders_used);
  return result;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, bool effective_order) {
  if (hypotheses.size() != references.size())
    throw Error("BLEU: " + std::to_string(hypotheses.size()) + " hypotheses but references for " +
                std::to_string(references.size()));
  BleuStats total;
  for (size_t i = 0; i < hypotheses.size(); ++i) total += bleu_sentence_stats(hypotheses[i], references[i]);
  return bleu_from_stats(total, effective_order);
}

std::string BleuScore::to_string() const {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer,
                "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score,
                precisions[0], precisions[1], precisions[2], precisions[3], brevity_penalty, ratio,
                static_cast<long long>(stats.hyp_len), static_cast<long long>(stats.ref_len));
  return buffer;
}

}  // namespace xf::metrics
