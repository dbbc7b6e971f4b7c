#pragma once
// xf-train's engine: the training loop (progress line, CSV log, validation with loss and greedy
// BLEU, keep-best, early stopping, checkpoints, exact resume, clean stop on request) over its
// parts: setup (train_setup.h), the step (train_step.h), validation (validation.h), checkpoints
// (checkpointer.h), logs (train_log.h) and the schedule and stop rule (train_schedule.h).
// tools/xf-train is a thin main() over this.
#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "xf/trainer/train_options.h"

namespace xf::trainer {

class DeviceTraining;  // xf/trainer/device_training.h
class Communicator;    // xf/trainer/communicator.h

struct TrainSummary {
  int64_t first_step = 0;             // step the run started from (0, or the resumed step)
  int64_t final_step = 0;
  std::vector<double> step_losses;    // label-smoothed loss per token of each step run here
  bool interrupted = false;           // stopped by the stop flag (a checkpoint was saved)
  bool early_stopped = false;
  std::string last_checkpoint;
  double last_valid_loss = 0;         // 0 when no validation ran
  double last_valid_bleu = 0;
  double best_valid_loss = 0;
  double best_valid_bleu = 0;
  double seconds = 0;                 // wall time of this run
};

// Runs training. Progress lines go to `progress`; the logs (metrics.csv, TensorBoard events),
// checkpoints (step-*/ and best/) and the SentencePiece model go to options.out_dir.
// When *stop_requested becomes true, the current step finishes, a checkpoint is saved and the
// function returns with interrupted = true. `devices`: what trains a --device other than cpu
// (xf-train passes module_device_training(), which loads libxf_cuda_trainer.so); without it such
// a device is a one-line error.
//
// Data parallel: with a communicator of N ranks (every rank calls run_training with the same
// options), each global batch is cut as in one process and split by rows into N shares; each
// rank trains on its share, the gradient and loss sums are added over the ranks, and every rank
// takes the same Adam step. Validation is split over the ranks too; rank 0 alone writes the run
// directory and the progress lines. `gpu`: the GPU a --device cuda rank takes.
TrainSummary run_training(const TrainOptions& options, std::ostream& progress,
                          const std::atomic<bool>* stop_requested = nullptr,
                          const DeviceTraining* devices = nullptr, Communicator* comm = nullptr,
                          int gpu = 0);

}  // namespace xf::trainer
