#pragma once
// The training loop's step: one global batch, cut as in one process; this rank's share of its
// rows forward and backward on the device; gradients and loss sums added over the ranks; one
// Adam update; the run's progress advanced.
#include <atomic>
#include <cstdint>

#include "xf/format/config.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/train_log.h"
#include "xf/trainer/train_schedule.h"

namespace xf::trainer {

// Dropout masks of step s depend on (seed, s) only, so a resumed run draws the same masks.
uint64_t dropout_seed_for_step(uint64_t rng_seed, int64_t step);

struct StepResult {
  StepLosses losses;            // the whole batch's, over every rank
  int stop_votes = 0;           // ranks asked to stop (data parallel: every rank sees the sum)
  double root_run_seconds = 0;  // rank 0's wall time (data parallel: decides --max-minutes)
};

// What a step reads, and the model, batches and progress it advances.
struct StepInputs {
  DeviceModel& model;                    // where the step runs
  BatchIterator& batches;                // the next global batch
  TrainingProgress& state;               // step, data position, seeds, tokens, time
  const ModelConfig& config;             // the batches' special tokens
  const LearningRateSchedule& schedule;  // the update's learning rate
  Communicator& ranks;
  double clip_norm = 0;                  // --clip-norm
  double elapsed_before = 0;             // training time of the runs before this one (resumed)
};

// Trains one step. stop_requested: this rank's stop flag, counted in stop_votes.
// Throws xf::Error when the loss is no longer finite.
StepResult train_step(const StepInputs& run, const RunClock& clock,
                      const std::atomic<bool>* stop_requested);

}  // namespace xf::trainer
