// chrF2 as sacreBLEU 2.x computes it by default (sacrebleu/metrics/chrf.py: char order 6, word
// order 0, beta 2, whitespace removed, eps_smoothing off).
#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "unicode.h"
#include "xf/error.h"
#include "xf/metrics.h"

namespace xf::metrics {
namespace {

// Character n-gram counts of one sentence, one map per order. The keys view `chars`, so the
// object stays where it was built (no copies or moves that could relocate a short string).
struct CharNgrams {
  explicit CharNgrams(std::string_view sentence) : chars(detail::code_points_without_whitespace(sentence)) {
    const std::u32string_view view = chars;
    for (size_t n = 1; n <= kChrfCharOrder; ++n)
      for (size_t i = 0; i + n <= view.size(); ++i) {
        ++counts[n - 1][view.substr(i, n)];
        ++totals[n - 1];
      }
  }
  CharNgrams(const CharNgrams&) = delete;
  CharNgrams& operator=(const CharNgrams&) = delete;

  const std::u32string chars;  // code points, whitespace removed
  std::array<std::unordered_map<std::u32string_view, int64_t>, kChrfCharOrder> counts;
  std::array<int64_t, kChrfCharOrder> totals{};
};

ChrfStats match_statistics(const CharNgrams& hyp, const CharNgrams& ref) {
  ChrfStats stats;
  for (int n = 0; n < kChrfCharOrder; ++n) {
    ChrfOrderStats& order = stats.orders[n];
    // sacreBLEU counts no hypothesis n-grams of an order the reference does not have.
    order.hyp = ref.totals[n] > 0 ? hyp.totals[n] : 0;
    order.ref = ref.totals[n];
    for (const auto& [ngram, count] : hyp.counts[n]) {
      const auto found = ref.counts[n].find(ngram);
      if (found != ref.counts[n].end()) order.match += std::min(count, found->second);
    }
  }
  return stats;
}

}  // namespace

ChrfStats& ChrfStats::operator+=(const ChrfStats& other) {
  for (int n = 0; n < kChrfCharOrder; ++n) {
    orders[n].hyp += other.orders[n].hyp;
    orders[n].ref += other.orders[n].ref;
    orders[n].match += other.orders[n].match;
  }
  return *this;
}

double chrf_from_stats(const ChrfStats& stats) {
  // The operations of sacrebleu's CHRF._compute_f_score in the same order, so the doubles agree.
  const double factor = kChrfBeta * kChrfBeta;
  double average_precision = 0.0, average_recall = 0.0;
  int effective_order = 0;
  for (const ChrfOrderStats& order : stats.orders) {
    if (order.hyp > 0 && order.ref > 0) {
      average_precision += static_cast<double>(order.match) / static_cast<double>(order.hyp);
      average_recall += static_cast<double>(order.match) / static_cast<double>(order.ref);
      ++effective_order;
    }
  }
  if (effective_order == 0) return 0.0;
  average_precision /= effective_order;
  average_recall /= effective_order;
  if (average_precision + average_recall == 0.0) return 0.0;
  double score = (1 + factor) * average_precision * average_recall;
  score /= factor * average_precision + average_recall;
  return 100 * score;
}

ChrfStats chrf_sentence_stats(std::string_view hypothesis, const std::vector<std::string>& references) {
  if (references.empty()) throw Error("chrF: a hypothesis has no reference");
  const CharNgrams hyp(hypothesis);
  ChrfStats best;
  double best_score = -1.0;
  for (const std::string& reference : references) {
    const ChrfStats stats = match_statistics(hyp, CharNgrams(reference));
    const double score = chrf_from_stats(stats);
    if (score > best_score) {  // strictly better: the first reference wins ties
      best_score = score;
      best = stats;
    }
  }
  return best;
}

double corpus_chrf(const std::vector<std::string>& hypotheses,
                   const std::vector<std::vector<std::string>>& references) {
  if (hypotheses.size() != references.size())
    throw Error("chrF: " + std::to_string(hypotheses.size()) + " hypotheses but references for " +
                std::to_string(references.size()));
  ChrfStats total;
  for (size_t i = 0; i < hypotheses.size(); ++i) total += chrf_sentence_stats(hypotheses[i], references[i]);
  return chrf_from_stats(total);
}

std::string chrf_to_string(double chrf) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "chrF%d = %.2f", kChrfBeta, chrf);
  return buffer;
}

}  // namespace xf::metrics
