// The training loop's setup (train_setup.h): options -> run directory, data, model, optimizer.
#include "xf/trainer/train_setup.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/kernels/matmul.h"
#include "xf/trainer/train_log.h"
#include "xf/trainer/validation.h"

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
}

}  // namespace

TrainingRun::TrainingRun(const TrainOptions& options, std::ostream& log,
                         const DeviceTraining* devices, Communicator& ranks, int gpu)
    : options(options), ranks(ranks), root(ranks.rank() == 0) {
  // Until the first step the others wait for rank 0 (vocabulary, corpus cache) without a limit;
  // a rank that dies meanwhile still ends the job through its launcher.
  ranks.set_timeout(0);
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
  const CorpusLanguages languages = corpus_languages(options);
  // Fail before any long work (SentencePiece training) when an input is missing. Every rank
  // reads the training and dev files; rank 0 alone makes the vocabulary.
  for (const std::string* path : {&options.train_path, &options.dev_path, &options.spm_path}) {
    if (!root && path == &options.spm_path) continue;
    if (!path->empty() && !std::ifstream(*path)) {
      throw Error(*path + ": cannot open (" + std::strerror(errno) + ")");
    }
  }
  // Rank 0 owns the run directory while the run lasts (its lock; no mixing with an earlier
  // run); the other ranks need it only for the corpus cache.
  if (root) {
    run_directory.emplace(options.out_dir, options.resume, options.overwrite, log);
  } else {
    std::error_code ec;
    fs::create_directories(options.out_dir, ec);
    if (ec) throw Error(options.out_dir + ": cannot create the run directory: " + ec.message());
  }

  // ---- Resume point or fresh start (rank 0 reads, then hands it to the others) ----------------
  std::unique_ptr<Checkpoint> resumed;
  if (options.resume && root) {
    auto checkpoints = list_checkpoints(options.out_dir);
    if (checkpoints.empty()) throw Error("--resume: no step-* checkpoint in " + options.out_dir);
    resumed = std::make_unique<Checkpoint>(read_checkpoint(checkpoints.back()));
    log << "resuming from " << checkpoints.back() << "\n";
  }

  // A model file to start from gives the architecture, the vocabulary and the weights (rank 0
  // reads it and hands them to the others).
  std::shared_ptr<const ModelFile> init_model;
  if (root && !resumed && !options.init_from_path.empty()) {
    if (!options.spm_path.empty()) {
      throw Error("--init-from and --spm: the model file brings its SentencePiece model");
    }
    init_model = ModelFile::open(options.init_from_path);
    if (init_model->source_tokenizer().empty() ||
        init_model->target_tokenizer() != init_model->source_tokenizer()) {
      throw Error(options.init_from_path +
                  ": --init-from needs one shared SentencePiece model in the file");
    }
    log << "starting from the weights of " << options.init_from_path << "\n";
  }

  // ---- Tokenizer and data: rank 0 first (it writes the corpus cache the others then read) -----
  if (!root) {
    // Filled by the broadcast below.
  } else if (init_model) {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_model_proto(
        std::string(init_model->source_tokenizer()), options.init_from_path));
  } else if (resumed) {
    tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::from_model_proto(resumed->tokenizer_model, options.out_dir + " checkpoint"));
  } else if (!options.spm_path.empty()) {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(options.spm_path));
  } else {
    log << "training SentencePiece (" << options.spm_type << ", vocabulary " << options.vocab_size
        << ") on " << options.train_path << "\n";
    SentencePieceTrainOptions spm;
    spm.vocab_size = options.vocab_size;
    spm.model_type = options.spm_type;
    spm.threads = options.threads;
    tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::train(read_parallel_corpus(options.train_path, languages), spm));
  }
  auto load_training_pairs = [&](LengthFilterStats* stats) {
    return filter_by_length(load_corpus(options.train_path, languages, *tokenizer, options.out_dir),
                            static_cast<size_t>(options.max_length), stats);
  };
  LengthFilterStats filter_stats;
  if (root) {
    write_file_atomically(options.out_dir + "/sentencepiece.model", tokenizer->model_proto().data(),
                          tokenizer->model_proto().size());
    corpus = load_training_pairs(&filter_stats);
  }
  std::string tokenizer_proto = root ? tokenizer->model_proto() : std::string();
  broadcast_string(ranks, &tokenizer_proto, 0);
  if (!root) {
    tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::from_model_proto(std::move(tokenizer_proto), "rank 0's vocabulary"));
    corpus = load_training_pairs(&filter_stats);
  }
  log << "training pairs: " << filter_stats.kept << " kept, " << filter_stats.dropped_long
      << " longer than " << options.max_length << " tokens and " << filter_stats.dropped_empty
      << " empty dropped\n";
  if (!options.dev_path.empty()) {
    dev = std::make_unique<ValidationSet>(load_validation_set(options, *tokenizer, languages));
  }

  // ---- Model and optimizer -------------------------------------------------------------------
  if (!root) {
    // Filled by the broadcast below.
  } else if (resumed) {
    config = resumed->config;
  } else if (init_model) {
    config = init_model->config();
  } else {
    config.source_vocab_size = config.target_vocab_size =
        static_cast<uint32_t>(tokenizer->vocab_size());
    for_each_shape_option(options, config, [](const auto& option, auto& field) { field = option; });
    config.pad_id = kPadId;
    config.unk_id = kUnkId;
    config.bos_id = kBosId;
    config.eos_id = kEosId;
    validate_config(config);
  }
  std::string config_text = root ? format_key_values(config_to_key_values(config)) : std::string();
  broadcast_string(ranks, &config_text, 0);
  if (!root) {
    config = config_from_key_values(parse_key_values(config_text, "rank 0's config"),
                                    "rank 0's config");
  }
  TrainingOptions training;
  training.dropout = options.dropout;
  training.attention_dropout = options.attention_dropout;
  training.label_smoothing = options.label_smoothing;
  model = std::make_unique<TransformerModel>(config, training, options.threads);
  if (options.bf16) {
    model->set_bf16_products(true);
    log << "matrix products: bf16 inputs, f32 sums\n";
  }
  adam = std::make_unique<Adam>(model->parameter_count(), AdamOptions{}, options.threads);
  if (resumed) {
    if (resumed->parameters.size() != model->parameter_count()) {
      throw Error("checkpoint parameter count does not match the model");
    }
    std::copy(resumed->parameters.begin(), resumed->parameters.end(), model->parameters());
    adam->set_state(resumed->adam);
    state = resumed->progress;
    resumed.reset();  // free its copy of the parameters
  } else {
    if (init_model) {
      const std::vector<float> parameters = parameters_from_model_file(*init_model);
      std::copy(parameters.begin(), parameters.end(), model->parameters());
      init_model.reset();  // unmap the file
    } else {
      model->initialize(options.seed);
    }
    state.data.seed = options.seed;
    state.rng_seed = options.seed;
  }
  // Every rank starts from rank 0's parameters, moments and progress (a resume may run on
  // another number of ranks: the checkpoint holds the global state only).
  static_assert(std::is_trivially_copyable_v<TrainingProgress>);
  ranks.broadcast(&state, sizeof(state), 0);
  ranks.broadcast(model->parameters(), model->parameter_count() * sizeof(float), 0);
  ranks.broadcast(&adam->state().step, sizeof(adam->state().step), 0);
  ranks.broadcast(adam->state().first_moment.data(), model->parameter_count() * sizeof(float), 0);
  ranks.broadcast(adam->state().second_moment.data(), model->parameter_count() * sizeof(float), 0);
  schedule = LearningRateSchedule{options.lr_scale, static_cast<int64_t>(config.d_model),
                                  options.warmup};
  JoinOptions joins;
  joins.probability = options.join_probability;
  joins.max_pairs = static_cast<size_t>(options.join_max_pairs);
  joins.max_length = static_cast<size_t>(options.max_length);
  batches = std::make_unique<BatchIterator>(
      corpus, static_cast<size_t>(options.batch_tokens), state.data, joins,
      std::make_unique<CorpusModifier>(options.modifiers, *tokenizer, joins.max_length));
  // Saved with each checkpoint (and so a model file's training.options): the shape options say
  // the architecture trained, also when --init-from or --resume chose it over the flags.
  TrainOptions trained_options = options;
  trained_options.vocab_size = static_cast<int>(config.source_vocab_size);
  for_each_shape_option(trained_options, config, [](auto& option, const auto& field) { option = field; });
  saved_options = train_options_to_map(trained_options);
  log << "model: " << config.encoder_layers << "+" << config.decoder_layers << " layers, d_model "
      << config.d_model << ", " << config.num_heads << " heads, d_ff " << config.d_ff
      << ", vocabulary " << config.source_vocab_size << ", " << model->parameter_count()
      << " parameters; " << batches->batches_per_epoch() << " batches per epoch\n";
  if (ranks.size() > 1) {
    log << "data parallel: " << ranks.description() << ", each on its share of every batch\n";
  }

  if (options.device == "cpu") {
    device_model = make_cpu_device_model(*model, *adam, options.threads);
  } else {
    device_model = devices->make_model(options.device, config, training, gpu);
    device_model->set_parameters(model->parameters());
    device_model->set_adam_state(adam->state());
    log << "device: " << device_model->description() << "\n";
  }
  elapsed_before = state.elapsed_seconds;
  // From the first step on, a rank waits --comm-timeout seconds at most for the others.
  ranks.set_timeout(options.comm_timeout);
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::sync_host() {
  if (options.device == "cpu") return;
  device_model->copy_parameters_to(model->parameters());
  adam->set_state(device_model->adam_state());
}

Checkpoint TrainingRun::checkpoint() const {
  Checkpoint c;
  c.config = config;
  c.options = saved_options;
  c.parameters.assign(model->parameters(), model->parameters() + model->parameter_count());
  c.adam = adam->state();
  c.progress = state;
  c.tokenizer_model = tokenizer->model_proto();
  return c;
}

double TrainingRun::epoch() const {
  return epoch_fraction(batches->position(), batches->batches_per_epoch());
}

}  // namespace xf::trainer
