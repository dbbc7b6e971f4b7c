// Batches by token count, grouped by length, shuffled deterministically by (seed, epoch).
#include <algorithm>
#include <numeric>

#include "xf/error.h"
#include "xf/trainer/data.h"
#include "xf/trainer/text_modifiers.h"

namespace xf::trainer {

uint64_t epoch_seed(uint64_t seed, uint64_t epoch, uint64_t purpose) {
  SplitMix64 mix(seed ^ (epoch * 0x9e3779b97f4a7c15ull) ^ (purpose << 56));
  return mix.next();
}

std::vector<BatchIndices> plan_batches(const TokenizedCorpus& corpus, size_t batch_tokens,
                                       uint64_t seed, uint64_t epoch, bool shuffle) {
  const size_t n = corpus.size();
  // Sort key: the longer padded side, then the other side, then a random tie-break so that
  // equal-length pairs land in different batches each epoch.
  struct Key {
    uint32_t longer, shorter;
    uint64_t tie;
    uint32_t index;
  };
  std::vector<Key> keys(n);
  SplitMix64 tie_rng(epoch_seed(seed, epoch, 1));
  for (size_t i = 0; i < n; ++i) {
    auto s = static_cast<uint32_t>(padded_source_length(corpus, i));
    auto t = static_cast<uint32_t>(padded_target_length(corpus, i));
    if (std::max(s, t) > batch_tokens) {
      throw Error("pair " + std::to_string(i) + " needs " + std::to_string(std::max(s, t)) +
                  " tokens, more than --batch-tokens " + std::to_string(batch_tokens) +
                  " (lower --max-length or raise --batch-tokens)");
    }
    keys[i] = {std::max(s, t), std::min(s, t), shuffle ? tie_rng.next() : 0,
               static_cast<uint32_t>(i)};
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.longer != b.longer) return a.longer < b.longer;
    if (a.shorter != b.shorter) return a.shorter < b.shorter;
    if (a.tie != b.tie) return a.tie < b.tie;
    return a.index < b.index;
  });

  std::vector<BatchIndices> batches;
  BatchIndices current;
  size_t longest_source = 0, longest_target = 0;
  for (const Key& key : keys) {
    size_t s = padded_source_length(corpus, key.index);
    size_t t = padded_target_length(corpus, key.index);
    size_t new_source = std::max(longest_source, s), new_target = std::max(longest_target, t);
    size_t rows = current.size() + 1;
    if (!current.empty() && rows * std::max(new_source, new_target) > batch_tokens) {
      batches.push_back(std::move(current));
      current.clear();
      new_source = s;
      new_target = t;
    }
    current.push_back(key.index);
    longest_source = new_source;
    longest_target = new_target;
  }
  if (!current.empty()) batches.push_back(std::move(current));

  if (shuffle) {
    // Fisher-Yates with our own generator: the same order on every platform.
    SplitMix64 order_rng(epoch_seed(seed, epoch, 2));
    for (size_t i = batches.size(); i > 1; --i) {
      std::swap(batches[i - 1], batches[order_rng.below(i)]);
    }
  }
  return batches;
}

std::vector<BatchIndices> plan_joins(const TokenizedCorpus& corpus, const JoinOptions& options,
                                     uint64_t seed, uint64_t epoch) {
  const size_t n = corpus.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 rng(epoch_seed(seed, epoch, 3));
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  // One draw per example from a generator of its own, whatever the lengths: the probability
  // as a 53-bit fraction, the pair count as a remainder.
  std::vector<BatchIndices> groups;
  const size_t extra_pairs = options.max_pairs >= 2 ? options.max_pairs - 1 : 0;
  for (size_t next = 0; next < n;) {
    const uint64_t draw = rng.next();
    const bool join = extra_pairs > 0 &&
                      static_cast<double>(draw >> 11) * 0x1p-53 < options.probability;
    const size_t wanted = join ? 2 + static_cast<size_t>(rng.below(extra_pairs)) : 1;
    BatchIndices group{order[next++]};
    size_t source = corpus.source_length(group[0]), target = corpus.target_length(group[0]);
    while (group.size() < wanted && next < n) {
      const uint32_t candidate = order[next];
      const size_t s = source + corpus.source_length(candidate);
      const size_t t = target + corpus.target_length(candidate);
      if (options.max_length > 0 && std::max(s, t) > options.max_length) break;
      group.push_back(candidate);
      source = s;
      target = t;
      ++next;
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

TokenizedCorpus join_pairs(const TokenizedCorpus& corpus, const std::vector<BatchIndices>& groups) {
  TokenizedCorpus joined;
  joined.ids.reserve(corpus.ids.size());
  joined.offsets.reserve(2 * groups.size() + 1);
  joined.offsets.push_back(0);
  for (const BatchIndices& group : groups) {
    for (uint32_t i : group) {
      joined.ids.insert(joined.ids.end(), corpus.source(i), corpus.source(i) + corpus.source_length(i));
    }
    joined.offsets.push_back(joined.ids.size());
    for (uint32_t i : group) {
      joined.ids.insert(joined.ids.end(), corpus.target(i), corpus.target(i) + corpus.target_length(i));
    }
    joined.offsets.push_back(joined.ids.size());
  }
  return joined;
}

BatchIterator::BatchIterator(const TokenizedCorpus& corpus, size_t batch_tokens,
                             DataPosition start, const JoinOptions& joins)
    : BatchIterator(corpus, batch_tokens, start, joins, nullptr) {}

BatchIterator::BatchIterator(const TokenizedCorpus& corpus, size_t batch_tokens,
                             DataPosition start, const JoinOptions& joins,
                             std::unique_ptr<const CorpusModifier> modifier)
    : corpus_(corpus),
      batch_tokens_(batch_tokens),
      joins_(joins),
      modifier_(std::move(modifier)),
      position_(start) {
  if (corpus.size() == 0) throw Error("the training corpus is empty after filtering");
  plan_epoch();
  if (position_.batch_index > plan_.size()) {
    throw Error("data position batch " + std::to_string(position_.batch_index) +
                " is past the epoch's " + std::to_string(plan_.size()) +
                " batches (was the corpus or --batch-tokens changed since the checkpoint?)");
  }
}

BatchIterator::~BatchIterator() = default;

const BatchIndices& BatchIterator::next() {
  if (position_.batch_index >= plan_.size()) {
    ++position_.epoch;
    position_.batch_index = 0;
  }
  if (plan_epoch_ != position_.epoch) plan_epoch();
  return plan_[position_.batch_index++];
}

void BatchIterator::plan_epoch() {
  epoch_corpus_ = &corpus_;
  if (modifier_ && modifier_->active()) {
    modified_ = modifier_->apply(corpus_, position_.seed, position_.epoch);
    epoch_corpus_ = &modified_;
  }
  if (joins_.probability > 0) {
    joined_ = join_pairs(*epoch_corpus_,
                         plan_joins(*epoch_corpus_, joins_, position_.seed, position_.epoch));
    epoch_corpus_ = &joined_;
  }
  plan_ = plan_batches(corpus(), batch_tokens_, position_.seed, position_.epoch);
  plan_epoch_ = position_.epoch;
}

}  // namespace xf::trainer
