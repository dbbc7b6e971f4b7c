#pragma once
// The training loop's setup: from the options to everything a run trains with (TrainingRun), in
// named steps, each returning what the next needs: the devices and inputs checked, the run
// directory and its lock, the resume point or a model file to start from, the vocabulary and
// the training and dev data, the model, the optimizer and the progress (handed from rank 0 to
// the other ranks), and the model on its device.
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "xf/format/model_file.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/run_directory.h"
#include "xf/trainer/train_options.h"
#include "xf/trainer/trained_model.h"
#include "xf/trainer/validation.h"

namespace xf::trainer {

// The steps, in the order TrainingRun takes them. Each throws a one-line xf::Error on a bad
// input, before any long work where it can. `root`: rank 0, which reads the inputs that every
// rank starts from, writes the run directory and prints the progress lines (`log`).

// --device (built, present, a communicator that sums its memory) and --bf16 (the CPU's
// products) can train here.
void check_devices(const TrainOptions& options, const DeviceTraining* devices,
                   const Communicator& ranks, int gpu);

// The input files can be opened: every rank reads the training and dev files, rank 0 alone the
// SentencePiece model.
void check_inputs(const TrainOptions& options, bool root);

// Rank 0's run directory, locked while the run lasts (no mixing with an earlier run); the other
// ranks only create it, for the corpus cache, and hold none (null).
std::unique_ptr<RunDirectory> open_run_directory(const TrainOptions& options, bool root,
                                                 std::ostream& log);

// Where rank 0 starts from: the newest checkpoint with --resume, else --init-from's model file
// (architecture, vocabulary and weights) or --init-matching-from's (vocabulary, and the weights
// that fit the options' architecture), else neither. Empty on the other ranks.
struct ResumePoint {
  std::unique_ptr<Checkpoint> checkpoint;
  std::shared_ptr<const ModelFile> init_model;
  bool matching_only = false;  // init_model is --init-matching-from's
};
ResumePoint read_resume_point(const TrainOptions& options, bool root, std::ostream& log);

// The vocabulary, the training pairs and the dev set.
struct TrainingData {
  std::unique_ptr<Tokenizer> tokenizer;
  TokenizedCorpus corpus;              // the training pairs (the batch iterator reads them)
  std::unique_ptr<ValidationSet> dev;  // null without --dev
};
// Rank 0 takes the vocabulary from the start point, --spm or SentencePiece trained on the
// corpus, writes it to the run directory with the corpus cache, and hands it to the others,
// which then read the cache.
TrainingData make_tokenizer_and_data(const TrainOptions& options, const ResumePoint& start,
                                     Communicator& ranks, std::ostream& log);

// The host model and Adam with the progress they start from: rank 0's (the checkpoint's, the
// model file's weights, or a fresh model from --seed), the same on every rank. The device model
// is not made yet.
struct ModelAndOptimizer {
  TrainedModel model;
  TrainingProgress state;
};
ModelAndOptimizer make_model_and_optimizer(const TrainOptions& options, ResumePoint start,
                                           const Tokenizer& tokenizer, Communicator& ranks,
                                           std::ostream& log);

// The model where the steps run: the host model itself on the CPU; with --device cuda or
// cuda-f32 a copy of the host model and Adam on the GPU. Sets model.steps_on_host.
std::unique_ptr<DeviceModel> make_device_model(const TrainOptions& options,
                                               const DeviceTraining* devices, int gpu,
                                               TrainedModel& model, std::ostream& log);

// The options saved with each checkpoint (and so a model file's training.options): the shape
// options say the architecture trained, also when --init-from or --resume chose it over the
// flags.
std::map<std::string, std::string> options_to_save(const TrainOptions& options,
                                                   const ModelConfig& config);

// Everything a run trains with, built by the steps above; the loop hands each of its parts the
// fields it reads.
class TrainingRun {
 public:
  // `devices`, `gpu`: as run_training's.
  TrainingRun(const TrainOptions& options, std::ostream& log, const DeviceTraining* devices,
              Communicator& ranks, int gpu);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  const TrainOptions& options;
  Communicator& ranks;
  const bool root;  // rank 0: writes the run directory and the progress lines
  std::unique_ptr<RunDirectory> run_directory;  // rank 0's, locked while the run lasts
  TrainingData data;
  TrainedModel model;
  TrainingProgress state;     // step, data position, seeds, best scores: what a resume needs
  double elapsed_before = 0;  // training time of the runs before this one (resumed)
  LearningRateSchedule schedule;
  std::unique_ptr<BatchIterator> batches;
  std::map<std::string, std::string> saved_options;  // options_to_save

  // The epoch as a fraction, at the batch iterator's position.
  double epoch() const;
};

}  // namespace xf::trainer
