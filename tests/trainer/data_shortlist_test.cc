// The shortlist's IBM Model 1 (xf/trainer/shortlist.h) on a tiny corpus whose alignments are
// known: a one-to-one dictionary, words in random order, and a target "article" in every
// sentence that no source word explains.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "xf/error.h"
#include "xf/trainer/shortlist.h"

namespace xf::trainer {
namespace {

constexpr uint32_t kSourceVocab = 16, kTargetVocab = 40;
constexpr int32_t kArticle = 5;
int32_t translation_of(int32_t source) { return 20 + source; }  // source words 4..13

struct Corpus {
  std::vector<std::vector<int32_t>> sources, targets;
};

// Sentences of 2-5 distinct source words; each target holds their translations and the article,
// shuffled.
Corpus dictionary_corpus(size_t pairs, uint32_t seed) {
  std::mt19937 rng(seed);
  Corpus corpus;
  std::vector<int32_t> words = {4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  for (size_t i = 0; i < pairs; ++i) {
    std::shuffle(words.begin(), words.end(), rng);
    const size_t length = 2 + rng() % 4;
    std::vector<int32_t> source(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(length)), target;
    for (int32_t s : source) target.push_back(translation_of(s));
    target.push_back(kArticle);
    std::shuffle(target.begin(), target.end(), rng);
    corpus.sources.push_back(source);
    corpus.targets.push_back(target);
  }
  return corpus;
}

TEST(IbmModel1, LearnsAKnownDictionaryAndLeavesTheArticleToTheEmptyWord) {
  const Corpus corpus = dictionary_corpus(300, 3);
  const LexicalTable table = ibm_model1(corpus.sources, corpus.targets, kSourceVocab, kTargetVocab, 10);
  for (int32_t s = 4; s <= 13; ++s) {
    EXPECT_GT(table.probability(static_cast<uint32_t>(s), translation_of(s)), 0.9f) << s;
    // Co-occurrence alone ties the article with the translation (both in every sentence of s).
    EXPECT_LT(table.probability(static_cast<uint32_t>(s), kArticle), 0.05f) << s;
  }
  EXPECT_GT(table.probability(table.null_source(), kArticle), 0.5f);
  EXPECT_EQ(table.probability(4, 39), 0.0f);  // never seen together
  // Each row is a distribution.
  for (uint32_t s = 4; s <= table.null_source(); ++s) {
    float sum = 0;
    for (uint64_t c = table.offsets[s]; c < table.offsets[s + 1]; ++c) sum += table.probabilities[c];
    if (table.offsets[s + 1] > table.offsets[s]) EXPECT_NEAR(sum, 1.0f, 1e-4f) << s;
  }
}

TEST(IbmModel1, OneRoundIsCoOccurrenceSharedAmongTheSources) {
  // One pair: each target is shared by the two sources and the empty word (1/3 each), so each
  // source's row is uniform over the pair's targets.
  const LexicalTable table = ibm_model1({{4, 5}}, {{20, 21, 22}}, 8, 24, 1);
  for (uint32_t s : {4u, 5u, 8u})
    for (int32_t t : {20, 21, 22}) EXPECT_NEAR(table.probability(s, t), 1.0f / 3, 1e-6f);
}

TEST(ShortlistTopTargets, KeepsTheKMostProbableAboveTheFloorBySource) {
  const Corpus corpus = dictionary_corpus(300, 4);
  const LexicalTable table = ibm_model1(corpus.sources, corpus.targets, kSourceVocab, kTargetVocab, 10);
  const std::vector<ShortlistEntry> top1 = top_targets(table, 1, 1e-4f);
  ASSERT_EQ(top1.size(), 10u);  // source words 4..13, one each; the empty word is not written
  for (const ShortlistEntry& e : top1) EXPECT_EQ(e.target, translation_of(e.source));
  const std::vector<ShortlistEntry> top3 = top_targets(table, 3, 1e-30f);
  ASSERT_EQ(top3.size(), 30u);
  for (size_t i = 0; i < top3.size(); ++i) {
    if (i % 3 == 0) EXPECT_EQ(top3[i].target, translation_of(top3[i].source));
    else EXPECT_LE(top3[i].probability, top3[i - 1].probability);
    EXPECT_EQ(top3[i].source, top3[i - i % 3].source);
  }
  for (const ShortlistEntry& e : top_targets(table, 10, 0.5f)) EXPECT_GE(e.probability, 0.5f);
}

TEST(ShortlistTopTargets, TargetsBelowTheFirstTakeNoPlace) {
  // Translations of source words 4..13 are targets 24..33: from target 29 on, the words 4..8 lose
  // their translation and keep K others; the words 9..13 keep theirs first.
  const Corpus corpus = dictionary_corpus(300, 4);
  const LexicalTable table = ibm_model1(corpus.sources, corpus.targets, kSourceVocab, kTargetVocab, 10);
  const std::vector<ShortlistEntry> all = top_targets(table, 2, 1e-30f);
  const std::vector<ShortlistEntry> beyond = top_targets(table, 2, 1e-30f, 29);
  ASSERT_EQ(beyond.size(), 20u);  // still two a source word
  for (size_t i = 0; i < beyond.size(); ++i) {
    EXPECT_GE(beyond[i].target, 29);
    if (beyond[i].source >= 9 && i % 2 == 0) EXPECT_EQ(beyond[i].target, translation_of(beyond[i].source));
  }
  // The plain top 2 of a word 4..8 holds its translation, below 29.
  for (const ShortlistEntry& e : all)
    if (e.source == 4) EXPECT_TRUE(e.target == translation_of(4) || e.probability < 0.5f);
  EXPECT_EQ(all[0].target, translation_of(4));
}

TEST(ShortlistTopTargets, TargetsByFrequency) {
  EXPECT_EQ(targets_by_frequency({{3, 1, 3}, {2, 3, 1}}, 5), (std::vector<int32_t>{3, 1, 2, 0, 4}));
}

TEST(IbmModel1, RefusesIdsOutsideTheVocabularies) {
  EXPECT_THROW(ibm_model1({{4, 16}}, {{20}}, kSourceVocab, kTargetVocab, 1), Error);
  EXPECT_THROW(ibm_model1({{4}}, {{40}}, kSourceVocab, kTargetVocab, 1), Error);
  EXPECT_THROW(ibm_model1({{4}}, {}, kSourceVocab, kTargetVocab, 1), Error);
}

}  // namespace
}  // namespace xf::trainer
