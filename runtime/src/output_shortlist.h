#pragma once
// A lexical shortlist at decoding time: which target ids a batch's output layer covers
// (TransformerBackend then computes the output products, the softmax and the top-k over those
// rows alone, and maps the ids back). The lists come from the model file or from Marian's files
// beside it (xf/format/shortlist.h reads them).
#include <cstdint>
#include <memory>
#include <vector>

#include "xf/format/shortlist.h"
#include "xf/translation_types.h"

namespace xf {
class Model;
}

namespace xf::runtime {

class OutputShortlist {
 public:
  // lists: checked against the vocabularies (check_shortlist) by whoever loaded them.
  // shared_vocabulary: one vocabulary serves both sides (Marian then adds the source ids too).
  // max_sentences: the most sentences a batch has (more cost an allocation in select()).
  OutputShortlist(LexicalShortlist lists, uint32_t target_vocab_size, bool shared_vocabulary,
                  int64_t max_sentences = 1);

  // The target ids of a batch, ascending: the union of its sentences' own selections
  // (sentence_targets), each as Marian's BinaryShortlistGenerator::generate picks them for that
  // sentence alone: [0, first_num), the candidates of every source id of the sentence (its real
  // tokens, EOS included), the source ids themselves with a shared vocabulary, then the ids from
  // first_num on that are not in yet until the count is a multiple of 8 (Marian pads for its int8
  // products; kept so that outputs are Marian's with one sentence a batch, as its fixtures ran).
  // Each sentence is then decoded over its own selection alone (Backend::restrict_output), so that
  // it translates the same in any batch; Marian decodes every sentence of a batch over the union.
  // source_ids: [sentences, stride]. Allocates nothing up to max_sentences.
  const std::vector<int32_t>& select(const int32_t* source_ids, const int32_t* source_lengths, int64_t sentences,
                                     int64_t stride);
  // Sentence s's own selection of the last select(): [target vocab], 1 where the id is in it.
  const uint8_t* sentence_targets(int64_t s) const { return own_.data() + s * target_vocab_size_; }
  const LexicalShortlist& lists() const { return lists_; }

 private:
  LexicalShortlist lists_;
  uint32_t target_vocab_size_;
  bool shared_;
  std::vector<uint8_t> chosen_;  // [target vocab]: the union
  std::vector<uint8_t> own_;     // [sentences, target vocab]: each sentence's own selection
  std::vector<int32_t> ids_;     // capacity: the target vocabulary
};

// How a batch's shortlisted columns are laid out for the output layer's product (host
// backends), so that each sentence's rows compute little beyond their own columns: the union's
// columns grouped by the set of sentences that read them (those of several sentences first,
// then each sentence's alone), and each sentence's runs of panels (xf::kPanelRows columns) that
// hold its columns. Each sentence still decodes over its own ids in ascending order (the lists
// the backend makes with column_of), so the layout changes no result. At batch 32 of the
// bundled student a sentence computes about 0.3 of the union's panels. Allocates nothing after
// construction for up to max_sentences sentences.
class ShortlistColumnLayout {
 public:
  ShortlistColumnLayout(int64_t max_sentences, int64_t target_vocab_size);
  // ids: the batch's union, ascending [count]; sentence_targets: [sentences, vocab] flags of each
  // sentence's own ids (OutputShortlist::sentence_targets(0)). Then add_runs for each sentence
  // in order, given its columns (column_of of its ids).
  void arrange(const int32_t* ids, int64_t count, const uint8_t* sentence_targets, int64_t sentences);
  void add_runs(int64_t s, const int32_t* columns, int64_t size);
  const int32_t* ids() const { return ids_.data(); }                 // [count] the token id of each column
  int32_t column_of(int64_t j) const { return column_of_[j]; }       // the column of the union's j-th id
  const int32_t* run_offsets() const { return run_offsets_.data(); }  // [sentences + 1], in runs
  const int32_t* runs() const { return runs_.data(); }               // [begin, end) column pairs

 private:
  struct Key {
    uint64_t shared_by;  // bit 63 - s for each sentence s that reads the column (s mod 64)
    int32_t readers, j;
  };
  int64_t vocab_, count_ = 0;
  std::vector<Key> keys_;
  std::vector<uint8_t> touched_;  // [panels] a sentence's panels, in add_runs
  std::vector<int32_t> ids_, column_of_, run_offsets_, runs_;
};

// The shortlist a Translator uses (TranslatorOptions::shortlist): the model file's own unless
// "none" or a file is given; a file is Marian's binary lex.*.s2t.bin (its own counts) or its text
// lex.s2t (pieces looked up in the model's vocabularies, pruned with shortlist_best,
// shortlist_first and shortlist_threshold). Null: none. Throws xf::Error("shortlist <path>:
// ...") for a file that does not load or does not fit the model's vocabularies.
std::unique_ptr<OutputShortlist> load_output_shortlist(const Model& model, const TranslatorOptions& options);

}  // namespace xf::runtime
