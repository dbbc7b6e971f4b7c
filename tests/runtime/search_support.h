#pragma once
// Tests that drive runtime::Search directly (below the Translator): sources staged the way the
// Translator stages them.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "search.h"
#include "xf/translator.h"

namespace xf::test {

// A Translator's plan for up to `max_batch` sentences and beams of `max_beam` (the rest default).
inline TranslatorOptions plan_options(int max_batch, int max_beam) {
  TranslatorOptions options;
  options.max_batch = max_batch;
  options.max_beam = max_beam;
  return options;
}

// Translate options with this beam and n-best list size, the rest at their defaults.
inline TranslateOptions beam_options(int beam, int n_best = 1) {
  TranslateOptions options;
  options.beam = beam;
  options.n_best = n_best;
  return options;
}

// The staging row length for `sources` (ids without EOS): the longest plus its EOS.
inline int64_t longest_with_eos(const std::vector<std::vector<int32_t>>& sources) {
  int64_t longest = 0;
  for (const auto& s : sources) longest = std::max<int64_t>(longest, s.size() + 1);
  return longest;
}

// Writes `sources` into the Search's staging rows of `longest` tokens: EOS appended, PAD after,
// in input order, without target prefixes.
inline void stage_sources(runtime::Search& search, const ModelConfig& config,
                          const std::vector<std::vector<int32_t>>& sources, int64_t longest) {
  for (size_t i = 0; i < sources.size(); ++i) {
    int32_t* row = search.source_ids() + i * longest;
    std::fill(row, row + longest, config.pad_id);
    std::copy(sources[i].begin(), sources[i].end(), row);
    row[sources[i].size()] = config.eos_id;
    search.source_lengths()[i] = static_cast<int32_t>(sources[i].size() + 1);
    search.sentence_indices()[i] = static_cast<int64_t>(i);
    search.target_prefixes()[i] = nullptr;
  }
}

// One pointer per result: the output array Search::translate fills.
inline std::vector<TokenTranslation*> pointers_to(std::vector<TokenTranslation>& results) {
  std::vector<TokenTranslation*> pointers;
  for (auto& result : results) pointers.push_back(&result);
  return pointers;
}

}  // namespace xf::test
