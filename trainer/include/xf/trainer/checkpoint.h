#pragma once
// Training checkpoints: one DIRECTORY per checkpoint (`<run>/step-000123/`) holding everything a
// resume needs to continue bit for bit:
//   checkpoint.txt       "xf-checkpoint 1", the step, data position, RNG seed, best scores
//   config.txt           the ModelConfig, key=value
//   options.txt          the training options (xf-train's flags), key=value
//   parameters.bin       f32 parameters, laid out as transformer_parameters(config)
//   adam.bin             Adam step and both moments, same layout
//   sentencepiece.model  the tokenizer
// A checkpoint is written into a hidden temporary directory and renamed into place, so a crash
// never leaves a half-written `step-*` directory.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/shortlist.h"
#include "xf/trainer/data.h"
#include "xf/trainer/optimizer.h"

namespace xf::trainer {

inline constexpr uint32_t kCheckpointVersion = 1;

// Progress and bookkeeping the training loop carries across a resume.
struct TrainingProgress {
  int64_t step = 0;                 // optimizer updates done
  DataPosition data;                // where the batch iterator stands
  uint64_t rng_seed = 0;            // dropout masks of step s come from (rng_seed, s)
  double elapsed_seconds = 0;       // training wall time so far
  int64_t tokens_seen = 0;          // source + target tokens trained on
  double best_valid_loss = 0;       // valid when has_best
  double best_valid_bleu = 0;
  bool has_best = false;
  int64_t validations_without_improvement = 0;
  double last_valid_loss = 0;       // scores of the last validation (0 when none yet)
  double last_valid_bleu = 0;
};

struct Checkpoint {
  ModelConfig config;
  std::map<std::string, std::string> options;  // flag name (without "--") -> value
  std::vector<float> parameters;               // [transformer parameter count]
  AdamState adam;
  TrainingProgress progress;
  std::string tokenizer_model;                 // SentencePiece model proto
};

// "step-000123" (at least six digits, so names sort by step).
std::string checkpoint_name(int64_t step);

// Writes `checkpoint` to `directory` atomically (a temporary sibling directory renamed into
// place; an existing directory of that name is replaced).
void write_checkpoint(const std::string& directory, const Checkpoint& checkpoint);

// Reads and checks a checkpoint directory. Throws a one-line xf::Error naming the directory and
// the problem: "<dir>: not an xf checkpoint (no checkpoint.txt)", a missing or truncated file,
// sizes that disagree with the config.
Checkpoint read_checkpoint(const std::string& directory);

// The step-* checkpoint directories in `run_directory`, oldest first (empty when none).
std::vector<std::string> list_checkpoints(const std::string& run_directory);

// Saves `checkpoint` as <run>/step-NNNNNN, then deletes all but the newest `keep_last` step-*
// directories (keep_last <= 0 keeps all). Returns the new directory.
std::string save_checkpoint(const std::string& run_directory, const Checkpoint& checkpoint,
                            int keep_last);

// Replaces <run>/best with `checkpoint`, atomically.
std::string save_best_checkpoint(const std::string& run_directory, const Checkpoint& checkpoint);

// ---- Conversion to a flat model file (xf-convert) ---------------------------------------------

// The element-wise mean of the checkpoints' parameters (accumulated in double), with the config,
// tokenizer, options and progress of the newest one. `weights`, when given (one positive number a
// checkpoint), make it the weighted mean sum(w_i p_i) / sum(w_i): a weight-space interpolation of
// two models (WiSE-FT). Throws xf::Error naming the checkpoint whose config or tokenizer differs
// from the first one, or saying what is wrong with the weights.
Checkpoint average_checkpoints(const std::vector<Checkpoint>& checkpoints,
                               const std::vector<std::string>& labels, const std::vector<double>& weights = {});

// The metadata xf-convert writes: languages, the training summary (steps, data, scores, wall
// time, options) and `extra` (KEY=VALUE pairs given on the command line, they win).
std::map<std::string, std::string> model_metadata(const Checkpoint& checkpoint,
                                                  const std::vector<std::string>& sources,
                                                  const std::map<std::string, std::string>& extra);

// Writes the checkpoint's parameters through writer_of_parameters() with the tokenizer and the metadata;
// `target_tokenizer`, when not empty, is the target side's own SentencePiece model; `shortlist`,
// when given, is stored in the file (xf-convert --shortlist); `layout_of`, when given, names each
// tensor's layout (ModelWriter::set_layout; xf-convert --layout panels).
void write_model_file(const Checkpoint& checkpoint, DType dtype,
                      const std::map<std::string, std::string>& metadata, const std::string& path,
                      const std::string& target_tokenizer = {}, const LexicalShortlist* shortlist = nullptr,
                      const std::function<WeightLayout(const std::string& name, DType dtype)>& layout_of = {});

// Reads a lexical shortlist in Marian's text form (lex.s2t: "target source probability" lines,
// pruned as `options` say) for the checkpoint's vocabularies: pieces are looked up in its
// tokenizer, the target side's in `target_tokenizer` when not empty (a pruned target
// vocabulary); a piece neither has is the unknown id, as in Marian.
LexicalShortlist read_shortlist_for(const Checkpoint& checkpoint, const std::string& target_tokenizer,
                                    const std::string& path, const TextShortlistOptions& options);

// ---- Target vocabulary pruning (xf-convert --target-vocabulary-from) ---------------------------
//
// A shared vocabulary holds pieces only the source language uses; the output layer still scores
// every one of them at each decoding step. Pruning keeps, on the target side, the pieces the
// training targets use: the output projection shrinks by the share never produced (3,554 of
// 12,000 pieces on the EN-FR data, 30% of the step's largest product), and a translation is
// unchanged whenever the full model's choices were kept pieces, which is all a model trained on
// those targets learned to choose.

// The special ids and every piece the target sides of `pairs` use, ascending.
std::vector<int32_t> target_pieces_used(const std::vector<TextPair>& pairs,
                                        const Tokenizer& tokenizer);

struct PrunedModel {
  Checkpoint checkpoint;         // embeddings unshared: source as before, target = kept rows
  std::string target_tokenizer;  // sentencepiece_model_subset() of the checkpoint's tokenizer
};

// The checkpoint with target vocabulary `kept` (ascending, from target_pieces_used): the target
// embedding (and the output layer, tied or not) holds rows kept[0], kept[1], ... of the original.
PrunedModel prune_target_vocabulary(const Checkpoint& checkpoint,
                                    const std::vector<int32_t>& kept);

// ---- Reshaping a model to continue training it (xf-convert --shared-vocabulary, --keep-...) ----

// A model file as a checkpoint to rewrite: its config, its weights widened to f32
// (parameters_from_model_file) and its tokenizer. A file with its own target vocabulary (pruned)
// needs `target_tokenizer`, which receives that side's SentencePiece model (empty for a shared
// vocabulary); without it such a file throws (see checkpoint_with_shared_vocabulary).
Checkpoint checkpoint_from_model_file(const ModelFile& model, std::string* target_tokenizer = nullptr);

// Checks what xf-run checks when it loads a model file: each SentencePiece model loads and holds
// as many pieces as its vocabulary in the config (`target_tokenizer` empty: the source one is
// shared). No tokenizer at all passes (a model for token ids). Throws a one-line xf::Error
// "<label>: source tokenizer: ...".
void check_tokenizers(const Checkpoint& checkpoint, const std::string& target_tokenizer,
                      const std::string& label);

// The checkpoint of a model file whose target vocabulary prune_target_vocabulary() cut: the
// source table, which pruning kept whole, becomes the shared table again, with the source
// tokenizer, as before pruning, so that xf-train --init-from can continue it. Throws where the
// file is not such a pruning: a target piece the source vocabulary lacks, a target row that is not
// its source row, or an untied output layer or output bias (rows pruning dropped for good).
Checkpoint checkpoint_with_shared_vocabulary(const ModelFile& pruned);

// The checkpoint with only the encoder layers `encoder` and the decoder layers `decoder` (indices
// of the original, ascending; empty keeps that stack whole), renumbered from 0. With a pre-norm
// residual stream a layer can be left out at some cost, which training then recovers (the bundled
// model: docs/TRAINING.md).
Checkpoint keep_layers(const Checkpoint& checkpoint, const std::vector<int>& encoder,
                       const std::vector<int>& decoder);

// ---- A flat model file as a starting point (xf-train --init-from) ------------------------------

// The model file's parameters widened to f32 (int8 rows times their scales, f16/bf16 widened), in
// the order transformer_parameters(model.config()) lists them: the layout of
// Checkpoint::parameters and of the trainer's parameter block.
std::vector<float> parameters_from_model_file(const ModelFile& model);

// xf-train --init-matching-from: each parameter of `config` (transformer_parameters(config)'s
// order, the layout of `parameters`) for which `model` holds a tensor of the same name and shape
// is overwritten with it, widened to f32; the others keep their values (a fresh initialization).
// How a student starts from its teacher: its kept encoder layers, embeddings and the decoder's
// cross-attention and FFN, under a new decoder cell or depth. Returns the names copied; throws
// when the embedding does not match (another width or vocabulary: nothing would be learnt).
std::vector<std::string> copy_matching_parameters(const ModelFile& model,
                                                  const ModelConfig& config, float* parameters);

// Reads a key=value text file ("#" comments and blank lines ignored). Throws naming file:line.
std::map<std::string, std::string> read_key_values(const std::string& path);
// The same over text; errors name `label` and lines counted from first_line_number.
std::map<std::string, std::string> parse_key_values(const std::string& text,
                                                    const std::string& label,
                                                    size_t first_line_number = 1);
std::string format_key_values(const std::map<std::string, std::string>& values);

// ModelConfig <-> key=value (config_to_text's form), exact for every field.
std::map<std::string, std::string> config_to_key_values(const ModelConfig& config);
ModelConfig config_from_key_values(const std::map<std::string, std::string>& values,
                                   const std::string& label);

}  // namespace xf::trainer
