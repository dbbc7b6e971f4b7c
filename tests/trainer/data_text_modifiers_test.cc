// Training-time text modifiers (--modify-*): each modifier on known text, which side it touches,
// the draws' rates, and an epoch's modified corpus: deterministic by (seed, epoch), re-encoded
// with the run's tokenizer, and replayed exactly by a batch iterator resumed anywhere.
#include <gtest/gtest.h>

#include <map>

#include "batch_replay.h"
#include "xf/error.h"
#include "xf/trainer/data.h"
#include "xf/trainer/text_modifiers.h"

namespace xf::trainer {
namespace {

const std::string kNbsp = "\xC2\xA0";         // U+00A0, French spacing before ! and ?
const std::string kNarrowNbsp = "\xE2\x80\xAF";  // U+202F

// `modify` on each input gives its expected output.
void expect_each(std::string (*modify)(std::string_view),
                 const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [input, expected] : cases) EXPECT_EQ(modify(input), expected) << input;
}

TEST(DataTextModifiers, CaseOfAsciiAndFrenchLetters) {
  // × and ÷ sit among the Latin-1 letters but have no case; other scripts are left alone.
  expect_each(lowercase_text, {{"Where Is THE Station?", "where is the station?"},
                               {"À BIENTÔT, ÉLÈVE ŒUVRE Ÿ Ç", "à bientôt, élève œuvre ÿ ç"},
                               {"ΑΒΓ 日本", "ΑΒΓ 日本"}});
  expect_each(uppercase_text, {{"à bientôt, élève œuvre ÿ ç", "À BIENTÔT, ÉLÈVE ŒUVRE Ÿ Ç"},
                               {"Où est la gare ?", "OÙ EST LA GARE ?"},
                               {"2×3÷1 ß", "2×3÷1 ß"}});
  expect_each(titlecase_text, {{"where is THE station?", "Where Is The Station?"},
                               {"l'homme  était là", "L'homme  Était Là"}});
}

TEST(DataTextModifiers, FinalPunctuationDroppedWithItsSpaces) {
  expect_each(without_final_punctuation,
              {{"Where is the station?", "Where is the station"},
               {"Hello world.", "Hello world"},
               {"Wait... ", "Wait"},
               {"Wait…", "Wait"},
               {"Really?!", "Really"},
               {"Attends" + kNbsp + "!", "Attends"},
               {"Vraiment" + kNarrowNbsp + "?", "Vraiment"},
               // Nothing to drop, or nothing else left: the text as it is.
               {"Hello", "Hello"},
               {"He said \"Hi.\"", "He said \"Hi.\""},
               {"Mr. Smith, hi", "Mr. Smith, hi"},
               {"?!", "?!"},
               {"", ""}});
}

TEST(DataTextModifiers, EachTypoKindAtAChosenPlace) {
  // Places are ASCII letters (swap: a letter followed by another, different one).
  EXPECT_EQ(with_typo("the cat", TypoKind::swap, 0), "hte cat");
  EXPECT_EQ(with_typo("the cat", TypoKind::swap, 2), "the act");  // places t-h, h-e, c-a, a-t
  EXPECT_EQ(with_typo("the cat", TypoKind::swap, 4), "hte cat");  // modulo the 4 places
  EXPECT_EQ(with_typo("book", TypoKind::swap, 1), "boko");        // o-o is no place
  EXPECT_EQ(with_typo("the cat", TypoKind::drop, 3), "the at");
  EXPECT_EQ(with_typo("the cat", TypoKind::repeat, 5), "the catt");
  // Neighbouring key: the place by choice % places, the key by choice / places % neighbours;
  // 'c' has neighbours "xdfv"; the case is kept.
  EXPECT_EQ(with_typo("the cat", TypoKind::neighbour_key, 3), "the xat");
  EXPECT_EQ(with_typo("the cat", TypoKind::neighbour_key, 3 + 6 * 2), "the fat");
  EXPECT_EQ(with_typo("The", TypoKind::neighbour_key, 0), "Rhe");  // 't' -> "ryfg"
  // Accented letters are not places; text without any place is left as it is.
  EXPECT_EQ(with_typo("été", TypoKind::drop, 0), "éé");
  EXPECT_EQ(with_typo("éé 42 ?", TypoKind::drop, 0), "éé 42 ?");
  EXPECT_EQ(with_typo("a.", TypoKind::swap, 0), "a.");
}

TEST(DataTextModifiers, EachDrawTouchesOnlyItsSides) {
  const TextPair pair{"Where is the station?", "Où est la gare ?"};
  using Case = ModifierDraw::Case;
  auto with = [&](auto set) {
    ModifierDraw draw;
    set(draw);
    return modify_pair(pair, draw);
  };
  const TextPair lower = with([](ModifierDraw& d) { d.letter_case = Case::lower; });
  EXPECT_EQ(lower.source, "where is the station?");
  EXPECT_EQ(lower.target, pair.target);  // target as written
  const TextPair upper = with([](ModifierDraw& d) { d.letter_case = Case::upper; });
  EXPECT_EQ(upper.source, "WHERE IS THE STATION?");
  EXPECT_EQ(upper.target, "OÙ EST LA GARE ?");
  const TextPair title = with([](ModifierDraw& d) { d.letter_case = Case::title; });
  EXPECT_EQ(title.source, "Where Is The Station?");
  EXPECT_EQ(title.target, "Où Est La Gare ?");
  const TextPair bare = with([](ModifierDraw& d) { d.drop_final_punctuation = true; });
  EXPECT_EQ(bare.source, "Where is the station");
  EXPECT_EQ(bare.target, pair.target);  // target keeps its punctuation
  const TextPair typo = with([](ModifierDraw& d) {
    d.typo = true;
    d.typo_kind = TypoKind::drop;
    d.typo_choice = 0;
  });
  EXPECT_EQ(typo.source, "here is the station?");
  EXPECT_EQ(typo.target, pair.target);
  // Together, in order: case, final punctuation, typo (on the modified text).
  const TextPair casual = with([](ModifierDraw& d) {
    d.letter_case = Case::lower;
    d.drop_final_punctuation = true;
    d.typo = true;
    d.typo_kind = TypoKind::repeat;
    d.typo_choice = 0;
  });
  EXPECT_EQ(casual.source, "wwhere is the station");
  EXPECT_EQ(casual.target, pair.target);
  EXPECT_EQ(with([](ModifierDraw&) {}).source, pair.source);
}

TEST(DataTextModifiers, DrawsFireAtTheirRates) {
  ModifierOptions options;
  options.lowercase = 0.3;
  options.uppercase = 0.1;
  options.titlecase = 0.05;
  options.no_final_punctuation = 0.4;
  options.typo = 0.2;
  std::map<ModifierDraw::Case, int> cases;
  int punctuation = 0, typos = 0;
  std::map<TypoKind, int> kinds;
  SplitMix64 rng(11);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const ModifierDraw draw = draw_modifiers(options, rng);
    ++cases[draw.letter_case];
    punctuation += draw.drop_final_punctuation;
    if (draw.typo) {
      ++typos;
      ++kinds[draw.typo_kind];
    }
  }
  using Case = ModifierDraw::Case;
  // Binomial standard deviations at n = 20000 are below 0.0035: 0.015 is over 4 of them.
  EXPECT_NEAR(cases[Case::lower] / double(n), 0.3, 0.015);
  EXPECT_NEAR(cases[Case::upper] / double(n), 0.1, 0.015);
  EXPECT_NEAR(cases[Case::title] / double(n), 0.05, 0.015);
  EXPECT_NEAR(punctuation / double(n), 0.4, 0.015);
  EXPECT_NEAR(typos / double(n), 0.2, 0.015);
  EXPECT_EQ(kinds.size(), 4u);  // every kind drawn
  for (const auto& [kind, count] : kinds) EXPECT_NEAR(count / double(typos), 0.25, 0.03);
  // Probability 0 never fires, 1 always.
  ModifierOptions none;
  ModifierOptions all;
  all.lowercase = 1;
  all.no_final_punctuation = 1;
  all.typo = 1;
  all.subword_sampling = 1;
  for (int i = 0; i < 100; ++i) {
    const ModifierDraw drawn_none = draw_modifiers(none, rng);
    EXPECT_FALSE(drawn_none.changes_text() || drawn_none.resegment);
    const ModifierDraw drawn_all = draw_modifiers(all, rng);
    EXPECT_TRUE(drawn_all.letter_case == Case::lower && drawn_all.drop_final_punctuation &&
                drawn_all.typo && drawn_all.resegment);
  }
}

