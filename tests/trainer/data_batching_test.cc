// Batching by token count: budget respected, every pair exactly once per epoch, deterministic by
// seed, reshuffled per epoch, and an iterator that resumes exactly from a saved position.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

// Pairs with random lengths 1..max_length on each side (ids are irrelevant to batching).
TokenizedCorpus random_corpus(size_t pairs, size_t max_length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> length(1, max_length);
  TokenizedCorpus corpus;
  for (size_t i = 0; i < pairs; ++i) {
    corpus.add(std::vector<int32_t>(length(rng), 5), std::vector<int32_t>(length(rng), 6));
  }
  return corpus;
}

size_t padded_tokens(const TokenizedCorpus& corpus, const BatchIndices& batch) {
  size_t longest_source = 0, longest_target = 0;
  for (uint32_t i : batch) {
    longest_source = std::max(longest_source, padded_source_length(corpus, i));
    longest_target = std::max(longest_target, padded_target_length(corpus, i));
  }
  return batch.size() * std::max(longest_source, longest_target);
}

TEST(DataBatching, NoBatchOverBudgetAndEveryPairExactlyOnce) {
  TokenizedCorpus corpus = random_corpus(2000, 40, 1);
  for (size_t budget : {41u, 100u, 500u, 3000u}) {
    auto batches = plan_batches(corpus, budget, /*seed=*/7, /*epoch=*/0);
    std::vector<int> seen(corpus.size(), 0);
    for (const auto& batch : batches) {
      ASSERT_FALSE(batch.empty());
      EXPECT_LE(padded_tokens(corpus, batch), budget);
      for (uint32_t i : batch) ++seen[i];
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "pair " << i;
  }
}

TEST(DataBatching, BatchesGroupSimilarLengths) {
  // Sorting by length should keep padding low: far less than the ungrouped worst case.
  TokenizedCorpus corpus = random_corpus(2000, 40, 2);
  auto batches = plan_batches(corpus, 1000, 3, 0);
  size_t real = 0, padded = 0;
  for (const auto& batch : batches) {
    for (uint32_t i : batch) {
      real += std::max(padded_source_length(corpus, i), padded_target_length(corpus, i));
    }
    padded += padded_tokens(corpus, batch);
  }
  EXPECT_GT(static_cast<double>(real) / padded, 0.9);
}

TEST(DataBatching, DeterministicBySeedAndReshuffledPerEpoch) {
  TokenizedCorpus corpus = random_corpus(500, 20, 3);
  auto a = plan_batches(corpus, 200, 11, 0);
  auto b = plan_batches(corpus, 200, 11, 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, plan_batches(corpus, 200, 12, 0));  // another seed
  EXPECT_NE(a, plan_batches(corpus, 200, 11, 1));  // another epoch
}

TEST(DataBatching, UnshuffledPlanIsSortedAndSeedFree) {
  TokenizedCorpus corpus = random_corpus(300, 20, 4);
  auto a = plan_batches(corpus, 150, 1, 0, /*shuffle=*/false);
  EXPECT_EQ(a, plan_batches(corpus, 150, 99, 5, false));
  size_t previous = 0;
  for (const auto& batch : a) {
    for (uint32_t i : batch) {
      size_t longer = std::max(padded_source_length(corpus, i), padded_target_length(corpus, i));
      EXPECT_GE(longer, previous);
      previous = longer;
    }
  }
}

TEST(DataBatching, PairOverBudgetIsAnError) {
  TokenizedCorpus corpus;
  corpus.add(std::vector<int32_t>(10, 5), std::vector<int32_t>(3, 5));
  EXPECT_THROW(plan_batches(corpus, 10, 0, 0), Error);  // needs 11 with EOS
  EXPECT_EQ(plan_batches(corpus, 11, 0, 0).size(), 1u);
}

TEST(DataBatching, IteratorCrossesEpochsAndResumesFromPosition) {
  TokenizedCorpus corpus = random_corpus(200, 15, 5);
  DataPosition start;
  start.seed = 21;
  BatchIterator straight(corpus, 120, start);
  const size_t per_epoch = straight.batches_per_epoch();
  ASSERT_GT(per_epoch, 3u);

  std::vector<BatchIndices> sequence;
  std::vector<DataPosition> positions;
  for (size_t i = 0; i < 3 * per_epoch + 2; ++i) {
    positions.push_back(straight.position());
    sequence.push_back(straight.next());
  }
  // The first epoch is the epoch-0 plan, the second the epoch-1 plan.
  auto epoch0 = plan_batches(corpus, 120, 21, 0);
  auto epoch1 = plan_batches(corpus, 120, 21, 1);
  for (size_t i = 0; i < per_epoch; ++i) {
    EXPECT_EQ(sequence[i], epoch0[i]);
    EXPECT_EQ(sequence[per_epoch + i], epoch1[i]);
  }
  // Restarting from any saved position replays the same batches.
  for (size_t k : {size_t{0}, size_t{1}, per_epoch - 1, per_epoch, 2 * per_epoch + 1}) {
    BatchIterator resumed(corpus, 120, positions[k]);
    for (size_t i = k; i < sequence.size(); ++i) {
      ASSERT_EQ(resumed.next(), sequence[i]) << "resumed at " << k << ", batch " << i;
    }
  }
}

TEST(DataBatching, SplitMixIsTheReferenceSequence) {
  // First outputs of SplitMix64 seeded with 0, from the reference implementation
  // (Vigna, splitmix64.c): fixes the shuffle across platforms and releases.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng.next(), 0x06c45d188009454full);
}

}  // namespace
}  // namespace xf::trainer
