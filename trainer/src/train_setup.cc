// The training loop's setup (train_setup.h): options -> run directory, data, model, optimizer,
// one named step after the other.
#include "xf/trainer/train_setup.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"
#include "xf/kernels/matmul.h"
#include "xf/trainer/text_modifiers.h"
#include "xf/trainer/train_log.h"

namespace xf::trainer {
namespace fs = std::filesystem;

namespace {

CorpusLanguages corpus_languages(const TrainOptions& options) {
  CorpusLanguages languages;
  languages.source = options.source_language;
  languages.target = options.target_language;
  size_t comma = options.tsv_columns.find(',');
  languages.tsv_first = options.tsv_columns.substr(0, comma);
  languages.tsv_second = options.tsv_columns.substr(comma + 1);
  languages.strict = options.strict_data;
  languages.max_bad_share = options.max_bad_percent / 100.0;
  return languages;
}

// Each architecture option of xf-train with the ModelConfig field it sets, one list for both
// directions: f(option, field) on every pair (a new model's config from the flags; the flags
// saved with a checkpoint from the config actually trained).
template <typename Options, typename Config, typename F>
void for_each_shape_option(Options& o, Config& c, F&& f) {
  f(o.d_model, c.d_model);
  f(o.heads, c.num_heads);
  f(o.d_ff, c.d_ff);
  f(o.encoder_layers, c.encoder_layers);
  f(o.decoder_layers, c.decoder_layers);
  f(o.max_positions, c.max_positions);
  f(o.norm, c.norm_position);
  f(o.decoder_cell, c.decoder_layer_kind);
}

TrainingOptions training_options(const TrainOptions& options) {
  TrainingOptions training;
  training.dropout = options.dropout;
  training.attention_dropout = options.attention_dropout;
  training.label_smoothing = options.label_smoothing;
  return training;
}

// Rank 0's vocabulary: the start point's, --spm's, or SentencePiece trained on the corpus.
std::unique_ptr<Tokenizer> make_tokenizer(const TrainOptions& options, const ResumePoint& start,
                                          const CorpusLanguages& languages, std::ostream& log) {
  if (start.init_model) {
    return std::make_unique<Tokenizer>(Tokenizer::from_model_proto(
        std::string(start.init_model->source_tokenizer()), start.init_model->path()));
  }
  if (start.checkpoint) {
    return std::make_unique<Tokenizer>(Tokenizer::from_model_proto(
        start.checkpoint->tokenizer_model, options.out_dir + " checkpoint"));
  }
  if (!options.spm_path.empty()) {
    return std::make_unique<Tokenizer>(Tokenizer::from_file(options.spm_path));
  }
  log << "training SentencePiece (" << options.spm_type << ", vocabulary " << options.vocab_size
      << ") on " << options.train_path << "\n";
  SentencePieceTrainOptions spm;
  spm.vocab_size = options.vocab_size;
  spm.model_type = options.spm_type;
  spm.threads = options.threads;
  return std::make_unique<Tokenizer>(
      Tokenizer::train(read_parallel_corpus(options.train_path, languages), spm));
}

// Rank 0's model config: the start point's, or a new model's from the flags.
ModelConfig starting_config(const TrainOptions& options, const ResumePoint& start,
                            const Tokenizer& tokenizer) {
  if (start.checkpoint) return start.checkpoint->config;
  if (start.init_model && !start.matching_only) return start.init_model->config();
  ModelConfig config;
  config.source_vocab_size = config.target_vocab_size =
      static_cast<uint32_t>(tokenizer.vocab_size());
  for_each_shape_option(options, config, [](const auto& option, auto& field) { field = option; });
  config.pad_id = kPadId;
  config.unk_id = kUnkId;
  config.bos_id = kBosId;
  config.eos_id = kEosId;
  validate_config(config);
  return config;
}

// Rank 0's parameters, moments and progress from the start point (then freed: the checkpoint's
// copy of the parameters, the mapped model file), or a fresh model from --seed.
void load_starting_state(const TrainOptions& options, ResumePoint start, TrainedModel& model,
                         TrainingProgress& state, std::ostream& log) {
  if (start.checkpoint) {
    const Checkpoint& resumed = *start.checkpoint;
    if (resumed.parameters.size() != model.host->parameter_count()) {
      throw Error("checkpoint parameter count does not match the model");
    }
    std::copy(resumed.parameters.begin(), resumed.parameters.end(), model.host->parameters());
    model.adam->set_state(resumed.adam);
    state = resumed.progress;
    return;
  }
  if (start.init_model && !start.matching_only) {
    const std::vector<float> parameters = parameters_from_model_file(*start.init_model);
    std::copy(parameters.begin(), parameters.end(), model.host->parameters());
  } else {
    model.host->initialize(options.seed);
  }
  if (start.init_model && start.matching_only) {
    const std::vector<std::string> copied =
        copy_matching_parameters(*start.init_model, model.config, model.host->parameters());
    log << "from " << start.init_model->path() << ": " << copied.size() << " of "
        << transformer_parameters(model.config).size()
        << " parameter tensors (the rest fresh from --seed)\n";
  }
  state.data.seed = options.seed;
  state.rng_seed = options.seed;
}

// Every rank starts from rank 0's parameters, moments and progress (a resume may run on another
// number of ranks: the checkpoint holds the global state only).
void broadcast_from_rank0(Communicator& ranks, TrainedModel& model, TrainingProgress& state) {
  static_assert(std::is_trivially_copyable_v<TrainingProgress>);
  const size_t bytes = model.host->parameter_count() * sizeof(float);
  AdamState& adam = model.adam->state();
  ranks.broadcast(&state, sizeof(state), 0);
  ranks.broadcast(model.host->parameters(), bytes, 0);
  ranks.broadcast(&adam.step, sizeof(adam.step), 0);
  ranks.broadcast(adam.first_moment.data(), bytes, 0);
  ranks.broadcast(adam.second_moment.data(), bytes, 0);
}

// The batches from `start` on, with the join augmentation and the text modifiers (--modify-*).
std::unique_ptr<BatchIterator> make_batches(const TrainOptions& options,
                                            const TokenizedCorpus& corpus,
                                            const Tokenizer& tokenizer, DataPosition start) {
  JoinOptions joins;
  joins.probability = options.join_probability;
  joins.max_pairs = static_cast<size_t>(options.join_max_pairs);
  joins.max_length = static_cast<size_t>(options.max_length);
  return std::make_unique<BatchIterator>(
      corpus, static_cast<size_t>(options.batch_tokens), start, joins,
      std::make_unique<CorpusModifier>(options.modifiers, tokenizer, joins.max_length));
}

}  // namespace

void check_devices(const TrainOptions& options, const DeviceTraining* devices,
                   const Communicator& ranks, int gpu) {
  if (options.device != "cpu") {
    if (devices == nullptr) {
      throw Error("--device " + options.device +
                  ": xf-train was built without CUDA training support (use --device cpu)");
    }
    devices->require(options.device, gpu);  // before any long work
    if (ranks.size() > 1 && !ranks.reduces_device_memory()) {
      throw Error("--device " + options.device + " on " + std::to_string(ranks.size()) +
                  " ranks needs a communicator that sums GPU memory (NCCL), not " +
                  ranks.description());
    }
  }
  if (options.bf16 && !cpu::bf16_products_in_hardware()) {
    throw Error("--bf16: this CPU has neither AVX512-BF16 nor AMX, where bf16 products are "
                "slower than f32 ones: leave --bf16 out");
  }
}

void check_inputs(const TrainOptions& options, bool root) {
  // Fail before any long work (SentencePiece training) when an input is missing.
  for (const std::string* path : {&options.train_path, &options.dev_path, &options.spm_path}) {
    if (!root && path == &options.spm_path) continue;
    if (!path->empty() && !std::ifstream(*path)) {
      throw Error(*path + ": cannot open (" + std::strerror(errno) + ")");
    }
  }
}

std::unique_ptr<RunDirectory> open_run_directory(const TrainOptions& options, bool root,
                                                 std::ostream& log) {
  if (root) {
    return std::make_unique<RunDirectory>(options.out_dir, options.resume, options.overwrite,
                                          log);
  }
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw Error(options.out_dir + ": cannot create the run directory: " + ec.message());
  return nullptr;
}

ResumePoint read_resume_point(const TrainOptions& options, bool root, std::ostream& log) {
  ResumePoint start;
  if (!root) return start;  // rank 0 hands what it reads to the others
  if (options.resume) {
    auto checkpoints = list_checkpoints(options.out_dir);
    if (checkpoints.empty()) throw Error("--resume: no step-* checkpoint in " + options.out_dir);
    start.checkpoint = std::make_unique<Checkpoint>(read_checkpoint(checkpoints.back()));
    log << "resuming from " << checkpoints.back() << "\n";
    return start;
  }
  if (options.init_from_path.empty() && options.init_matching_path.empty()) return start;
  if (!options.init_from_path.empty() && !options.init_matching_path.empty()) {
    throw Error("--init-from and --init-matching-from: give one model file to start from");
  }
  start.matching_only = !options.init_matching_path.empty();
  const std::string flag = start.matching_only ? "--init-matching-from" : "--init-from";
  const std::string& path = start.matching_only ? options.init_matching_path : options.init_from_path;
  if (!options.spm_path.empty()) {
    throw Error(flag + " and --spm: the model file brings its SentencePiece model");
  }
  start.init_model = ModelFile::open(path);
  if (start.init_model->source_tokenizer().empty() ||
      start.init_model->target_tokenizer() != start.init_model->source_tokenizer()) {
    throw Error(path + ": " + flag + " needs one shared SentencePiece model in the file");
  }
  log << "starting from the weights of " << path
      << (start.matching_only ? " that fit the options' architecture" : "") << "\n";
  return start;
}

TrainingData make_tokenizer_and_data(const TrainOptions& options, const ResumePoint& start,
                                     Communicator& ranks, std::ostream& log) {
  const bool root = ranks.rank() == 0;
  const CorpusLanguages languages = corpus_languages(options);
  TrainingData data;
  auto load_training_pairs = [&](LengthFilterStats* stats) {
    return filter_by_length(
        load_corpus(options.train_path, languages, *data.tokenizer, options.out_dir),
        static_cast<size_t>(options.max_length), stats);
  };
  // Rank 0 first: it writes the corpus cache that the others then read.
  LengthFilterStats filter_stats;
  if (root) {
    data.tokenizer = make_tokenizer(options, start, languages, log);
    write_file_atomically(options.out_dir + "/sentencepiece.model",
                          data.tokenizer->model_proto().data(),
                          data.tokenizer->model_proto().size());
    data.corpus = load_training_pairs(&filter_stats);
  }
  std::string tokenizer_proto = root ? data.tokenizer->model_proto() : std::string();
  broadcast_string(ranks, &tokenizer_proto, 0);
  if (!root) {
    data.tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::from_model_proto(std::move(tokenizer_proto), "rank 0's vocabulary"));
    data.corpus = load_training_pairs(&filter_stats);
  }
  log << "training pairs: " << filter_stats.kept << " kept, " << filter_stats.dropped_long
      << " longer than " << options.max_length << " tokens and " << filter_stats.dropped_empty
      << " empty dropped\n";
  if (!options.dev_path.empty()) {
    data.dev =
        std::make_unique<ValidationSet>(load_validation_set(options, *data.tokenizer, languages));
  }
  return data;
}

