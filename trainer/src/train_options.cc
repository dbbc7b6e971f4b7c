// xf-train's options: one table gives names, help, parsing, checking and the saved form.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "xf/error.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/train_options.h"

namespace xf::trainer {
namespace {

int64_t to_int(const std::string& name, const std::string& value, int64_t low, int64_t high) {
  size_t used = 0;
  long long parsed = 0;
  try {
    parsed = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) {
    throw OptionError("--" + name + ": '" + value + "' is not an integer");
  }
  if (parsed < low || parsed > high) {
    throw OptionError("--" + name + ": " + value + " is out of range " + std::to_string(low) + ".." +
                std::to_string(high));
  }
  return parsed;
}

double to_double(const std::string& name, const std::string& value, double low, double high) {
  size_t used = 0;
  double parsed = 0;
  try {
    parsed = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !std::isfinite(parsed)) {
    throw OptionError("--" + name + ": '" + value + "' is not a number");
  }
  if (parsed < low || parsed > high) {
    throw OptionError("--" + name + ": " + value + " is out of range");
  }
  return parsed;
}

std::string to_choice(const std::string& name, const std::string& value,
                      const std::vector<std::string>& choices) {
  for (const auto& choice : choices) {
    if (value == choice) return value;
  }
  std::string list;
  for (const auto& choice : choices) list += (list.empty() ? "" : "|") + choice;
  throw OptionError("--" + name + ": '" + value + "' is not one of " + list);
}

std::string number_text(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

struct OptionSpec {
  const char* name;
  const char* help;
  std::function<void(TrainOptions&, const std::string& value)> set;
  std::function<std::string(const TrainOptions&)> get;  // null: not saved (--layers, --resume)
};

constexpr int64_t kMaxInt = 1ll << 40;

// The data: the corpus files, their languages and malformed lines.
std::vector<OptionSpec> data_options() {
  using O = TrainOptions;
  return {
      {"train", "FILE      training pairs: TSV (source<TAB>target) or the Hugging Face CSV",
       [](O& o, const std::string& v) { o.train_path = v; }, [](const O& o) { return o.train_path; }},
      {"dev", "FILE        validation pairs (same formats)",
       [](O& o, const std::string& v) { o.dev_path = v; }, [](const O& o) { return o.dev_path; }},
      {"src-lang", "L     source language: en or fr (default en)",
       [](O& o, const std::string& v) { o.source_language = to_choice("src-lang", v, {"en", "fr"}); },
       [](const O& o) { return o.source_language; }},
      {"tgt-lang", "L     target language: en or fr (default fr)",
       [](O& o, const std::string& v) { o.target_language = to_choice("tgt-lang", v, {"en", "fr"}); },
       [](const O& o) { return o.target_language; }},
      {"tsv-columns", "A,B  languages of a TSV's two columns (default en,fr)",
       [](O& o, const std::string& v) {
         size_t comma = v.find(',');
         if (comma == std::string::npos || comma == 0 || comma + 1 == v.size() ||
             v.find(',', comma + 1) != std::string::npos) {
           throw OptionError("--tsv-columns: expected two languages like en,fr, got '" + v + "'");
         }
         o.tsv_columns = v;
       },
       [](const O& o) { return o.tsv_columns; }},
      {"strict-data", "    refuse a corpus at its first malformed pair (default: skip such pairs)",
       [](O& o, const std::string& v) { o.strict_data = v != "0"; },
       [](const O& o) { return std::string(o.strict_data ? "1" : "0"); }},
      {"max-bad-lines", "P  refuse a corpus with more than P percent malformed pairs (default 1)",
       [](O& o, const std::string& v) { o.max_bad_percent = to_double("max-bad-lines", v, 0, 100); },
       [](const O& o) { return number_text(o.max_bad_percent); }},
  };
}

// The vocabulary (or the model file to start from) and the batches.
std::vector<OptionSpec> vocabulary_and_batch_options() {
  using O = TrainOptions;
  return {
      {"spm", "MODEL       reuse this SentencePiece model instead of training one",
       [](O& o, const std::string& v) { o.spm_path = v; }, [](const O& o) { return o.spm_path; }},
      {"init-from", "MODEL.xfm  start from this model file's weights, architecture and\n"
                    "                   SentencePiece model (fine-tuning, or continuing a released model);\n"
                    "                   the optimizer state and the schedule start afresh",
       [](O& o, const std::string& v) { o.init_from_path = v; },
       [](const O& o) { return o.init_from_path; }},
      {"init-matching-from",
       "MODEL.xfm  a new model of the options' shape (--layers, --decoder-cell,\n"
       "                   ...) on this file's SentencePiece model, starting from each of its\n"
       "                   weights with the same name and shape (the rest fresh from --seed):\n"
       "                   a student from its teacher (Marian's --pretrained-model)",
       [](O& o, const std::string& v) { o.init_matching_path = v; },
       [](const O& o) { return o.init_matching_path; }},
      {"vocab-size", "N   shared SentencePiece vocabulary size (default 8000)",
       [](O& o, const std::string& v) { o.vocab_size = to_int("vocab-size", v, 8, 1 << 20); },
       [](const O& o) { return std::to_string(o.vocab_size); }},
      {"spm-type", "T     SentencePiece model type: unigram|bpe|char|word (default unigram)",
       [](O& o, const std::string& v) {
         o.spm_type = to_choice("spm-type", v, {"unigram", "bpe", "char", "word"});
       },
       [](const O& o) { return o.spm_type; }},
      {"max-length", "N   drop pairs with a side longer than N tokens (default 100)",
       [](O& o, const std::string& v) { o.max_length = to_int("max-length", v, 1, 100000); },
       [](const O& o) { return std::to_string(o.max_length); }},
      {"batch-tokens", "N padded tokens per batch: rows * max(src, tgt) <= N (default 4096)",
       [](O& o, const std::string& v) { o.batch_tokens = to_int("batch-tokens", v, 2, kMaxInt); },
       [](const O& o) { return std::to_string(o.batch_tokens); }},
      {"join-probability", "P  longer examples: each example of an epoch is, with chance P, the\n"
                           "                   next 2..--join-max-pairs pairs of a shuffled order joined\n"
                           "                   (sources and targets each concatenated, within --max-length);\n"
                           "                   every pair still once an epoch (default 0: off)",
       [](O& o, const std::string& v) { o.join_probability = to_double("join-probability", v, 0, 1); },
       [](const O& o) { return number_text(o.join_probability); }},
      {"join-max-pairs", "N most pairs in a joined example (2..64, default 4)",
       [](O& o, const std::string& v) { o.join_max_pairs = to_int("join-max-pairs", v, 2, 64); },
       [](const O& o) { return std::to_string(o.join_max_pairs); }},
      {"modify-lowercase", "P  text as people type it: each pair of an epoch has, with chance P,\n"
                           "                   its source lowercased (the target as written)",
       [](O& o, const std::string& v) { o.modifiers.lowercase = to_double("modify-lowercase", v, 0, 1); },
       [](const O& o) { return number_text(o.modifiers.lowercase); }},
      {"modify-uppercase", "P  chance that both sides are upper case (the three case modifiers\n"
                           "                   exclude each other: their chances add up to at most 1)",
       [](O& o, const std::string& v) { o.modifiers.uppercase = to_double("modify-uppercase", v, 0, 1); },
       [](const O& o) { return number_text(o.modifiers.uppercase); }},
      {"modify-titlecase", "P  chance that both sides are title case (Each Word Capitalised)",
       [](O& o, const std::string& v) { o.modifiers.titlecase = to_double("modify-titlecase", v, 0, 1); },
       [](const O& o) { return number_text(o.modifiers.titlecase); }},
      {"modify-no-final-punctuation", "P  chance that the source loses its final . ! ? (the target\n"
                                      "                   keeps it)",
       [](O& o, const std::string& v) {
         o.modifiers.no_final_punctuation = to_double("modify-no-final-punctuation", v, 0, 1);
       },
       [](const O& o) { return number_text(o.modifiers.no_final_punctuation); }},
      {"modify-typo", "P       chance of one typo in the source (letters swapped, one dropped, one\n"
                      "                   repeated, or a neighbouring key); all --modify-* default 0: off",
       [](O& o, const std::string& v) { o.modifiers.typo = to_double("modify-typo", v, 0, 1); },
       [](const O& o) { return number_text(o.modifiers.typo); }},
      {"modify-subword-sampling", "P  chance that the source is segmented by a segmentation sampled\n"
                                  "                   from SentencePiece's 16 best (subword regularization;\n"
                                  "                   unigram models), not the best one",
       [](O& o, const std::string& v) {
         o.modifiers.subword_sampling = to_double("modify-subword-sampling", v, 0, 1);
       },
       [](const O& o) { return number_text(o.modifiers.subword_sampling); }},
      {"subword-alpha", "A      a sampled segmentation's chance goes as P(segmentation)^A\n"
                        "                   (default 0.2; 0: the 16 best equally)",
       [](O& o, const std::string& v) { o.modifiers.subword_alpha = to_double("subword-alpha", v, 0, 100); },
       [](const O& o) { return number_text(o.modifiers.subword_alpha); }},
  };
}

// The architecture.
std::vector<OptionSpec> model_options() {
  using O = TrainOptions;
  return {
      {"layers", "N       encoder and decoder layers (sets both)",
       [](O& o, const std::string& v) {
         o.encoder_layers = o.decoder_layers = static_cast<uint32_t>(to_int("layers", v, 1, 64));
       },
       nullptr},
      {"encoder-layers", "N (default 6)",
       [](O& o, const std::string& v) {
         o.encoder_layers = static_cast<uint32_t>(to_int("encoder-layers", v, 1, 64));
       },
       [](const O& o) { return std::to_string(o.encoder_layers); }},
      {"decoder-layers", "N (default 6)",
       [](O& o, const std::string& v) {
         o.decoder_layers = static_cast<uint32_t>(to_int("decoder-layers", v, 1, 64));
       },
       [](const O& o) { return std::to_string(o.decoder_layers); }},
      {"d-model", "N      model width (default 512)",
       [](O& o, const std::string& v) { o.d_model = static_cast<uint32_t>(to_int("d-model", v, 2, 65536)); },
       [](const O& o) { return std::to_string(o.d_model); }},
      {"heads", "N        attention heads, dividing d-model (default 8)",
       [](O& o, const std::string& v) { o.heads = static_cast<uint32_t>(to_int("heads", v, 1, 1024)); },
       [](const O& o) { return std::to_string(o.heads); }},
      {"d-ff", "N         feed-forward width (default 2048)",
       [](O& o, const std::string& v) { o.d_ff = static_cast<uint32_t>(to_int("d-ff", v, 1, 1 << 20)); },
       [](const O& o) { return std::to_string(o.d_ff); }},
      {"norm", "pre|post  LayerNorm position (default post, as the paper)",
       [](O& o, const std::string& v) {
         o.norm = to_choice("norm", v, {"pre", "post"}) == "pre" ? NormPosition::pre : NormPosition::post;
       },
       [](const O& o) { return std::string(o.norm == NormPosition::pre ? "pre" : "post"); }},
      {"decoder-cell", "self-attention|ssru  the decoder layers' first sub-layer: masked self-\n"
       "                   attention (default, the paper) or Marian's SSRU, a recurrent cell whose\n"
       "                   decoding step costs O(1) in the output length (Bergamot's students)",
       [](O& o, const std::string& v) {
         o.decoder_cell = to_choice("decoder-cell", v, {"self-attention", "ssru"}) == "ssru"
                              ? DecoderLayerKind::ssru
                              : DecoderLayerKind::self_attention;
       },
       [](const O& o) { return std::string(o.decoder_cell == DecoderLayerKind::ssru ? "ssru" : "self-attention"); }},
      {"max-positions", "N longest sequence the model accepts (default 256)",
       [](O& o, const std::string& v) {
         o.max_positions = static_cast<uint32_t>(to_int("max-positions", v, 2, 1 << 20));
       },
       [](const O& o) { return std::to_string(o.max_positions); }},
  };
}

// The optimization, when it stops, and where it runs.
std::vector<OptionSpec> optimization_options() {
  using O = TrainOptions;
  return {
      {"dropout", "P      dropout on sub-layer outputs and embeddings (default 0.1)",
       [](O& o, const std::string& v) { o.dropout = static_cast<float>(to_double("dropout", v, 0, 0.99)); },
       [](const O& o) { return number_text(o.dropout); }},
      {"attention-dropout", "P dropout on attention probabilities (default 0)",
       [](O& o, const std::string& v) {
         o.attention_dropout = static_cast<float>(to_double("attention-dropout", v, 0, 0.99));
       },
       [](const O& o) { return number_text(o.attention_dropout); }},
      {"label-smoothing", "E (default 0.1)",
       [](O& o, const std::string& v) {
         o.label_smoothing = static_cast<float>(to_double("label-smoothing", v, 0, 0.99));
       },
       [](const O& o) { return number_text(o.label_smoothing); }},
      {"warmup", "N       warmup steps of the inverse-square-root schedule (default 4000)",
       [](O& o, const std::string& v) { o.warmup = to_int("warmup", v, 1, kMaxInt); },
       [](const O& o) { return std::to_string(o.warmup); }},
      {"lr-scale", "S     factor on the paper's learning rate (default 1)",
       [](O& o, const std::string& v) { o.lr_scale = to_double("lr-scale", v, 1e-9, 1e6); },
       [](const O& o) { return number_text(o.lr_scale); }},
      {"clip-norm", "G    clip the global gradient norm to G (default 0: off)",
       [](O& o, const std::string& v) { o.clip_norm = to_double("clip-norm", v, 0, 1e12); },
       [](const O& o) { return number_text(o.clip_norm); }},
      {"max-steps", "N    stop after N optimizer steps (0: no limit)",
       [](O& o, const std::string& v) { o.max_steps = to_int("max-steps", v, 0, kMaxInt); },
       [](const O& o) { return std::to_string(o.max_steps); }},
      {"epochs", "N       stop after N epochs (0: no limit)",
       [](O& o, const std::string& v) { o.epochs = to_int("epochs", v, 0, kMaxInt); },
       [](const O& o) { return std::to_string(o.epochs); }},
      {"max-minutes", "M  stop after M minutes of training in this run (0: no limit)",
       [](O& o, const std::string& v) { o.max_minutes = to_double("max-minutes", v, 0, 1e9); },
       [](const O& o) { return number_text(o.max_minutes); }},
      {"seed", "N         seed for initialization, shuffling and dropout (default 1)",
       [](O& o, const std::string& v) { o.seed = static_cast<uint64_t>(to_int("seed", v, 0, kMaxInt)); },
       [](const O& o) { return std::to_string(o.seed); }},
      {"device", "cpu|cuda|cuda-f32 (default cpu; cuda: f16 mixed precision with loss scaling)",
       [](O& o, const std::string& v) {
         o.device = to_choice("device", v, {"cpu", "cuda", "cuda-f32"});
       },
       [](const O& o) { return o.device; }},
      {"bf16", "          CPU: the linear layers' matrix products with bf16 inputs and f32 sums\n"
               "                   (weights, gradients, Adam and the rest stay f32); needs\n"
               "                   AVX512-BF16 or AMX; a resumed run keeps it",
       [](O& o, const std::string& v) { o.bf16 = v != "0"; },
       [](const O& o) { return std::string(o.bf16 ? "1" : "0"); }},
      {"threads", "N      CPU threads (default 2)",
       [](O& o, const std::string& v) { o.threads = static_cast<int>(to_int("threads", v, 1, 1024)); },
       [](const O& o) { return std::to_string(o.threads); }},
      {"comm-timeout", "S seconds a rank of a data-parallel run waits for the others before it\n"
                       "                      gives up with an error (default 600; 0: no limit)",
       [](O& o, const std::string& v) { o.comm_timeout = to_double("comm-timeout", v, 0, 1e9); },
       [](const O& o) { return number_text(o.comm_timeout); }},
  };
}

// The run directory, the side work and its schedule.
std::vector<OptionSpec> output_options() {
  using O = TrainOptions;
  return {
      {"out", "DIR         run directory: checkpoints, log, plot (required)",
       [](O& o, const std::string& v) { o.out_dir = v; }, [](const O& o) { return o.out_dir; }},
      {"valid-every", "K  validate every K steps (0: only at the end)",
       [](O& o, const std::string& v) { o.valid_every = to_int("valid-every", v, 0, kMaxInt); },
       [](const O& o) { return std::to_string(o.valid_every); }},
      {"save-every", "K   save a checkpoint every K steps (0: only at the end)",
       [](O& o, const std::string& v) { o.save_every = to_int("save-every", v, 0, kMaxInt); },
       [](const O& o) { return std::to_string(o.save_every); }},
      {"keep", "M         keep the newest M step checkpoints (0: all; default 5)",
       [](O& o, const std::string& v) { o.keep = static_cast<int>(to_int("keep", v, 0, 1 << 20)); },
       [](const O& o) { return std::to_string(o.keep); }},
      {"early-stop", "N   stop after N validations without improvement (0: off)",
       [](O& o, const std::string& v) { o.early_stop = static_cast<int>(to_int("early-stop", v, 0, 1 << 20)); },
       [](const O& o) { return std::to_string(o.early_stop); }},
      {"best-by", "loss|bleu  metric for best/ and early stopping (default loss)",
       [](O& o, const std::string& v) { o.best_by = to_choice("best-by", v, {"loss", "bleu"}); },
       [](const O& o) { return o.best_by; }},
      {"valid-bleu-sentences", "N  dev sentences decoded for BLEU (default 200; 0: no BLEU)",
       [](O& o, const std::string& v) {
         o.valid_bleu_sentences = to_int("valid-bleu-sentences", v, 0, kMaxInt);
       },
       [](const O& o) { return std::to_string(o.valid_bleu_sentences); }},
      {"log-every", "N    progress line every N steps (default 10)",
       [](O& o, const std::string& v) { o.log_every = to_int("log-every", v, 1, kMaxInt); },
       [](const O& o) { return std::to_string(o.log_every); }},
      {"resume", "         continue from the newest checkpoint in --out; the architecture and\n"
                 "                   vocabulary options are the checkpoint's (giving another value is\n"
                 "                   an error), the others may change (e.g. --max-steps)",
       [](O& o, const std::string& v) { o.resume = v != "0"; }, nullptr},
      {"overwrite", "      start a new run in an --out that holds an earlier run: its checkpoints,\n"
                    "                   metrics and vocabulary are deleted first (without it, refused)",
       [](O& o, const std::string& v) { o.overwrite = v != "0"; }, nullptr},
  };
}

// Every option, in the order of the help text.
const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = [] {
    std::vector<OptionSpec> all;
    for (std::vector<OptionSpec> group : {data_options(), vocabulary_and_batch_options(),
                                          model_options(), optimization_options(),
                                          output_options()}) {
      all.insert(all.end(), group.begin(), group.end());
    }
    return all;
  }();
  return table;
}

const OptionSpec* find_option(const std::string& name) {
  for (const auto& spec : option_table()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

// What a run fixes when it starts: the architecture, the vocabulary and what it translates.
// A resumed run keeps them; giving another value is refused rather than ignored.
const std::vector<std::string> kFixedAtStart = {
    "layers", "encoder-layers", "decoder-layers", "d-model", "heads", "d-ff", "norm", "decoder-cell",
    "max-positions", "vocab-size", "spm-type", "spm", "init-from", "init-matching-from", "src-lang",
    "tgt-lang"};

// Throws OptionError naming the first option of `given` that changes a fixed one of `saved`.
void check_fixed_at_start(const std::map<std::string, std::string>& saved,
                          const std::map<std::string, std::string>& given) {
  const TrainOptions before = train_options_from_map(saved);
  for (const auto& [name, value] : given) {
    if (std::find(kFixedAtStart.begin(), kFixedAtStart.end(), name) == kFixedAtStart.end()) continue;
    TrainOptions after = before;
    find_option(name)->set(after, value);
    for (const std::string& fixed : kFixedAtStart) {
      const OptionSpec* spec = find_option(fixed);
      if (spec->get == nullptr || spec->get(after) == spec->get(before)) continue;
      throw OptionError("--resume: --" + name + " " + value + " differs from the run's --" + fixed +
                        " " + spec->get(before) +
                        " (a run keeps the architecture and vocabulary it started with; start "
                        "a new run in another --out)");
    }
  }
}

bool is_flag(const std::string& name) {
  return name == "resume" || name == "overwrite" || name == "help" || name == "strict-data" ||
         name == "bf16";
}

}  // namespace

std::string train_options_help() {
  std::string text;
  for (const auto& spec : option_table()) {
    text += "  --" + std::string(spec.name) + " " + spec.help + "\n";
  }
  return text;
}

std::map<std::string, std::string> parse_train_arguments(const std::vector<std::string>& args) {
  std::map<std::string, std::string> values;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      throw OptionError("unexpected argument '" + arg + "' (options start with --; try --help)");
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (!is_flag(name) && !find_option(name)) throw OptionError("unknown option '--" + name + "' (try --help)");
    if (is_flag(name)) {
      if (inline_value) throw OptionError("--" + name + " takes no value");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw OptionError("--" + name + " needs a value");
      value = args[++i];
    }
    values[name] = value;
  }
  return values;
}

TrainOptions train_options_from_map(const std::map<std::string, std::string>& values) {
  TrainOptions options;
  // --layers first so that --encoder-layers/--decoder-layers override it.
  auto layers = values.find("layers");
  if (layers != values.end()) find_option("layers")->set(options, layers->second);
  for (const auto& [name, value] : values) {
    if (name == "layers" || name == "help") continue;
    const OptionSpec* spec = find_option(name);
    if (!spec) throw OptionError("unknown option --" + name);
    spec->set(options, value);
  }
  if (options.train_path.empty()) throw OptionError("--train FILE is required");
  if (options.out_dir.empty()) throw OptionError("--out DIR is required");
  if (options.bf16 && options.device != "cpu") {
    throw OptionError("--bf16 is for --device cpu (--device cuda computes in f16 already)");
  }
  const ModifierOptions& m = options.modifiers;
  if (m.lowercase + m.uppercase + m.titlecase > 1) {
    throw OptionError("--modify-lowercase, --modify-uppercase and --modify-titlecase add up to more "
                      "than 1 (one draw picks at most one of them)");
  }
  if (options.source_language == options.target_language) {
    throw OptionError("--src-lang and --tgt-lang are both '" + options.source_language + "'");
  }
  if (options.d_model % options.heads != 0) {
    throw OptionError("--heads " + std::to_string(options.heads) + " does not divide --d-model " +
                std::to_string(options.d_model));
  }
  if (options.max_length + 1 > options.batch_tokens) {
    throw OptionError("--batch-tokens " + std::to_string(options.batch_tokens) +
                " cannot hold one pair of --max-length " + std::to_string(options.max_length));
  }
  if (options.max_length + 1 > static_cast<int64_t>(options.max_positions)) {
    throw OptionError("--max-length " + std::to_string(options.max_length) +
                " needs --max-positions of at least " + std::to_string(options.max_length + 1));
  }
  return options;
}

std::map<std::string, std::string> train_options_to_map(const TrainOptions& options) {
  std::map<std::string, std::string> values;
  for (const auto& spec : option_table()) {
    if (spec.get) values[spec.name] = spec.get(options);
  }
  return values;
}

TrainOptions resolve_train_options(const std::map<std::string, std::string>& given) {
  if (given.count("resume") == 0) return train_options_from_map(given);
  auto out = given.find("out");
  if (out == given.end()) throw OptionError("--resume needs --out DIR");
  if (given.count("overwrite")) throw OptionError("--resume and --overwrite exclude each other");
  auto checkpoints = list_checkpoints(out->second);
  if (checkpoints.empty()) throw Error("--resume: no step-* checkpoint in " + out->second);
  const std::map<std::string, std::string> saved =
      read_key_values(checkpoints.back() + "/options.txt");
  check_fixed_at_start(saved, given);
  std::map<std::string, std::string> merged = saved;
  for (const auto& [name, value] : given) {
    if (name == "layers") {
      merged.erase("encoder-layers");
      merged.erase("decoder-layers");
    }
    merged[name] = value;
  }
  return train_options_from_map(merged);
}

}  // namespace xf::trainer
