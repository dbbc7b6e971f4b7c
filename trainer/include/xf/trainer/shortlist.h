#pragma once
// A lexical shortlist learned from a parallel corpus (xf-shortlist): IBM Model 1's translation
// probabilities p(target piece | source piece), estimated by EM, and each source piece's K most
// probable targets, as Marian's lex files hold them ("target source probability" lines).
#include <cstdint>
#include <vector>

namespace xf::trainer {

// p(t | s) for the pairs (s, t) that share a sentence pair at least once (the others are 0).
// Row s (a source id, or null_source() for Model 1's empty word, which takes the function words
// and pieces no source piece explains) holds its targets ascending with their probabilities.
struct LexicalTable {
  uint32_t source_vocab = 0, target_vocab = 0;
  std::vector<uint64_t> offsets;  // source_vocab + 2: row s is [offsets[s], offsets[s + 1])
  std::vector<int32_t> targets;
  std::vector<float> probabilities;

  uint32_t null_source() const { return source_vocab; }
  // p(target | source); 0 for a pair never seen together.
  float probability(uint32_t source, int32_t target) const;
};

// IBM Model 1 (Brown et al. 1993) over id sentences (no BOS/EOS): `iterations` rounds of EM from
// uniform probabilities; each target piece of a pair is explained by the pair's source pieces
// and the empty word. Ids must be below the vocabulary sizes (xf::Error otherwise); sources[i]
// and targets[i] are pair i.
LexicalTable ibm_model1(const std::vector<std::vector<int32_t>>& sources,
                        const std::vector<std::vector<int32_t>>& targets, uint32_t source_vocab,
                        uint32_t target_vocab, int iterations);

struct ShortlistEntry {
  int32_t source = 0;
  int32_t target = 0;
  float probability = 0;
};

// Each source piece's (not the empty word's) `top_k` most probable targets whose probability is
// at least `min_probability` and whose id is at least `first_target`, most probable first (ties:
// lower target id first), by source id. first_target: the shortlist's first ids, always in, so
// that they take none of a source piece's K places.
std::vector<ShortlistEntry> top_targets(const LexicalTable& table, int top_k, float min_probability,
                                        int32_t first_target = 0);

// Target ids by how often they occur in `targets`, most frequent first (ties: lower id first).
std::vector<int32_t> targets_by_frequency(const std::vector<std::vector<int32_t>>& targets, uint32_t target_vocab);

}  // namespace xf::trainer
