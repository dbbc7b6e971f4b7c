#pragma once
// When the training loop's side work comes and when the loop ends: the schedule of progress
// lines, validations and checkpoints, the stop rule (--max-steps, --epochs, --max-minutes,
// --early-stop), and the run's wall clock. Functions of the step, the data position and the
// options only, so each is tested alone (tests/trainer/train_loop_parts_test.cc).
#include <chrono>
#include <cstdint>

#include "xf/trainer/data.h"
#include "xf/trainer/train_options.h"

namespace xf::trainer {

// This run's wall clock, started when the loop starts.
struct RunClock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

// Progress lines, validations and checkpoints by step.
class TrainSchedule {
 public:
  explicit TrainSchedule(const TrainOptions& options)
      : log_every_(options.log_every),
        valid_every_(options.valid_every),
        save_every_(options.save_every) {}
  // A progress line after the first step and every --log-every steps (a CSV row every step).
  bool log_due(int64_t step) const { return step % log_every_ == 0 || step == 1; }
  // Every --valid-every / --save-every steps; 0: only at the end.
  bool validation_due(int64_t step) const { return valid_every_ > 0 && step % valid_every_ == 0; }
  bool save_due(int64_t step) const { return save_every_ > 0 && step % save_every_ == 0; }
  // At the end: the last step is validated unless the run was interrupted, it was validated
  // already, or this run trained no step; it is saved unless it was already.
  static bool final_validation_due(bool interrupted, int64_t step, int64_t first_step,
                                   int64_t last_validated_step) {
    return !interrupted && last_validated_step != step && step > first_step;
  }
  static bool final_save_due(int64_t step, int64_t last_saved_step) {
    return last_saved_step != step;
  }

 private:
  int64_t log_every_, valid_every_, save_every_;
};

// When the run has trained enough.
class StopRule {
 public:
  StopRule(const TrainOptions& options, int64_t batches_per_epoch)
      : max_steps_(options.max_steps),
        epochs_(options.epochs),
        max_minutes_(options.max_minutes),
        early_stop_(options.early_stop),
        batches_per_epoch_(batches_per_epoch) {}
  // Epochs done at `position` (an epoch whose last batch was taken counts).
  int64_t completed_epochs(const DataPosition& position) const {
    return static_cast<int64_t>(position.epoch) +
           (static_cast<int64_t>(position.batch_index) >= batches_per_epoch_ ? 1 : 0);
  }
  // --max-steps, --epochs or --max-minutes reached; run_minutes: this run's wall time.
  bool finished(int64_t step, const DataPosition& position, double run_minutes) const {
    if (max_steps_ > 0 && step >= max_steps_) return true;
    if (epochs_ > 0 && completed_epochs(position) >= epochs_) return true;
    return max_minutes_ > 0 && run_minutes >= max_minutes_;
  }
  // --early-stop N: N validations in a row without improvement.
  bool early_stop(int64_t validations_without_improvement) const {
    return early_stop_ > 0 && validations_without_improvement >= early_stop_;
  }
  // The step the run is to end at, for the ETA (0 when only --max-minutes or nothing bounds it).
  int64_t target_steps() const {
    return max_steps_ > 0 ? max_steps_ : (epochs_ > 0 ? epochs_ * batches_per_epoch_ : 0);
  }

 private:
  int64_t max_steps_, epochs_;
  double max_minutes_;
  int64_t early_stop_, batches_per_epoch_;
};

}  // namespace xf::trainer
