#pragma once
// The training loop's validation: the dev set (loss over every pair, greedy BLEU over the first
// --valid-bleu-sentences distinct sources), its score split over the ranks, the keep-best rule
// (--best-by) and the Validator the loop calls.
#include <cstdint>
#include <string>
#include <vector>

#include "xf/trainer/checkpoint.h"
#include "xf/trainer/checkpointer.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/train_log.h"
#include "xf/trainer/train_options.h"
#include "xf/trainer/trained_model.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {

struct ValidationSet {
  TokenizedCorpus corpus;                          // all dev pairs, for the loss
  std::vector<std::vector<int32_t>> bleu_sources;  // distinct sources, without EOS
  std::vector<std::vector<std::string>> bleu_references;  // every target of that source
};

ValidationSet load_validation_set(const TrainOptions& options, const Tokenizer& tokenizer,
                                  const CorpusLanguages& languages);

struct ValidationResult {
  double loss = 0;  // NLL per target token
  double bleu = 0;
};

// Each rank takes every size()-th loss batch and BLEU chunk; the NLL and BLEU's sufficient
// statistics are then added over the ranks, so every rank gets the same result. BLEU is of the
// runtime's greedy translations (translate_greedy): what xf-run --beam 1 and xf-eval give for
// the checkpoint converted to an f32 model.
ValidationResult validate(TransformerModel& model, const ValidationSet& set,
                          const Tokenizer& tokenizer, const TrainOptions& options,
                          Communicator& ranks);

// Records `result` in `state` (last scores; best scores and the count of validations without
// improvement, by best_by "loss" or "bleu"; the first validation always improves). Returns
// whether it improved.
bool record_validation(TrainingProgress& state, const ValidationResult& result,
                       const std::string& best_by);

// A validation of the run's current step: scores, keep-best checkpoint, progress line and CSV
// row. Nothing without a dev set.
class Validator {
 public:
  // `dev`: null without --dev. Validates `model` for `state`'s step over the ranks, records the
  // scores in `state`, saves best/ through `checkpoints` and logs to `log`. The references must
  // outlive it.
  Validator(const ValidationSet* dev, const Tokenizer& tokenizer, const TrainOptions& options,
            TrainedModel& model, TrainingProgress& state, Communicator& ranks,
            Checkpointer& checkpoints, TrainLog& log)
      : dev_(dev),
        tokenizer_(tokenizer),
        options_(options),
        model_(model),
        state_(state),
        ranks_(ranks),
        checkpoints_(checkpoints),
        log_(log) {}
  // `epoch`: the data's position as an epoch fraction, for the logs.
  void run(double epoch);
  int64_t last_validated_step() const { return last_validated_step_; }

 private:
  const ValidationSet* dev_;
  const Tokenizer& tokenizer_;
  const TrainOptions& options_;
  TrainedModel& model_;
  TrainingProgress& state_;
  Communicator& ranks_;
  Checkpointer& checkpoints_;
  TrainLog& log_;
  int64_t last_validated_step_ = -1;
};

}  // namespace xf::trainer