// A character vocabulary that holds both cases, so modified text encodes without unknowns.
Tokenizer mixed_case_tokenizer() {
  SentencePieceTrainOptions options;
  options.model_type = "char";
  options.vocab_size = 100;
  options.threads = 1;
  return Tokenizer::train({{"the cat sat. THE DOG RAN? abcdefghijklmnopqrstuvwxyz",
                            "le chat assis ! LE CHIEN COURAIT ? ABCDEFGHIJKLMNOPQRSTUVWXYZ"}},
                          options);
}

std::vector<TextPair> corpus_text() {
  return {{"The cat sat.", "Le chat assis."},   {"A dog ran?", "Un chien courait ?"},
          {"The dog sat.", "Le chien assis."}, {"A cat ran.", "Un chat courait."},
          {"The cat ran!", "Le chat courait !"}, {"Sit.", "Assis."}};
}

std::pair<std::string, std::string> pair_text(const TokenizedCorpus& c, const Tokenizer& t,
                                              size_t i) {
  return {t.decode({c.source(i), c.source(i) + c.source_length(i)}),
          t.decode({c.target(i), c.target(i) + c.target_length(i)})};
}

TEST(DataTextModifiers, CorpusModifierReencodesTheModifiedSides) {
  const Tokenizer tokenizer = mixed_case_tokenizer();
  const std::vector<TextPair> text = corpus_text();
  const TokenizedCorpus corpus = tokenize_corpus(text, tokenizer);
  ModifierOptions lower_bare;
  lower_bare.lowercase = 1;
  lower_bare.no_final_punctuation = 1;
  const TokenizedCorpus casual = CorpusModifier(lower_bare, tokenizer, 64).apply(corpus, 3, 0);
  ASSERT_EQ(casual.size(), corpus.size());
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(pair_text(casual, tokenizer, i).first,
              lowercase_text(without_final_punctuation(text[i].source)));
    // Targets keep their ids, not only their text.
    EXPECT_EQ(std::vector<int32_t>(casual.target(i), casual.target(i) + casual.target_length(i)),
              std::vector<int32_t>(corpus.target(i), corpus.target(i) + corpus.target_length(i)));
  }
  ModifierOptions upper;
  upper.uppercase = 1;
  const TokenizedCorpus loud = CorpusModifier(upper, tokenizer, 64).apply(corpus, 3, 0);
  EXPECT_EQ(pair_text(loud, tokenizer, 1), std::make_pair(std::string("A DOG RAN?"),
                                                          std::string("UN CHIEN COURAIT ?")));
  // A modified side past max_length keeps the pair as written: "▁ASSIS." is 7 characters,
  // "▁THE▁CAT▁SAT." more.
  const TokenizedCorpus short_only = CorpusModifier(upper, tokenizer, 7).apply(corpus, 3, 0);
  EXPECT_EQ(pair_text(short_only, tokenizer, 5),
            std::make_pair(std::string("SIT."), std::string("ASSIS.")));
  EXPECT_EQ(pair_text(short_only, tokenizer, 0).first, "The cat sat.");
  // Off: the corpus as it is.
  const TokenizedCorpus same = CorpusModifier({}, tokenizer, 64).apply(corpus, 3, 0);
  EXPECT_EQ(same.ids, corpus.ids);
  EXPECT_EQ(same.offsets, corpus.offsets);
}

