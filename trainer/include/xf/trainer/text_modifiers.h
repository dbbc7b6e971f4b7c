#pragma once
// Training-time noise for text as people type it (issue 37): the corpus (Tatoeba) is all
// capitalised and punctuated, so a model trained on it alone breaks on "where is the station".
// Like OpusTrainer's modifiers, each is applied to a share of an epoch's pairs while the batches
// are made, deterministically by (seed, epoch, pair), never by rewriting the corpus on disk:
//   lowercase                the source lowercased, the target as written
//   uppercase, titlecase     both sides (the translation of "HELLO" is "BONJOUR")
//   no final punctuation     the source's final . ! ? ... dropped, the target as written
//   typo                     one typo in the source: two letters swapped, one dropped, one
//                            repeated, or one replaced by a neighbouring key (QWERTY)
//   subword sampling         the source segmented by a sampled segmentation of SentencePiece's
//                            n best instead of the best one (subword regularization): a typo'd
//                            word splits into pieces the best segmentation of clean text never
//                            uses, and sampling shows the model such splits of known words
// The text functions are also what xf-join --casual uses to make casual test sets.
// Case mapping covers the Latin letters (ASCII, Latin-1, Latin Extended-A: all of French);
// other characters are left as they are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "xf/trainer/data.h"

namespace xf::trainer {

std::string lowercase_text(std::string_view text);
std::string uppercase_text(std::string_view text);
// The first letter of each whitespace-separated word upper case, the others lower case.
std::string titlecase_text(std::string_view text);
// `text` without its final run of sentence punctuation (. ! ? ; : , and the ellipsis U+2026)
// and the spaces before it (French puts U+00A0 or U+202F before ! and ?); `text` itself when
// nothing else would be left.
std::string without_final_punctuation(std::string_view text);

enum class TypoKind { swap, drop, repeat, neighbour_key };
inline constexpr int kTypoKinds = 4;
// One typo of `kind` at the `choice`-th (modulo their count) place where it can go: swap at a
// letter followed by a different letter, the other kinds at any ASCII letter (neighbour_key picks
// among that key's neighbours by `choice` too, keeping the letter's case). `text` itself when
// there is no such place.
std::string with_typo(std::string_view text, TypoKind kind, uint64_t choice);

// The chance of each modifier; the three case modifiers exclude each other (one draw picks at
// most one of them), so their sum is at most 1. All 0: the corpus as it is.
struct ModifierOptions {
  double lowercase = 0;             // --modify-lowercase
  double uppercase = 0;             // --modify-uppercase
  double titlecase = 0;             // --modify-titlecase
  double no_final_punctuation = 0;  // --modify-no-final-punctuation
  double typo = 0;                  // --modify-typo
  double subword_sampling = 0;      // --modify-subword-sampling
  double subword_alpha = 0.2;       // --subword-alpha: P(segmentation)^alpha
  bool any() const {
    return lowercase > 0 || uppercase > 0 || titlecase > 0 || no_final_punctuation > 0 ||
           typo > 0 || subword_sampling > 0;
  }
};

// Segmentations a sampled source is drawn from (SentencePiece's n best).
inline constexpr int kSubwordSamplingNBest = 16;

// Which modifiers one pair gets: three draws always (case, final punctuation, typo), so which
// modifiers fire never shifts the draws of the others; a typo draws its kind and place after;
// then the subword sampling's draw, and its pick when it fires (last, so that the draws of runs
// made before it existed are unchanged).
struct ModifierDraw {
  enum class Case { as_written, lower, upper, title } letter_case = Case::as_written;
  bool drop_final_punctuation = false;
  bool typo = false;
  TypoKind typo_kind = TypoKind::swap;
  uint64_t typo_choice = 0;
  bool resegment = false;       // the source's ids by Tokenizer::sample_encode
  double segmentation_pick = 0;  // its draw
  bool changes_text() const {
    return letter_case != Case::as_written || drop_final_punctuation || typo;
  }
};
ModifierDraw draw_modifiers(const ModifierOptions& options, SplitMix64& rng);
// `pair` with the drawn text modifiers applied: case, then final punctuation, then the typo.
TextPair modify_pair(const TextPair& pair, const ModifierDraw& draw);

// Applies the modifiers to one epoch's copy of a tokenized corpus: a pair a modifier touches is
// decoded, modified and encoded again with the run's tokenizer (the other pairs keep their ids).
// A pair whose modified side would be empty or longer than max_length tokens, or that holds the
// unknown id, stays as it is; a resegmented source is sampled from the modified text. Pair i's
// draws come from a generator of its own seeded by (seed, epoch, i), so an epoch's corpus depends
// on nothing else and a resume rebuilds it exactly.
class CorpusModifier {
 public:
  // Throws xf::Error when subword sampling is asked of a tokenizer that cannot sample.
  CorpusModifier(const ModifierOptions& options, const Tokenizer& tokenizer, size_t max_length);
  bool active() const { return options_.any(); }
  TokenizedCorpus apply(const TokenizedCorpus& corpus, uint64_t seed, uint64_t epoch) const;

 private:
  ModifierOptions options_;
  const Tokenizer* tokenizer_;
  size_t max_length_;
};

}  // namespace xf::trainer
