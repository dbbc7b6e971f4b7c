// Batches by token count, grouped by length, shuffled deterministically by (seed, epoch).
#include <algorithm>
#include <numeric>

#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

// A seed for one epoch's randomness, so epoch e's plan never depends on earlier epochs.
uint64_t epoch_seed(uint64_t seed, uint64_t epoch, uint64_t purpose) {
  SplitMix64 mix(seed ^ (epoch * 0x9e3779b97f4a7c15ull) ^ (purpose << 56));
  return mix.next();
}

}  // namespace

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

BatchIterator::BatchIterator(const TokenizedCorpus& corpus, size_t batch_tokens,
                             DataPosition start)
    : corpus_(corpus), batch_tokens_(batch_tokens), position_(start) {
  if (corpus.size() == 0) throw Error("the training corpus is empty after filtering");
  plan_ = plan_batches(corpus_, batch_tokens_, position_.seed, position_.epoch);
  plan_epoch_ = position_.epoch;
  if (position_.batch_index > plan_.size()) {
    throw Error("data position batch " + std::to_string(position_.batch_index) +
                " is past the epoch's " + std::to_string(plan_.size()) +
                " batches (was the corpus or --batch-tokens changed since the checkpoint?)");
  }
}

const BatchIndices& BatchIterator::next() {
  if (position_.batch_index >= plan_.size()) {
    ++position_.epoch;
    position_.batch_index = 0;
  }
  if (plan_epoch_ != position_.epoch) {
    plan_ = plan_batches(corpus_, batch_tokens_, position_.seed, position_.epoch);
    plan_epoch_ = position_.epoch;
  }
  return plan_[position_.batch_index++];
}

}  // namespace xf::trainer