// Subword sampling changes a source's ids, never its text, and leaves the targets alone.
TEST(DataTextModifiers, SubwordSamplingResegmentsSourcesOnly) {
  std::vector<TextPair> text;
  for (int k = 0; k < 30; ++k) {
    for (const TextPair& pair : corpus_text()) text.push_back(pair);
  }
  SentencePieceTrainOptions unigram;
  unigram.model_type = "unigram";
  unigram.vocab_size = 50;
  unigram.threads = 1;
  const Tokenizer tokenizer = Tokenizer::train(text, unigram);
  const TokenizedCorpus corpus = tokenize_corpus(text, tokenizer);
  ModifierOptions sampling;
  sampling.subword_sampling = 1;
  sampling.subword_alpha = 0;
  const CorpusModifier modifier(sampling, tokenizer, 64);
  const TokenizedCorpus sampled = modifier.apply(corpus, 3, 0);
  ASSERT_EQ(sampled.size(), corpus.size());
  size_t resegmented = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    EXPECT_EQ(pair_text(sampled, tokenizer, i), pair_text(corpus, tokenizer, i));
    EXPECT_EQ(std::vector<int32_t>(sampled.target(i), sampled.target(i) + sampled.target_length(i)),
              std::vector<int32_t>(corpus.target(i), corpus.target(i) + corpus.target_length(i)));
    resegmented += std::vector<int32_t>(sampled.source(i), sampled.source(i) + sampled.source_length(i)) !=
                   std::vector<int32_t>(corpus.source(i), corpus.source(i) + corpus.source_length(i));
  }
  EXPECT_GT(resegmented, corpus.size() / 2);  // alpha 0: the best split 1 time in 16 or so
  EXPECT_EQ(sampled.ids, modifier.apply(corpus, 3, 0).ids);
  EXPECT_NE(sampled.ids, modifier.apply(corpus, 3, 1).ids);
  // A tokenizer that cannot sample is refused when the modifier is made, naming the option.
  try {
    CorpusModifier refused(sampling, mixed_case_tokenizer(), 64);
    FAIL() << "a char model was taken for subword sampling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--modify-subword-sampling"), std::string::npos);
  }
}

