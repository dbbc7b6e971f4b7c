// IBM Model 1 by EM over a corpus's pieces, and the shortlist's top targets.
#include "xf/trainer/shortlist.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "xf/error.h"

namespace xf::trainer {
namespace {

void check_ids(const std::vector<std::vector<int32_t>>& sentences, uint32_t vocab, const char* side) {
  for (size_t i = 0; i < sentences.size(); ++i)
    for (int32_t id : sentences[i])
      if (id < 0 || static_cast<uint32_t>(id) >= vocab)
        throw Error(std::string("ibm_model1: ") + side + " sentence " + std::to_string(i) + " holds id " +
                    std::to_string(id) + ", outside the vocabulary of " + std::to_string(vocab));
}

// The position of (s, t) in the table's arrays (the pair must have been seen).
size_t cell(const LexicalTable& table, uint32_t s, int32_t t) {
  const auto begin = table.targets.begin() + static_cast<std::ptrdiff_t>(table.offsets[s]);
  const auto end = table.targets.begin() + static_cast<std::ptrdiff_t>(table.offsets[s + 1]);
  return static_cast<size_t>(std::lower_bound(begin, end, t) - table.targets.begin());
}

}  // namespace

float LexicalTable::probability(uint32_t source, int32_t target) const {
  if (source > null_source()) return 0;
  const size_t at = cell(*this, source, target);
  return at < offsets[source + 1] && targets[at] == target ? probabilities[at] : 0.0f;
}

LexicalTable ibm_model1(const std::vector<std::vector<int32_t>>& sources,
                        const std::vector<std::vector<int32_t>>& targets, uint32_t source_vocab,
                        uint32_t target_vocab, int iterations) {
  if (sources.size() != targets.size())
    throw Error("ibm_model1: " + std::to_string(sources.size()) + " sources but " + std::to_string(targets.size()) +
                " targets");
  check_ids(sources, source_vocab, "source");
  check_ids(targets, target_vocab, "target");
  LexicalTable table;
  table.source_vocab = source_vocab;
  table.target_vocab = target_vocab;
  // The pairs seen together: each source row's distinct targets, sorted.
  std::vector<std::vector<int32_t>> rows(source_vocab + 1);
  for (size_t i = 0; i < sources.size(); ++i) {
    for (int32_t s : sources[i]) rows[static_cast<size_t>(s)].insert(rows[s].end(), targets[i].begin(), targets[i].end());
    rows[source_vocab].insert(rows[source_vocab].end(), targets[i].begin(), targets[i].end());
  }
  table.offsets.assign(source_vocab + 2, 0);
  for (size_t s = 0; s < rows.size(); ++s) {
    std::sort(rows[s].begin(), rows[s].end());
    rows[s].erase(std::unique(rows[s].begin(), rows[s].end()), rows[s].end());
    table.offsets[s + 1] = table.offsets[s] + rows[s].size();
  }
  table.targets.reserve(table.offsets.back());
  for (auto& row : rows) {
    table.targets.insert(table.targets.end(), row.begin(), row.end());
    std::vector<int32_t>().swap(row);
  }
  // Uniform start: the first E-step then shares each target among its pair's sources equally.
  table.probabilities.assign(table.targets.size(), 1.0f);
  std::vector<double> counts(table.targets.size());
  std::vector<size_t> cells;
  for (int round = 0; round < iterations; ++round) {
    std::fill(counts.begin(), counts.end(), 0.0);
    for (size_t i = 0; i < sources.size(); ++i) {
      for (int32_t t : targets[i]) {
        // E-step: the target's alignment over the pair's sources and the empty word.
        cells.clear();
        double total = 0;
        for (int32_t s : sources[i]) cells.push_back(cell(table, static_cast<uint32_t>(s), t));
        cells.push_back(cell(table, table.null_source(), t));
        for (size_t c : cells) total += table.probabilities[c];
        for (size_t c : cells) counts[c] += table.probabilities[c] / total;
      }
    }
    // M-step: each source row's counts normalized.
    for (uint32_t s = 0; s <= source_vocab; ++s) {
      const double row_total =
          std::accumulate(counts.begin() + static_cast<std::ptrdiff_t>(table.offsets[s]),
                          counts.begin() + static_cast<std::ptrdiff_t>(table.offsets[s + 1]), 0.0);
      for (uint64_t c = table.offsets[s]; c < table.offsets[s + 1]; ++c)
        table.probabilities[c] = row_total > 0 ? static_cast<float>(counts[c] / row_total) : 0.0f;
    }
  }
  return table;
}

std::vector<ShortlistEntry> top_targets(const LexicalTable& table, int top_k, float min_probability,
                                        int32_t first_target) {
  std::vector<ShortlistEntry> entries, row;
  for (uint32_t s = 0; s < table.source_vocab; ++s) {
    row.clear();
    for (uint64_t c = table.offsets[s]; c < table.offsets[s + 1]; ++c)
      if (table.probabilities[c] >= min_probability && table.probabilities[c] > 0 && table.targets[c] >= first_target)
        row.push_back({static_cast<int32_t>(s), table.targets[c], table.probabilities[c]});
    std::stable_sort(row.begin(), row.end(),
                     [](const ShortlistEntry& a, const ShortlistEntry& b) { return a.probability > b.probability; });
    if (row.size() > static_cast<size_t>(top_k)) row.resize(static_cast<size_t>(top_k));
    entries.insert(entries.end(), row.begin(), row.end());
  }
  return entries;
}

std::vector<int32_t> targets_by_frequency(const std::vector<std::vector<int32_t>>& targets, uint32_t target_vocab) {
  std::vector<uint64_t> counts(target_vocab, 0);
  for (const auto& sentence : targets)
    for (int32_t t : sentence)
      if (t >= 0 && static_cast<uint32_t>(t) < target_vocab) ++counts[static_cast<size_t>(t)];
  std::vector<int32_t> ids(target_vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
  return ids;
}

}  // namespace xf::trainer
