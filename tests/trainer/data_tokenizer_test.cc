// SentencePiece training through the C++ API, the tokenized-corpus cache and the length filter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "xf/error.h"
#include "xf/trainer/data.h"

namespace xf::trainer {
namespace {

std::vector<TextPair> small_corpus() {
  return {{"the cat sat", "le chat assis"},
          {"a dog ran", "un chien courait"},
          {"the dog sat", "le chien assis"},
          {"a cat ran", "un chat courait"},
          {"été garçon", "summer boy"}};
}

Tokenizer char_tokenizer() {
  SentencePieceTrainOptions options;
  options.model_type = "char";
  options.vocab_size = 100;  // a soft limit: the corpus has fewer characters
  options.threads = 1;
  return Tokenizer::train(small_corpus(), options);
}

TEST(DataTokenizer, TrainedModelHasSharedVocabularyAndOurSpecialIds) {
  Tokenizer tokenizer = char_tokenizer();
  // Words from both sides encode without unknowns: one vocabulary covers source and target.
  EXPECT_GT(tokenizer.vocab_size(), 20);
  for (const char* word : {"chat", "dog", "garçon", "summer"}) {
    auto ids = tokenizer.encode(word);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) EXPECT_NE(id, kUnkId) << word;
    EXPECT_EQ(tokenizer.decode(ids), word);
  }
  // A character seen on neither side is unknown.
  auto unknown = tokenizer.encode("Q");
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), kUnkId), unknown.end());
  // The model proto reloads to the same ids, and special ids are dropped by decode.
  Tokenizer reloaded = Tokenizer::from_model_proto(tokenizer.model_proto(), "copy");
  EXPECT_EQ(reloaded.encode("le chat"), tokenizer.encode("le chat"));
  auto ids = tokenizer.encode("un chien");
  auto with_specials = ids;
  with_specials.insert(with_specials.begin(), kBosId);
  with_specials.push_back(kEosId);
  with_specials.push_back(kPadId);
  EXPECT_EQ(tokenizer.decode(with_specials), "un chien");
}

// A unigram model with pieces longer than a character, so words have several segmentations.
Tokenizer unigram_tokenizer() {
  std::vector<TextPair> pairs;
  for (int k = 0; k < 20; ++k) {
    for (const TextPair& pair : small_corpus()) pairs.push_back(pair);
  }
  SentencePieceTrainOptions options;
  options.model_type = "unigram";
  options.vocab_size = 40;
  options.threads = 1;
  return Tokenizer::train(pairs, options);
}

TEST(DataTokenizer, SampledSegmentationsSpellTheTextAndFollowAlpha) {
  const Tokenizer tokenizer = unigram_tokenizer();
  const std::string text = "the cat sat on a dog";
  const std::vector<int32_t> best = tokenizer.encode(text);
  std::set<std::vector<int32_t>> seen;
  for (int k = 0; k < 64; ++k) {
    const double draw = (k + 0.5) / 64;
    const std::vector<int32_t> ids = tokenizer.sample_encode(text, 16, 0.0, draw);
    EXPECT_EQ(tokenizer.decode(ids), text);  // another split of the same text, never other text
    EXPECT_EQ(ids, tokenizer.sample_encode(text, 16, 0.0, draw));  // the draw decides
    seen.insert(ids);
  }
  // alpha 0: the 16 best equally likely, so 64 evenly spread draws meet all of them.
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_TRUE(seen.count(best));
  // A large alpha leaves only the best segmentation, whatever the draw.
  for (double draw : {0.0, 0.5, 0.999}) EXPECT_EQ(tokenizer.sample_encode(text, 16, 1e4, draw), best);
  // Models without n-best segmentations say so.
  EXPECT_THROW(char_tokenizer().sample_encode(text, 16, 0.2, 0.5), Error);
}

TEST(DataTokenizer, SubsetKeepsTheChosenPiecesInOrder) {
  Tokenizer full = char_tokenizer();
  std::vector<int32_t> kept = {kPadId, kUnkId, kBosId, kEosId};
  for (int32_t id : full.encode("le chat")) kept.push_back(id);
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  ASSERT_LT(kept.size(), static_cast<size_t>(full.vocab_size()));

  Tokenizer subset =
      Tokenizer::from_model_proto(sentencepiece_model_subset(full.model_proto(), kept), "subset");
  ASSERT_EQ(subset.vocab_size(), static_cast<int>(kept.size()));
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(subset.piece(static_cast<int32_t>(i)), full.piece(kept[i])) << i;
  }
  // Ids renumbered through `kept` decode to the same text; encoding uses kept pieces only.
  std::vector<int32_t> renumbered;
  for (int32_t id : full.encode("le chat")) {
    const auto position = std::lower_bound(kept.begin(), kept.end(), id) - kept.begin();
    renumbered.push_back(static_cast<int32_t>(position));
  }
  EXPECT_EQ(subset.decode(renumbered), "le chat");
  EXPECT_EQ(subset.encode("le chat"), renumbered);
  auto outside = subset.encode("dog");  // 'd', 'o', 'g' are not kept
  EXPECT_NE(std::find(outside.begin(), outside.end(), kUnkId), outside.end());

  auto error_of = [&](const std::vector<int32_t>& ids, std::string_view proto) {
    try {
      sentencepiece_model_subset(proto, ids);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of({0, 1, 2}, full.model_proto()),
            "a SentencePiece subset must keep the special ids 0..3 first");
  EXPECT_EQ(error_of({0, 1, 2, 3, 9, 5}, full.model_proto()),
            "the kept piece ids must be ascending and distinct");
  EXPECT_EQ(error_of({0, 1, 2, 3, 100000}, full.model_proto()),
            "piece id 100000 is not in the SentencePiece model (" +
                std::to_string(full.vocab_size()) + " pieces)");
  EXPECT_EQ(error_of(kept, std::string_view(full.model_proto()).substr(0, 40)),
            "SentencePiece model: truncated field");
  EXPECT_THROW(full.piece(full.vocab_size()), Error);
}

