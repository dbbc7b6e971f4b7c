#pragma once
// The training loop's setup: from the options to everything a run trains with (TrainingRun):
// the run directory and its lock, the resume point or a model file to start from, the
// vocabulary, the training and dev data, the model, the optimizer and the progress, handed from
// rank 0 to the other ranks, and the model on its device.
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "xf/format/config.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/run_directory.h"
#include "xf/trainer/train_options.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {

struct ValidationSet;  // xf/trainer/validation.h

// Everything a run trains with. Built by the constructor (throws a one-line xf::Error on a bad
// input, before any long work where it can); the loop's parts share it.
class TrainingRun {
 public:
  // `log`: rank 0's progress lines (setup says what it loaded and built). `devices`, `gpu`: as
  // run_training's.
  TrainingRun(const TrainOptions& options, std::ostream& log, const DeviceTraining* devices,
              Communicator& ranks, int gpu);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  const TrainOptions& options;
  Communicator& ranks;
  const bool root;  // rank 0: writes the run directory and the progress lines
  std::optional<RunDirectory> run_directory;  // rank 0's, locked while the run lasts
  std::unique_ptr<Tokenizer> tokenizer;
  TokenizedCorpus corpus;              // the training pairs (batches reads them)
  std::unique_ptr<ValidationSet> dev;  // null without --dev
  ModelConfig config;
  std::unique_ptr<TransformerModel> model;  // the host model: validation and checkpoints
  std::unique_ptr<Adam> adam;
  TrainingProgress state;       // step, data position, seeds, best scores: what a resume needs
  double elapsed_before = 0;    // training time of the runs before this one (resumed)
  LearningRateSchedule schedule;
  std::unique_ptr<BatchIterator> batches;
  // The options saved with each checkpoint: the shape options say the architecture trained,
  // also when --init-from or --resume chose it over the flags.
  std::map<std::string, std::string> saved_options;
  // Where steps run: on the CPU the host model and optimizer themselves; with --device cuda
  // (f16 mixed precision) or cuda-f32 the GPU, whose parameters and moments sync_host() copies
  // back to the host model and optimizer.
  std::unique_ptr<DeviceModel> device_model;

  void sync_host();
  // The checkpoint of the current state (host model and optimizer: sync_host() first).
  Checkpoint checkpoint() const;
  // The epoch as a fraction, at the batch iterator's position.
  double epoch() const;
};

}  // namespace xf::trainer