// corpus_text() `copies` times, tokenized.
TokenizedCorpus repeated_corpus(const Tokenizer& tokenizer, int copies) {
  std::vector<TextPair> text;
  for (int k = 0; k < copies; ++k) {
    for (const TextPair& pair : corpus_text()) text.push_back(pair);
  }
  return tokenize_corpus(text, tokenizer);
}

ModifierOptions some_of_each() {
  ModifierOptions options;
  options.lowercase = 0.3;
  options.titlecase = 0.1;
  options.no_final_punctuation = 0.3;
  options.typo = 0.3;
  return options;
}

// Adding the subword sampling's draw after the others left the other modifiers' draws as they
// were, so runs started before it resume to the same examples.
TEST(DataTextModifiers, SubwordSamplingDrawComesLast) {
  ModifierOptions without = some_of_each();
  ModifierOptions with = without;
  with.subword_sampling = 0.5;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SplitMix64 a(seed), b(seed);
    const ModifierDraw x = draw_modifiers(without, a);
    const ModifierDraw y = draw_modifiers(with, b);
    EXPECT_EQ(x.letter_case, y.letter_case);
    EXPECT_EQ(x.drop_final_punctuation, y.drop_final_punctuation);
    EXPECT_EQ(x.typo, y.typo);
    EXPECT_EQ(x.typo_kind, y.typo_kind);
    EXPECT_EQ(x.typo_choice, y.typo_choice);
  }
}

TEST(DataTextModifiers, EpochCorpusDeterministicBySeedAndEpoch) {
  const Tokenizer tokenizer = mixed_case_tokenizer();
  const TokenizedCorpus corpus = repeated_corpus(tokenizer, 40);
  const CorpusModifier modifier(some_of_each(), tokenizer, 64);
  const TokenizedCorpus a = modifier.apply(corpus, 3, 0);
  EXPECT_EQ(a.ids, modifier.apply(corpus, 3, 0).ids);
  EXPECT_NE(a.ids, modifier.apply(corpus, 4, 0).ids);  // another seed
  EXPECT_NE(a.ids, modifier.apply(corpus, 3, 1).ids);  // another epoch
  size_t changed = 0;
  for (size_t i = 0; i < corpus.size(); ++i) changed += pair_text(a, tokenizer, i) != pair_text(corpus, tokenizer, i);
  // 1 - 0.6 * 0.7 * 0.7 = 0.706 of the pairs drawn for a change (a typo may find no place).
  EXPECT_GT(changed, corpus.size() / 2);
  EXPECT_LT(changed, corpus.size() * 9 / 10);
}

// Modifiers and joins together: each epoch's batches index that epoch's examples, and an
// iterator started from any saved position replays the same examples (by their tokens).
TEST(DataTextModifiers, IteratorWithModifiersAndJoinsResumesFromPosition) {
  const Tokenizer tokenizer = mixed_case_tokenizer();
  const TokenizedCorpus corpus = repeated_corpus(tokenizer, 30);
  const ModifierOptions options = some_of_each();
  JoinOptions joins;
  joins.probability = 0.3;
  joins.max_length = 60;
  auto make = [&](DataPosition position) {
    return BatchIterator(corpus, 200, position, joins,
                         std::make_unique<CorpusModifier>(options, tokenizer, 60));
  };
  DataPosition start;
  start.seed = 13;
  testing::expect_replays_from_saved_positions(make, start);
  const size_t per_epoch = make(start).batches_per_epoch();
  // A lowercased source was trained on: some example of the first epoch holds "the cat" with
  // its target's "Le" still capitalised.
  const std::vector<int32_t> lower_the = tokenizer.encode("the cat");
  bool seen = false;
  BatchIterator again = make(start);
  for (size_t b = 0; b < per_epoch && !seen; ++b) {
    for (const testing::Example& example : testing::examples_of(again, again.next())) {
      const std::string source = tokenizer.decode(example.first);
      const std::string target = tokenizer.decode(example.second);
      if (source.rfind("the cat", 0) == 0 && target.rfind("Le chat", 0) == 0) seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace xf::trainer
