#pragma once
// The training loop's checkpoints: step-* (every --save-every steps, at the end and on a stop
// request, --keep of them kept) and best/ (on each validation that improves), written by rank 0
// from the host model. Each save first checks that every rank holds rank 0's parameters.
#include <cstdint>
#include <string>

#include "xf/trainer/train_setup.h"

namespace xf::trainer {

class Checkpointer {
 public:
  explicit Checkpointer(TrainingRun& run) : run_(run) {}
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
  TrainingRun& run_;
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
};

}  // namespace xf::trainer