ModelAndOptimizer make_model_and_optimizer(const TrainOptions& options, ResumePoint start,
                                           const Tokenizer& tokenizer, Communicator& ranks,
                                           std::ostream& log) {
  const bool root = ranks.rank() == 0;
  ModelAndOptimizer result;
  TrainedModel& model = result.model;
  std::string config_text;
  if (root) {
    model.config = starting_config(options, start, tokenizer);
    config_text = format_key_values(config_to_key_values(model.config));
  }
  broadcast_string(ranks, &config_text, 0);
  if (!root) {
    model.config = config_from_key_values(parse_key_values(config_text, "rank 0's config"),
                                          "rank 0's config");
  }
  model.host = std::make_unique<TransformerModel>(model.config, training_options(options),
                                                  options.threads);
  if (options.bf16) {
    model.host->set_bf16_products(true);
    log << "matrix products: bf16 inputs, f32 sums\n";
  }
  model.adam =
      std::make_unique<Adam>(model.host->parameter_count(), AdamOptions{}, options.threads);
  // Rank 0 loads or initializes; the others take its parameters, moments and progress.
  if (root) load_starting_state(options, std::move(start), model, result.state, log);
  broadcast_from_rank0(ranks, model, result.state);
  return result;
}

std::unique_ptr<DeviceModel> make_device_model(const TrainOptions& options,
                                               const DeviceTraining* devices, int gpu,
                                               TrainedModel& model, std::ostream& log) {
  model.steps_on_host = options.device == "cpu";
  if (model.steps_on_host) return make_cpu_device_model(*model.host, *model.adam, options.threads);
  std::unique_ptr<DeviceModel> device =
      devices->make_model(options.device, model.config, training_options(options), gpu);
  device->set_parameters(model.host->parameters());
  device->set_adam_state(model.adam->state());
  log << "device: " << device->description() << "\n";
  return device;
}

