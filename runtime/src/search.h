#pragma once
// Greedy and beam search on the host over a Backend. All bookkeeping is sized from the plan at
// construction; a search allocates nothing.
#include <cstdint>
#include <vector>

#include "xf/format/config.h"
#include "xf/translation_types.h"

namespace xf::runtime {

class Backend;
struct MemoryPlan;

class OutputShortlist;

class Search {
 public:
  Search(const MemoryPlan& plan, const ModelConfig& config);

  // Staging for the next batch: source ids [max_sentences, max_source_len] and lengths; each
  // sentence's index in the call (it seeds the sampling) and target prefix (null when none).
  int32_t* source_ids() { return source_ids_.data(); }
  int32_t* source_lengths() { return source_lengths_.data(); }
  int64_t* sentence_indices() { return sentence_indices_.data(); }
  const std::vector<int32_t>** target_prefixes() { return prefixes_.data(); }

  // Translates the staged batch: `sentences` sentences padded to source_len tokens (EOS
  // included). results[i] receives sentence i's n_best hypotheses, best first; each result's
  // storage is reused (ids capacity reserved for the plan's longest output). Options left unset
  // take xf's defaults (the Translator has given them the model's).
  void translate(Backend& backend, int64_t sentences, int64_t source_len, int64_t beam,
                 const TranslateOptions& options, TokenTranslation* const* results);

  // Scores the staged batch's targets (staged as target prefixes; null: an empty target) by
  // teacher forcing: results[i] receives sentence i's target ids then EOS and each one's
  // log-probability. Needs the backend's host logits.
  void score(Backend& backend, int64_t sentences, int64_t source_len, ScoringResult* const* results);

  // The lexical shortlist whose selection each translated batch's output layer is restricted to
  // (null: none; not owned). Scoring always uses the whole vocabulary.
  OutputShortlist* shortlist = nullptr;

  // A beam of one runs the simpler greedy loop; tests turn this off to compare the two.
  bool use_greedy_for_beam_one = true;
  // Greedy search samples even with sampling_topk 1 (tests check that it then equals greedy).
  bool always_sample = false;
  // False: the unknown token is never chosen, and the other tokens keep their log-probabilities
  // (the model's decoding.allow_unk 0, Marian's allow-unk false): top_k() gives a spare candidate
  // in case it is one of them. Backends without the spare (CUDA) choose it as any token.
  bool allow_unk = true;

 private:
  struct Candidate {
    float log_prob;
    int32_t token;
    int32_t parent;  // row within the sentence's beam
    int32_t order;   // rank within its row's top-k: breaks ties deterministically
  };
  struct Finished {
    int64_t length;  // output tokens, EOS included when produced
    float log_prob;
    float score;
    int32_t* ids;    // [length without EOS]
    int64_t id_count;
  };

  void greedy(Backend& backend, int64_t sentences, const TranslateOptions& options);
  void beam_search(Backend& backend, int64_t sentences, int64_t beam, const TranslateOptions& options);
  // Removes the slots marked done (greedy: beam = 1), moving the rest of the host state and the
  // backend's batch forward; parents_ then maps new rows to old ones. Returns the slots left.
  int64_t drop_finished(Backend& backend, int64_t slots, int64_t beam, int32_t* history);
  // The forced token of a sentence at a step, or -1.
  int32_t forced_token(int64_t sentence, int64_t step) const;
  // Applies the repetition penalty and the bans (n-grams, EOS before min_decoding_length, the
  // unknown token) to a row's logits, given its tokens so far.
  void adjust_logits(float* logits, const int32_t* ids, int64_t count, const TranslateOptions& options);
  // The loop guard (TranslateOptions::disable_loop_guard): the tokens to keep of a hypothesis of
  // `count` tokens from a source of `source_tokens` (with EOS), or `count` when it goes on.
  static int64_t loop_guard_cut(const int32_t* ids, int64_t count, int64_t source_tokens);
  // Draws the next token of a sentence from a row's log-probabilities (sampling options).
  int32_t sample(const float* log_probs, int64_t sentence, const TranslateOptions& options);
  void add_finished(int64_t sentence, const int32_t* ids, int64_t id_count, int64_t length,
                    float log_prob, const TranslateOptions& options);
  void write_results(int64_t sentences, int64_t n_best, TokenTranslation* const* results);
  // Streams a sentence's best finished hypothesis (beam search), then its end.
  void stream_best(int64_t sentence, const StreamCallback& callback) const;

  const MemoryPlan& plan_;
  ModelConfig config_;
  int64_t max_finished_ = 0;  // per sentence

  std::vector<int32_t> source_ids_;      // [max_sentences, max_source_len]
  std::vector<int32_t> source_lengths_;  // [max_sentences]
  std::vector<int64_t> max_length_;      // [max_sentences] output limit per sentence
  std::vector<int64_t> sentence_indices_;  // [max_sentences] index in the call
  std::vector<const std::vector<int32_t>*> prefixes_;  // [max_sentences] forced first tokens
  std::vector<uint64_t> rng_;            // [max_sentences] sampling state per sentence
  // Slot: a sentence's place in the backend's batch; finished sentences are dropped, so a
  // slot's sentence changes. max_length_, finished_* are by sentence, done_ by slot.
  std::vector<int32_t> slot_sentence_;   // [max_sentences]
  std::vector<int32_t> kept_slots_;      // [max_sentences]
  std::vector<uint8_t> done_;            // [max_sentences] by slot
  std::vector<int32_t> live_;            // [max_sentences] by slot: live hypotheses (beam)
  std::vector<int32_t> tokens_;          // [max_rows] each row's next input
  std::vector<float> log_probs_;         // [max_rows] each row's cumulative log-probability
  std::vector<int32_t> history_[2];      // [max_rows, max_target_len] tokens so far per row
  std::vector<float> top_values_;        // [max_rows, max_beam + 1]: a spare (allow_unk)
  std::vector<int32_t> top_ids_;         // [max_rows, max_beam + 1]
  std::vector<int32_t> parents_;         // [max_rows]
  std::vector<Candidate> candidates_;    // [max_beam * max_beam]
  std::vector<int32_t> finished_ids_;    // [max_sentences, max_finished, max_target_len]
  std::vector<Finished> finished_;       // [max_sentences, max_finished]
  std::vector<int64_t> finished_count_;  // [max_sentences]
  std::vector<uint64_t> seen_;           // [target_vocab] repetition penalty: stamp of last use
  uint64_t stamp_ = 0;
  std::vector<int32_t> sample_ids_;      // [target_vocab] sampling candidates
  std::vector<float> sample_weights_;    // [target_vocab]
};

}  // namespace xf::runtime
