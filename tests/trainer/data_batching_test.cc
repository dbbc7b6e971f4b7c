// Batching by token count: budget respected, every pair exactly once per epoch, deterministic by
// seed, reshuffled per epoch, and an iterator that resumes exactly from a saved position.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "xf/error.h"
#include "batch_replay.h"
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

// Joined examples (--join-probability): every pair once an epoch, within the length limit,
// 2..max_pairs pairs a join, about the asked share joined, deterministic by (seed, epoch).
TEST(DataJoins, EveryPairOnceWithinTheLimitAndTheAskedShareJoined) {
  TokenizedCorpus corpus = random_corpus(4000, 20, 6);
  JoinOptions options;
  options.probability = 0.3;
  options.max_pairs = 4;
  options.max_length = 40;  // two pairs always fit, four often do not
  const auto groups = plan_joins(corpus, options, /*seed=*/9, /*epoch=*/0);
  std::vector<int> seen(corpus.size(), 0);
  size_t joined = 0;
  std::vector<size_t> by_size(5, 0);
  for (const auto& group : groups) {
    ASSERT_GE(group.size(), 1u);
    ASSERT_LE(group.size(), 4u);
    ++by_size[group.size()];
    size_t source = 0, target = 0;
    for (uint32_t i : group) {
      ++seen[i];
      source += corpus.source_length(i);
      target += corpus.target_length(i);
    }
    if (group.size() > 1) {
      ++joined;
      EXPECT_LE(std::max(source, target), 40u);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "pair " << i;
  EXPECT_GT(by_size[2], 0u);
  EXPECT_GT(by_size[3], 0u);
  EXPECT_GT(by_size[4], 0u);
  const double share = static_cast<double>(joined) / static_cast<double>(groups.size());
  EXPECT_NEAR(share, 0.3, 0.03);

  // The joined corpus: each group's sources, then its targets, concatenated in group order.
  const TokenizedCorpus examples = join_pairs(corpus, groups);
  ASSERT_EQ(examples.size(), groups.size());
  EXPECT_EQ(examples.ids.size(), corpus.ids.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<int32_t> source, target;
    for (uint32_t i : groups[g]) {
      source.insert(source.end(), corpus.source(i), corpus.source(i) + corpus.source_length(i));
      target.insert(target.end(), corpus.target(i), corpus.target(i) + corpus.target_length(i));
    }
    ASSERT_EQ(std::vector<int32_t>(examples.source(g), examples.source(g) + examples.source_length(g)),
              source);
    ASSERT_EQ(std::vector<int32_t>(examples.target(g), examples.target(g) + examples.target_length(g)),
              target);
  }
}

TEST(DataJoins, LimitBelowTwoPairsLeavesPairsAloneAndNoProbabilityJoinsNothing) {
  TokenizedCorpus corpus;
  for (int i = 0; i < 50; ++i) corpus.add(std::vector<int32_t>(6, i), std::vector<int32_t>(5, i));
  JoinOptions options;
  options.probability = 1;
  options.max_length = 11;  // 6 + 6 source tokens do not fit
  for (const auto& group : plan_joins(corpus, options, 1, 0)) EXPECT_EQ(group.size(), 1u);
  options.max_length = 12;  // exactly two fit, never three
  for (const auto& group : plan_joins(corpus, options, 1, 0)) EXPECT_LE(group.size(), 2u);
  size_t pairs_of_two = 0;
  for (const auto& group : plan_joins(corpus, options, 1, 0)) pairs_of_two += group.size() == 2;
  EXPECT_EQ(pairs_of_two, 25u);  // every example a join: all 50 pairs in pairs
  options.probability = 0;
  options.max_length = 0;
  for (const auto& group : plan_joins(corpus, options, 1, 0)) EXPECT_EQ(group.size(), 1u);
}

TEST(DataJoins, DeterministicBySeedAndEpoch) {
  TokenizedCorpus corpus = random_corpus(500, 10, 7);
  JoinOptions options;
  options.probability = 0.5;
  options.max_length = 30;
  const auto a = plan_joins(corpus, options, 3, 0);
  EXPECT_EQ(a, plan_joins(corpus, options, 3, 0));
  EXPECT_NE(a, plan_joins(corpus, options, 4, 0));  // another seed
  EXPECT_NE(a, plan_joins(corpus, options, 3, 1));  // another epoch
}

// The iterator with joins: each epoch's batches index that epoch's joined corpus, and a
// restart from any saved position replays the same examples (compared by their tokens).
TEST(DataJoins, IteratorWithJoinsResumesFromPosition) {
  TokenizedCorpus corpus;
  std::mt19937 rng(8);
  std::uniform_int_distribution<int32_t> token(4, 1000);
  std::uniform_int_distribution<size_t> length(1, 8);
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> source(length(rng)), target(length(rng));
    for (auto& id : source) id = token(rng);
    for (auto& id : target) id = token(rng);
    corpus.add(source, target);
  }
  JoinOptions joins;
  joins.probability = 0.4;
  joins.max_length = 24;
  DataPosition start;
  start.seed = 13;
  const auto sequence = testing::expect_replays_from_saved_positions(
      [&](const DataPosition& position) { return BatchIterator(corpus, 100, position, joins); },
      start);
  size_t longest_source = 0;
  for (const auto& batch : sequence) {
    for (const auto& example : batch) {
      longest_source = std::max(longest_source, example.first.size());
      ASSERT_LE(std::max(example.first.size(), example.second.size()), 24u);
    }
  }
  EXPECT_GT(longest_source, 8u);  // joins happened
  // Without joins the iterator's corpus is the one given, untouched.
  BatchIterator plain(corpus, 100, start);
  EXPECT_EQ(&plain.corpus(), &corpus);
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
