#pragma once
// xf-train's engine: options, the training loop (progress line, CSV log, validation with loss
// and greedy BLEU, keep-best, early stopping, checkpoints, exact resume, clean stop on request)
// and the PNG plot of the metrics. tools/xf-train is a thin main() over this.
#include <atomic>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/format/config.h"

namespace xf::trainer {

class DeviceTraining;  // xf/trainer/device_training.h
class Communicator;    // xf/trainer/communicator.h

struct TrainOptions {
  // Data
  std::string train_path;               // --train (TSV or CSV), required
  std::string dev_path;                 // --dev (optional)
  std::string source_language = "en";   // --src-lang
  std::string target_language = "fr";   // --tgt-lang
  std::string tsv_columns = "en,fr";    // --tsv-columns: languages of a TSV's two columns
  bool strict_data = false;             // --strict-data: a malformed pair refuses the corpus
  double max_bad_percent = 1.0;         // --max-bad-lines: more malformed pairs refuse it
  std::string spm_path;                 // --spm: reuse this SentencePiece model
  std::string init_from_path;           // --init-from: start from a model file's weights
  int vocab_size = 8000;                // --vocab-size (shared vocabulary)
  std::string spm_type = "unigram";     // --spm-type unigram|bpe|char|word
  int64_t max_length = 100;             // --max-length: tokens per side, longer pairs dropped
  int64_t batch_tokens = 4096;          // --batch-tokens: rows * max(src, tgt) padded length
  double join_probability = 0;          // --join-probability: share of examples joined from pairs
  int64_t join_max_pairs = 4;           // --join-max-pairs: a join takes 2..N pairs
  // Model
  uint32_t encoder_layers = 6;          // --encoder-layers (or --layers for both)
  uint32_t decoder_layers = 6;          // --decoder-layers
  uint32_t d_model = 512;               // --d-model
  uint32_t heads = 8;                   // --heads
  uint32_t d_ff = 2048;                 // --d-ff
  NormPosition norm = NormPosition::post;  // --norm pre|post
  uint32_t max_positions = 256;         // --max-positions
  // Optimization
  float dropout = 0.1f;                 // --dropout
  float attention_dropout = 0.0f;       // --attention-dropout
  float label_smoothing = 0.1f;         // --label-smoothing
  int64_t warmup = 4000;                // --warmup
  double lr_scale = 1.0;                // --lr-scale
  double clip_norm = 0.0;               // --clip-norm (0: off)
  int64_t max_steps = 0;                // --max-steps (0: no limit)
  int64_t epochs = 0;                   // --epochs (0: no limit)
  double max_minutes = 0;               // --max-minutes: wall-time budget (0: no limit)
  uint64_t seed = 1;                    // --seed: initialization, shuffling, dropout
  std::string device = "cpu";           // --device cpu|cuda|cuda-f32
  bool bf16 = false;                    // --bf16: CPU matrix products with bf16 inputs
  int threads = 2;                      // --threads (per rank)
  double comm_timeout = 600;            // --comm-timeout: seconds a rank waits for the others
  // Output and schedule of side work
  std::string out_dir;                  // --out, required
  int64_t valid_every = 1000;           // --valid-every (0: only at the end)
  int64_t save_every = 1000;            // --save-every (0: only at the end)
  int keep = 5;                         // --keep: step-* checkpoints kept
  int early_stop = 0;                   // --early-stop N validations without improvement (0: off)
  std::string best_by = "loss";         // --best-by loss|bleu: what keep-best and early stop use
  int64_t valid_bleu_sentences = 200;   // --valid-bleu-sentences (0: no BLEU)
  int64_t log_every = 10;               // --log-every: progress line period
  bool resume = false;                  // --resume: continue from the newest checkpoint in --out
  bool overwrite = false;               // --overwrite: a new run replaces an earlier one in --out
};

// A bad command line (unknown option, bad value, options that conflict): xf-train exits 2 on
// it, 1 on any other xf::Error.
class OptionError : public Error {
 public:
  using Error::Error;
};

// The option names xf-train accepts (without "--"), each with its help line.
std::string train_options_help();

// Parses "--name value", "--name=value" and the flags --resume/--help into name -> value.
// Throws xf::Error("unknown option --x") or ("--x needs a value").
std::map<std::string, std::string> parse_train_arguments(const std::vector<std::string>& args);

// Options from name -> value; every value checked. Throws one-line xf::Error naming the option.
TrainOptions train_options_from_map(const std::map<std::string, std::string>& values);
std::map<std::string, std::string> train_options_to_map(const TrainOptions& options);

// The options a run uses: with --resume, those saved in the newest checkpoint of --out,
// overridden by the ones given now, except the architecture and the vocabulary (--layers,
// --d-model, --vocab-size, ...: OptionError naming the first that differs from the
// checkpoint's); otherwise the given ones on the defaults.
TrainOptions resolve_train_options(const std::map<std::string, std::string>& given);

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

// Runs training. Progress lines go to `progress`; the CSV log (metrics.csv), checkpoints
// (step-*/ and best/), the SentencePiece model and the plot (metrics.png) go to options.out_dir.
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

// ---- Plot ------------------------------------------------------------------------------------

struct PlotSeries {
  std::vector<double> x, y;
  uint8_t red = 0, green = 0, blue = 0;
  bool points = false;  // draw markers instead of a line
};

// Encodes an RGB image ([height, width, 3] bytes) as a PNG with stored (uncompressed) deflate
// blocks: self-contained, no zlib needed.
std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb);

// Draws the series on shared axes (white background, grey frame and grid) and returns the PNG.
std::string render_line_plot_png(const std::vector<PlotSeries>& series, int width, int height);

}  // namespace xf::trainer
