// Corpus scores per bucket of source length (xf-eval --by-length).
#include "xf/error.h"
#include "xf/metrics.h"
#include "unicode.h"

namespace xf::metrics {

std::string LengthBucket::label() const {
  const int64_t first = min_words == 0 ? 1 : min_words;
  if (max_words < 0) return std::to_string(first) + "+";
  return std::to_string(first) + "-" + std::to_string(max_words);
}

int64_t count_words(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < text.size()) {
    if (const size_t space = detail::whitespace_length_at(text, pos)) {
      in_word = false;
      pos += space;
      continue;
    }
    if (!in_word) ++words;
    in_word = true;
    ++pos;  // a continuation byte is never whitespace: stepping bytewise is safe
  }
  return words;
}

std::vector<LengthBucket> scores_by_source_length(
    const std::vector<std::string>& sources, const std::vector<std::string>& hypotheses,
    const std::vector<std::vector<std::string>>& references, const std::vector<int64_t>& edges) {
  if (sources.size() != hypotheses.size() || references.size() != hypotheses.size()) {
    throw Error("scores by length: " + std::to_string(sources.size()) + " sources, " +
                std::to_string(hypotheses.size()) + " hypotheses and references for " +
                std::to_string(references.size()));
  }
  std::vector<LengthBucket> buckets(edges.size() + 1);
  for (size_t b = 0; b < edges.size(); ++b) {
    if (edges[b] < 1 || (b > 0 && edges[b] <= edges[b - 1])) {
      throw Error("length buckets: the edges must be positive and ascending");
    }
    buckets[b].max_words = edges[b];
    buckets[b + 1].min_words = edges[b] + 1;
  }
  std::vector<BleuStats> bleu(buckets.size());
  std::vector<ChrfStats> chrf(buckets.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const int64_t words = count_words(sources[i]);
    size_t b = 0;
    while (b < edges.size() && words > edges[b]) ++b;
    ++buckets[b].sentences;
    bleu[b] += bleu_sentence_stats(hypotheses[i], references[i]);
    chrf[b] += chrf_sentence_stats(hypotheses[i], references[i]);
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].sentences == 0) continue;
    buckets[b].bleu = bleu_from_stats(bleu[b]);
    buckets[b].chrf = chrf_from_stats(chrf[b]);
  }
  return buckets;
}

}  // namespace xf::metrics
