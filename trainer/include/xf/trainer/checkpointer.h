#pragma once
// The training loop's checkpoints: step-* (every --save-every steps, at the end and on a stop
// request, --keep of them kept) and best/ (on each validation that improves), written by rank 0
// from the host model. Each save first checks that every rank holds rank 0's parameters.
#include <cstdint>
#include <map>
#include <string>

#include "xf/trainer/checkpoint.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/train_options.h"
#include "xf/trainer/trained_model.h"

namespace xf::trainer {

class Checkpointer {
 public:
  // Checkpoints of `model` and `state` (at `batches`' position) with the vocabulary and the
  // saved options, in options.out_dir, options.keep step-* kept. The references must outlive it.
  Checkpointer(const TrainOptions& options, TrainedModel& model, TrainingProgress& state,
               const BatchIterator& batches, const Tokenizer& tokenizer,
               const std::map<std::string, std::string>& saved_options, Communicator& ranks)
      : options_(options),
        model_(model),
        state_(state),
        batches_(batches),
        tokenizer_(tokenizer),
        saved_options_(saved_options),
        ranks_(ranks) {}
  // Saves the current step as <out>/step-NNNNNN (rank 0) and records it.
  void save();
  // Replaces <out>/best with the current step (rank 0; the host model must be synced).
  void save_best();
  int64_t last_saved_step() const { return last_saved_step_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  // The ranks hold the same parameters by construction (the same sums, the same steps); each
  // save checks it, so that an exchange that went wrong cannot go unnoticed.
  void check_ranks_agree() const;
  // The checkpoint of the current state (host model and optimizer: synced first).
  Checkpoint checkpoint() const;

  const TrainOptions& options_;
  TrainedModel& model_;
  TrainingProgress& state_;
  const BatchIterator& batches_;
  const Tokenizer& tokenizer_;
  const std::map<std::string, std::string>& saved_options_;
  Communicator& ranks_;
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
};

}  // namespace xf::trainer