std::map<std::string, std::string> options_to_save(const TrainOptions& options,
                                                   const ModelConfig& config) {
  TrainOptions trained_options = options;
  trained_options.vocab_size = static_cast<int>(config.source_vocab_size);
  for_each_shape_option(trained_options, config,
                        [](auto& option, const auto& field) { option = field; });
  return train_options_to_map(trained_options);
}

TrainingRun::TrainingRun(const TrainOptions& options, std::ostream& log,
                         const DeviceTraining* devices, Communicator& ranks, int gpu)
    : options(options), ranks(ranks), root(ranks.rank() == 0) {
  // Until the first step the others wait for rank 0 (vocabulary, corpus cache) without a limit;
  // a rank that dies meanwhile still ends the job through its launcher.
  ranks.set_timeout(0);
  check_devices(options, devices, ranks, gpu);
  check_inputs(options, root);
  run_directory = open_run_directory(options, root, log);
  ResumePoint start = read_resume_point(options, root, log);
  data = make_tokenizer_and_data(options, start, ranks, log);
  ModelAndOptimizer made = make_model_and_optimizer(options, std::move(start), *data.tokenizer,
                                                    ranks, log);
  model = std::move(made.model);
  state = made.state;
  const ModelConfig& config = model.config;
  schedule = LearningRateSchedule{options.lr_scale, static_cast<int64_t>(config.d_model),
                                  options.warmup};
  batches = make_batches(options, data.corpus, *data.tokenizer, state.data);
  saved_options = options_to_save(options, config);
  log << "model: " << config.encoder_layers << "+" << config.decoder_layers
      << (config.decoder_layer_kind == DecoderLayerKind::ssru ? " (SSRU decoder)" : "") << " layers, d_model "
      << config.d_model << ", " << config.num_heads << " heads, d_ff " << config.d_ff
      << ", vocabulary " << config.source_vocab_size << ", " << model.host->parameter_count()
      << " parameters; " << batches->batches_per_epoch() << " batches per epoch\n";
  if (ranks.size() > 1) {
    log << "data parallel: " << ranks.description() << ", each on its share of every batch\n";
  }
  model.device = make_device_model(options, devices, gpu, model, log);
  elapsed_before = state.elapsed_seconds;
  // From the first step on, a rank waits --comm-timeout seconds at most for the others.
  ranks.set_timeout(options.comm_timeout);
}

TrainingRun::~TrainingRun() = default;

double TrainingRun::epoch() const {
  return epoch_fraction(batches->position(), batches->batches_per_epoch());
}

}  // namespace xf::trainer
