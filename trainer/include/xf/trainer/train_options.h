#pragma once
// xf-train's options: the TrainOptions struct (one field a flag), the command line read into it
// and checked, the saved form a checkpoint keeps, and the resume rule. Apart from the loop
// (train_loop.h) that takes them, so that what reads options needs nothing of the loop.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/format/config.h"
#include "xf/trainer/text_modifiers.h"

namespace xf::trainer {

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
  std::string init_matching_path;       // --init-matching-from: its weights that fit the flags' shape
  int vocab_size = 8000;                // --vocab-size (shared vocabulary)
  std::string spm_type = "unigram";     // --spm-type unigram|bpe|char|word
  int64_t max_length = 100;             // --max-length: tokens per side, longer pairs dropped
  int64_t batch_tokens = 4096;          // --batch-tokens: rows * max(src, tgt) padded length
  double join_probability = 0;          // --join-probability: share of examples joined from pairs
  int64_t join_max_pairs = 4;           // --join-max-pairs: a join takes 2..N pairs
  ModifierOptions modifiers;            // --modify-*: case, final punctuation, typos
  // Model
  uint32_t encoder_layers = 6;          // --encoder-layers (or --layers for both)
  uint32_t decoder_layers = 6;          // --decoder-layers
  uint32_t d_model = 512;               // --d-model
  uint32_t heads = 8;                   // --heads
  uint32_t d_ff = 2048;                 // --d-ff
  NormPosition norm = NormPosition::post;  // --norm pre|post
  DecoderLayerKind decoder_cell = DecoderLayerKind::self_attention;  // --decoder-cell self-attention|ssru
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

}  // namespace xf::trainer