TEST(DataTokenizer, GarbageModelIsAOneLineError) {
  try {
    Tokenizer::from_model_proto("not a model", "bad.spm");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("bad.spm: not a SentencePiece model", 0), 0u) << e.what();
  }
}

TEST(DataTokenizer, CacheRoundTripStaleKeyAndTruncation) {
  Tokenizer tokenizer = char_tokenizer();
  TokenizedCorpus corpus = tokenize_corpus(small_corpus(), tokenizer);
  ASSERT_EQ(corpus.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(corpus.target(1), corpus.target(1) + corpus.target_length(1)),
            tokenizer.encode("un chien courait"));

  std::string path = std::string(XF_BINARY_DIR) + "/data_tokenizer_test.cache";
  save_tokenized_corpus(path, 42, corpus);
  TokenizedCorpus loaded;
  ASSERT_TRUE(load_tokenized_corpus(path, 42, &loaded));
  EXPECT_EQ(loaded.ids, corpus.ids);
  EXPECT_EQ(loaded.offsets, corpus.offsets);
  EXPECT_FALSE(load_tokenized_corpus(path, 43, &loaded));  // another key: ignored
  EXPECT_FALSE(load_tokenized_corpus(path + ".absent", 42, &loaded));

  std::string bytes = read_file_bytes(path);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), bytes.size() - 4);
  }
  EXPECT_THROW(load_tokenized_corpus(path, 42, &loaded), Error);
  std::remove(path.c_str());
}

TEST(DataTokenizer, CacheKeyDependsOnFileLanguagesAndModel) {
  Tokenizer tokenizer = char_tokenizer();
  CorpusLanguages en_fr, fr_en;
  fr_en.source = "fr";
  fr_en.target = "en";
  uint64_t key = corpus_cache_key("a\tb\n", en_fr, tokenizer);
  EXPECT_EQ(key, corpus_cache_key("a\tb\n", en_fr, tokenizer));
  EXPECT_NE(key, corpus_cache_key("a\tc\n", en_fr, tokenizer));
  EXPECT_NE(key, corpus_cache_key("a\tb\n", fr_en, tokenizer));
  SentencePieceTrainOptions options;
  options.model_type = "char";
  options.vocab_size = 100;
  options.threads = 1;
  Tokenizer other = Tokenizer::train({{"xyz", "zyx"}}, options);
  EXPECT_NE(key, corpus_cache_key("a\tb\n", en_fr, other));
}

TEST(DataTokenizer, LoadCorpusWritesThenReusesTheCache) {
  Tokenizer tokenizer = char_tokenizer();
  std::string dir = std::string(XF_BINARY_DIR);
  std::string path = dir + "/data_tokenizer_test_corpus.tsv";
  {
    std::ofstream out(path, std::ios::binary);
    out << "the cat\tle chat\na dog\tun chien\n";
  }
  TokenizedCorpus first = load_corpus(path, CorpusLanguages{}, tokenizer, dir);
  uint64_t key = corpus_cache_key(read_file_bytes(path), CorpusLanguages{}, tokenizer);
  char name[64];
  std::snprintf(name, sizeof(name), "/corpus-%016llx.bin", static_cast<unsigned long long>(key));
  TokenizedCorpus cached;
  ASSERT_TRUE(load_tokenized_corpus(dir + name, key, &cached));
  EXPECT_EQ(cached.ids, first.ids);
  TokenizedCorpus second = load_corpus(path, CorpusLanguages{}, tokenizer, dir);
  EXPECT_EQ(second.ids, first.ids);
  EXPECT_EQ(second.offsets, first.offsets);
  std::remove((dir + name).c_str());
  std::remove(path.c_str());
}

TEST(DataTokenizer, LengthFilterDropsEmptyAndLongPairs) {
  TokenizedCorpus corpus;
  corpus.add({5, 6}, {7});           // kept
  corpus.add({}, {7});               // empty source
  corpus.add({5, 6, 7, 8}, {7});     // long source
  corpus.add({5}, {6, 7, 8, 9, 10}); // long target
  corpus.add({9, 9, 9}, {8, 8, 8});  // kept, at the limit
  LengthFilterStats stats;
  TokenizedCorpus kept = filter_by_length(corpus, 3, &stats);
  EXPECT_EQ(stats.kept, 2u);
  EXPECT_EQ(stats.dropped_empty, 1u);
  EXPECT_EQ(stats.dropped_long, 2u);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.ids, (std::vector<int32_t>{5, 6, 7, 9, 9, 9, 8, 8, 8}));
  EXPECT_EQ(kept.source_length(1), 3u);
  EXPECT_EQ(kept.target_length(0), 1u);
}

}  // namespace
}  // namespace xf::trainer
