// The training loop: data, model, optimizer, validation, checkpoints, logs.
#include "xf/trainer/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "xf/error.h"
#include "xf/format/model_writer.h"
#include "xf/kernels/matmul.h"
#include "xf/metrics.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/data.h"
#include "xf/trainer/device_training.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/run_directory.h"
#include "xf/trainer/transformer.h"
#include "xf/trainer/translate.h"

namespace xf::trainer {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kMetricsCsv = "metrics.csv";
constexpr const char* kMetricsPng = "metrics.png";
constexpr const char* kMetricsHeader =
    "kind,step,epoch,loss,ppl,lr,tokens_per_second,bleu,elapsed_seconds\n";

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

// Dropout masks of step s depend on (seed, s) only, so a resumed run draws the same masks.
uint64_t dropout_seed_for_step(uint64_t rng_seed, int64_t step) {
  SplitMix64 mix(rng_seed ^ (static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull));
  return mix.next();
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%ldm%02lds", s / 60, s % 60);
  }
  return buffer;
}

// The CSV keeps only rows up to `step` (a resumed run rewrites what came after its checkpoint).
void truncate_metrics_csv(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string kept = kMetricsHeader, line;
  if (in) {
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      size_t comma = line.find(',');
      if (comma == std::string::npos) continue;
      int64_t row_step = std::atoll(line.c_str() + comma + 1);
      if (row_step <= step) kept += line + "\n";
    }
  }
  write_file_atomically(path, kept.data(), kept.size());
}

struct ValidationSet {
  TokenizedCorpus corpus;                          // all dev pairs, for the loss
  std::vector<std::vector<int32_t>> bleu_sources;  // distinct sources, without EOS
  std::vector<std::vector<std::string>> bleu_references;  // every target of that source
};

ValidationSet load_validation_set(const TrainOptions& options, const Tokenizer& tokenizer,
                                  const CorpusLanguages& languages) {
  ValidationSet set;
  std::vector<TextPair> pairs = read_parallel_corpus(options.dev_path, languages);
  TokenizedCorpus all = tokenize_corpus(pairs, tokenizer);
  // Pairs the model or a batch cannot take are left out of the loss.
  const size_t longest = static_cast<size_t>(
      std::min<int64_t>(options.max_positions - 1, options.batch_tokens - 1));
  set.corpus = filter_by_length(all, longest);
  // BLEU against every reference of a source (the dev set repeats sources with other
  // translations), over the first N distinct sources.
  std::unordered_map<std::string, size_t> index_of_source;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const size_t source_length = all.source_length(i);
    if (source_length == 0 || source_length + 1 >= options.max_positions) continue;
    auto found = index_of_source.find(pairs[i].source);
    if (found != index_of_source.end()) {
      set.bleu_references[found->second].push_back(pairs[i].target);
      continue;
    }
    if (static_cast<int64_t>(set.bleu_sources.size()) >= options.valid_bleu_sentences) continue;
    index_of_source[pairs[i].source] = set.bleu_sources.size();
    set.bleu_sources.emplace_back(all.source(i), all.source(i) + all.source_length(i));
    set.bleu_references.push_back({pairs[i].target});
  }
  return set;
}

struct ValidationResult {
  double loss = 0;  // NLL per target token
  double bleu = 0;
};

// Each rank takes every size()-th loss batch and BLEU chunk; the NLL and BLEU's sufficient
// statistics are then added over the ranks, so every rank gets the same result. BLEU is of the
// runtime's greedy translations (translate_greedy): what xf-run --beam 1 and xf-eval give for
// the checkpoint converted to an f32 model.
ValidationResult validate(TransformerModel& model, const ValidationSet& set,
                          const Tokenizer& tokenizer, const TrainOptions& options,
                          Communicator& ranks) {
  ValidationResult result;
  const ModelConfig& config = model.config();
  const size_t rank = static_cast<size_t>(ranks.rank()), rank_count = static_cast<size_t>(ranks.size());
  double nll = 0;
  int64_t tokens = 0;
  const std::vector<BatchIndices> loss_batches =
      plan_batches(set.corpus, static_cast<size_t>(options.batch_tokens), 0, 0, /*shuffle=*/false);
  for (size_t b = rank; b < loss_batches.size(); b += rank_count) {
    const BatchIndices& indices = loss_batches[b];
    std::vector<std::vector<int32_t>> sources, targets;
    for (uint32_t i : indices) {
      sources.emplace_back(set.corpus.source(i), set.corpus.source(i) + set.corpus.source_length(i));
      targets.emplace_back(set.corpus.target(i), set.corpus.target(i) + set.corpus.target_length(i));
    }
    LossSums sums = model.evaluate(make_batch(config, sources, targets));
    nll += sums.nll_sum;
    tokens += sums.token_count;
  }
  metrics::BleuStats bleu;
  const size_t chunk = 32;
  std::vector<size_t> mine;  // this rank's sentences
  for (size_t start = rank * chunk; start < set.bleu_sources.size(); start += rank_count * chunk) {
    for (size_t i = start; i < std::min(set.bleu_sources.size(), start + chunk); ++i) mine.push_back(i);
  }
  std::vector<std::vector<int32_t>> sources;
  for (size_t i : mine) sources.push_back(set.bleu_sources[i]);
  const auto translations = translate_greedy(config, model.parameters(), model.parameter_count(),
                                             sources, options.threads);
  for (size_t k = 0; k < mine.size(); ++k) {
    bleu += metrics::bleu_sentence_stats(tokenizer.decode(translations[k]),
                                         set.bleu_references[mine[k]]);
  }
  // Counts below 2^53 add exactly in double.
  std::vector<double> sums = {nll, static_cast<double>(tokens), static_cast<double>(bleu.hyp_len),
                              static_cast<double>(bleu.ref_len)};
  for (int n = 0; n < metrics::kBleuMaxOrder; ++n) {
    sums.push_back(static_cast<double>(bleu.correct[n]));
    sums.push_back(static_cast<double>(bleu.total[n]));
  }
  ranks.all_reduce_sum(sums.data(), sums.size());
  bleu.hyp_len = static_cast<int64_t>(sums[2]);
  bleu.ref_len = static_cast<int64_t>(sums[3]);
  for (int n = 0; n < metrics::kBleuMaxOrder; ++n) {
    bleu.correct[n] = static_cast<int64_t>(sums[4 + 2 * n]);
    bleu.total[n] = static_cast<int64_t>(sums[5 + 2 * n]);
  }
  result.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  if (!set.bleu_sources.empty()) result.bleu = metrics::bleu_from_stats(bleu).score;
  return result;
}

// The training NLL per step, its moving average and the validation NLL points, as a PNG.
void write_plot(const std::string& csv_path, const std::string& png_path) {
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);
  PlotSeries train, smooth, valid;
  train.red = 170, train.green = 200, train.blue = 235;
  smooth.red = 20, smooth.green = 80, smooth.blue = 200;
  valid.red = 220, valid.green = 60, valid.blue = 30;
  valid.points = true;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream row(line);
    std::string field;
    while (std::getline(row, field, ',')) fields.push_back(field);
    if (fields.size() < 4) continue;
    double step = std::atof(fields[1].c_str()), loss = std::atof(fields[3].c_str());
    if (fields[0] == "train" && fields.size() >= 5) {
      // The plain NLL (log of the ppl column), comparable with the validation loss; the loss
      // column is label-smoothed.
      train.x.push_back(step);
      train.y.push_back(std::log(std::atof(fields[4].c_str())));
    } else if (fields[0] == "valid") {
      valid.x.push_back(step);
      valid.y.push_back(loss);
    }
  }
  const size_t window = std::max<size_t>(1, train.y.size() / 50);
  double sum = 0;
  for (size_t i = 0; i < train.y.size(); ++i) {
    sum += train.y[i];
    if (i >= window) sum -= train.y[i - window];
    smooth.x.push_back(train.x[i]);
    smooth.y.push_back(sum / std::min(i + 1, window));
  }
  std::string png = render_line_plot_png({train, smooth, valid}, 900, 500);
  write_file_atomically(png_path, png.data(), png.size());
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

TrainSummary run_training(const TrainOptions& options, std::ostream& progress,
                          const std::atomic<bool>* stop_requested, const DeviceTraining* devices,
                          Communicator* comm, int gpu) {
  const auto run_start = Clock::now();
  SingleProcess one_process;
  Communicator& ranks = comm != nullptr ? *comm : one_process;
  const bool root = ranks.rank() == 0;  // writes the run directory and the progress lines
  std::ostream silent(nullptr);
  std::ostream& log = root ? progress : silent;
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
  std::optional<RunDirectory> run_directory;
  if (root) {
    run_directory.emplace(options.out_dir, options.resume, options.overwrite, log);
  } else {
    std::error_code ec;
    fs::create_directories(options.out_dir, ec);
    if (ec) throw Error(options.out_dir + ": cannot create the run directory: " + ec.message());
  }
  const std::string out = options.out_dir + "/";

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
  std::unique_ptr<Tokenizer> tokenizer;
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
  TokenizedCorpus corpus;
  if (root) {
    write_file_atomically(out + "sentencepiece.model", tokenizer->model_proto().data(),
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
  std::unique_ptr<ValidationSet> dev;
  if (!options.dev_path.empty()) {
    dev = std::make_unique<ValidationSet>(load_validation_set(options, *tokenizer, languages));
  }

  // ---- Model and optimizer -------------------------------------------------------------------
  ModelConfig config;
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
  TransformerModel model(config, training, options.threads);
  if (options.bf16) {
    model.set_bf16_products(true);
    log << "matrix products: bf16 inputs, f32 sums\n";
  }
  Adam adam(model.parameter_count(), AdamOptions{}, options.threads);
  TrainingProgress state;
  if (resumed) {
    if (resumed->parameters.size() != model.parameter_count()) {
      throw Error("checkpoint parameter count does not match the model");
    }
    std::copy(resumed->parameters.begin(), resumed->parameters.end(), model.parameters());
    adam.set_state(resumed->adam);
    state = resumed->progress;
    resumed.reset();  // free its copy of the parameters
  } else {
    if (init_model) {
      const std::vector<float> parameters = parameters_from_model_file(*init_model);
      std::copy(parameters.begin(), parameters.end(), model.parameters());
      init_model.reset();  // unmap the file
    } else {
      model.initialize(options.seed);
    }
    state.data.seed = options.seed;
    state.rng_seed = options.seed;
  }
  // Every rank starts from rank 0's parameters, moments and progress (a resume may run on
  // another number of ranks: the checkpoint holds the global state only).
  static_assert(std::is_trivially_copyable_v<TrainingProgress>);
  ranks.broadcast(&state, sizeof(state), 0);
  ranks.broadcast(model.parameters(), model.parameter_count() * sizeof(float), 0);
  ranks.broadcast(&adam.state().step, sizeof(adam.state().step), 0);
  ranks.broadcast(adam.state().first_moment.data(), model.parameter_count() * sizeof(float), 0);
  ranks.broadcast(adam.state().second_moment.data(), model.parameter_count() * sizeof(float), 0);
  const LearningRateSchedule schedule{options.lr_scale, static_cast<int64_t>(config.d_model),
                                      options.warmup};
  JoinOptions joins;
  joins.probability = options.join_probability;
  joins.max_pairs = static_cast<size_t>(options.join_max_pairs);
  joins.max_length = static_cast<size_t>(options.max_length);
  BatchIterator batches(corpus, static_cast<size_t>(options.batch_tokens), state.data, joins);
  // Saved with each checkpoint (and so a model file's training.options): the shape options say
  // the architecture trained, also when --init-from or --resume chose it over the flags.
  TrainOptions trained_options = options;
  trained_options.vocab_size = static_cast<int>(config.source_vocab_size);
  for_each_shape_option(trained_options, config, [](auto& option, const auto& field) { option = field; });
  const std::map<std::string, std::string> saved_options = train_options_to_map(trained_options);
  log << "model: " << config.encoder_layers << "+" << config.decoder_layers << " layers, d_model "
      << config.d_model << ", " << config.num_heads << " heads, d_ff " << config.d_ff
      << ", vocabulary " << config.source_vocab_size << ", " << model.parameter_count()
      << " parameters; " << batches.batches_per_epoch() << " batches per epoch\n";
  if (ranks.size() > 1) {
    log << "data parallel: " << ranks.description() << ", each on its share of every batch\n";
  }

  // ---- Logs ----------------------------------------------------------------------------------
  const std::string csv_path = out + kMetricsCsv;
  std::ofstream csv;  // rank 0's; writes elsewhere go nowhere
  if (root) {
    truncate_metrics_csv(csv_path, state.step);
    csv.open(csv_path, std::ios::app);
    if (!csv) throw Error(csv_path + ": cannot open for appending");
  }

  TrainSummary summary;
  summary.first_step = state.step;
  auto make_checkpoint = [&]() {
    Checkpoint c;
    c.config = config;
    c.options = saved_options;
    c.parameters.assign(model.parameters(), model.parameters() + model.parameter_count());
    c.adam = adam.state();
    c.progress = state;
    c.tokenizer_model = tokenizer->model_proto();
    return c;
  };
  int64_t last_saved_step = -1, last_validated_step = -1;
  // Every step runs on a DeviceModel: on the CPU the host model and optimizer themselves; with
  // --device cuda (f16 mixed precision) or cuda-f32 on the GPU, and the host model and optimizer
  // get its parameters and moments back for validation and checkpoints (sync_host).
  const bool on_host = options.device == "cpu";
  std::unique_ptr<DeviceModel> device_model;
  if (on_host) {
    device_model = make_cpu_device_model(model, adam, options.threads);
  } else {
    device_model = devices->make_model(options.device, config, training, gpu);
    device_model->set_parameters(model.parameters());
    device_model->set_adam_state(adam.state());
    log << "device: " << device_model->description() << "\n";
  }
  auto sync_host = [&]() {
    if (on_host) return;
    device_model->copy_parameters_to(model.parameters());
    adam.set_state(device_model->adam_state());
  };
  // The ranks hold the same parameters by construction (the same sums, the same steps); each
  // save checks it, so that an exchange that went wrong cannot go unnoticed.
  auto check_ranks_agree = [&]() {
    if (ranks.size() == 1 || !on_host) return;
    uint64_t hash = fnv1a_64(std::string_view(reinterpret_cast<const char*>(model.parameters()),
                                              model.parameter_count() * sizeof(float)));
    uint64_t root_hash = hash;
    ranks.broadcast(&root_hash, sizeof(root_hash), 0);
    if (hash != root_hash) {
      throw Error("rank " + std::to_string(ranks.rank()) + ": parameters differ from rank 0's at step " +
                  std::to_string(state.step) + " (the ranks no longer train the same model)");
    }
  };
  auto save = [&]() {
    state.data = batches.position();
    check_ranks_agree();
    if (root) {
      sync_host();
      summary.last_checkpoint = save_checkpoint(options.out_dir, make_checkpoint(), options.keep);
    }
    last_saved_step = state.step;
  };
  auto epoch_fraction = [&]() {
    DataPosition p = batches.position();
    return static_cast<double>(p.epoch) +
           static_cast<double>(p.batch_index) / static_cast<double>(batches.batches_per_epoch());
  };
  auto run_validation = [&]() {
    if (!dev) return;
    sync_host();
    ValidationResult v = validate(model, *dev, *tokenizer, options, ranks);
    last_validated_step = state.step;
    state.last_valid_loss = v.loss;
    state.last_valid_bleu = v.bleu;
    bool improved = !state.has_best || (options.best_by == "bleu" ? v.bleu > state.best_valid_bleu
                                                                   : v.loss < state.best_valid_loss);
    if (improved) {
      state.has_best = true;
      state.best_valid_loss = v.loss;
      state.best_valid_bleu = v.bleu;
      state.validations_without_improvement = 0;
      state.data = batches.position();
      if (root) save_best_checkpoint(options.out_dir, make_checkpoint());
    } else {
      ++state.validations_without_improvement;
    }
    char line[256];
    std::snprintf(line, sizeof(line),
                  "valid step %lld | loss %.4f | ppl %.2f | bleu %.2f%s\n",
                  static_cast<long long>(state.step), v.loss, std::exp(v.loss), v.bleu,
                  improved ? " | best" : "");
    log << line << std::flush;
    csv << "valid," << state.step << "," << epoch_fraction() << "," << v.loss << ","
        << std::exp(v.loss) << ",," << "," << v.bleu << "," << state.elapsed_seconds << "\n";
    csv.flush();
  };

  // ---- Loop ----------------------------------------------------------------------------------
  const double elapsed_before = state.elapsed_seconds;
  auto interval_start = Clock::now();
  int64_t interval_tokens = 0;
  double interval_loss = 0, interval_nll = 0;
  int64_t interval_scored = 0;
  const int64_t steps_per_epoch = static_cast<int64_t>(batches.batches_per_epoch());
  auto completed_epochs = [&]() {
    DataPosition p = batches.position();
    return static_cast<int64_t>(p.epoch) + (static_cast<int64_t>(p.batch_index) >= steps_per_epoch ? 1 : 0);
  };
  // Rank 0's clock decides --max-minutes for every rank (it comes with each step's sums).
  double root_run_seconds = 0;
  auto finished = [&]() {
    if (options.max_steps > 0 && state.step >= options.max_steps) return true;
    if (options.epochs > 0 && completed_epochs() >= options.epochs) return true;
    double minutes = (ranks.size() == 1
                          ? std::chrono::duration<double>(Clock::now() - run_start).count()
                          : root_run_seconds) / 60;
    return options.max_minutes > 0 && minutes >= options.max_minutes;
  };
  const int64_t target_steps =
      options.max_steps > 0 ? options.max_steps
                            : (options.epochs > 0 ? options.epochs * steps_per_epoch : 0);
  int stop_votes = 0;  // ranks asked to stop (Ctrl-C), summed with each step so all ranks agree
  ranks.set_timeout(options.comm_timeout);

  while (!finished()) {
    // The global batch, cut as in one process; this rank trains on its share of the rows, padded
    // to the global batch's lengths so that dropout draws one process's masks for them.
    const BatchIndices& global_batch = batches.next();
    const TokenizedCorpus& examples = batches.corpus();  // this epoch's (joined) examples
    const BatchIndices indices = rank_share(global_batch, ranks.rank(), ranks.size());
    int64_t global_source_len = 0, global_target_len = 0;
    for (uint32_t i : global_batch) {
      global_source_len = std::max<int64_t>(global_source_len, padded_source_length(examples, i));
      global_target_len = std::max<int64_t>(global_target_len, padded_target_length(examples, i));
    }
    std::vector<std::vector<int32_t>> sources, targets;
    sources.reserve(indices.size());
    targets.reserve(indices.size());
    for (uint32_t i : indices) {
      sources.emplace_back(examples.source(i), examples.source(i) + examples.source_length(i));
      targets.emplace_back(examples.target(i), examples.target(i) + examples.target_length(i));
    }
    const uint64_t dropout_seed = dropout_seed_for_step(state.rng_seed, state.step + 1);
    const double lr = schedule.at(state.step + 1);
    LossSums sums;  // this rank's share, then (below) the whole batch's
    int64_t batch_tokens = 0;
    device_model->zero_gradients();
    if (!indices.empty()) {  // a batch of fewer rows than ranks leaves some ranks idle
      Batch batch = make_batch(config, sources, targets, global_source_len, global_target_len);
      batch.row_offset =
          static_cast<int64_t>(share_begin(global_batch.size(), ranks.rank(), ranks.size()));
      sums = device_model->forward_backward(batch, dropout_seed);
      batch_tokens = batch.source_tokens + batch.target_tokens;
    }
    if (ranks.size() > 1) {
      device_model->all_reduce_gradients(ranks);
      const bool stop_here = stop_requested && stop_requested->load();
      double totals[] = {sums.loss_sum,
                         sums.nll_sum,
                         static_cast<double>(sums.token_count),
                         static_cast<double>(batch_tokens),
                         stop_here ? 1.0 : 0.0,
                         root ? std::chrono::duration<double>(Clock::now() - run_start).count() : 0};
      ranks.all_reduce_sum(totals, std::size(totals));
      sums.loss_sum = totals[0];
      sums.nll_sum = totals[1];
      sums.token_count = static_cast<int64_t>(totals[2]);
      batch_tokens = static_cast<int64_t>(totals[3]);
      stop_votes = static_cast<int>(totals[4]);
      root_run_seconds = totals[5];
    }
    // Adam with clipping (on a GPU, a mixed-precision overflow skips the step).
    device_model->adam_step(lr, 1.0 / static_cast<double>(std::max<int64_t>(1, sums.token_count)),
                            options.clip_norm);
    ++state.step;
    state.data = batches.position();
    state.tokens_seen += batch_tokens;
    state.elapsed_seconds =
        elapsed_before + std::chrono::duration<double>(Clock::now() - run_start).count();

    const double loss = sums.loss_sum / std::max<int64_t>(1, sums.token_count);
    const double ppl = std::exp(sums.nll_sum / std::max<int64_t>(1, sums.token_count));
    if (!std::isfinite(loss)) {
      throw Error("training diverged at step " + std::to_string(state.step) +
                  " (loss is not finite); lower --lr-scale or set --clip-norm");
    }
    summary.step_losses.push_back(loss);
    interval_tokens += batch_tokens;
    interval_loss += sums.loss_sum;
    interval_nll += sums.nll_sum;
    interval_scored += sums.token_count;

    if (state.step % options.log_every == 0 || state.step == 1) {
      double seconds = std::chrono::duration<double>(Clock::now() - interval_start).count();
      double tokens_per_second = seconds > 0 ? interval_tokens / seconds : 0;
      double step_seconds = (state.elapsed_seconds - elapsed_before) /
                            std::max<int64_t>(1, state.step - summary.first_step);
      double eta = target_steps > 0 ? (target_steps - state.step) * step_seconds : -1;
      if (options.max_minutes > 0) {
        double left = options.max_minutes * 60 -
                      std::chrono::duration<double>(Clock::now() - run_start).count();
        eta = eta < 0 ? left : std::min(eta, left);
      }
      char line[320];
      std::snprintf(line, sizeof(line),
                    "step %lld | epoch %.2f | loss %.4f | ppl %.2f | lr %.3g | %.0f tok/s | ETA %s\n",
                    static_cast<long long>(state.step), epoch_fraction(),
                    interval_loss / std::max<int64_t>(1, interval_scored),
                    std::exp(interval_nll / std::max<int64_t>(1, interval_scored)), lr,
                    tokens_per_second, eta < 0 ? "-" : format_duration(eta).c_str());
      log << line << std::flush;
      interval_start = Clock::now();
      interval_tokens = 0;
      interval_loss = interval_nll = 0;
      interval_scored = 0;
      csv << "train," << state.step << "," << epoch_fraction() << "," << loss << "," << ppl << ","
          << lr << "," << tokens_per_second << ",," << state.elapsed_seconds << "\n";
    } else {
      csv << "train," << state.step << "," << epoch_fraction() << "," << loss << "," << ppl << ","
          << lr << ",,," << state.elapsed_seconds << "\n";
    }

    if (options.valid_every > 0 && state.step % options.valid_every == 0) {
      run_validation();
      if (options.early_stop > 0 && state.validations_without_improvement >= options.early_stop) {
        log << "early stop: " << options.early_stop << " validations without improvement\n";
        summary.early_stopped = true;
        break;
      }
    }
    if (options.save_every > 0 && state.step % options.save_every == 0) save();
    if (ranks.size() == 1 ? stop_requested && stop_requested->load() : stop_votes > 0) {
      summary.interrupted = true;
      break;
    }
  }

  // ---- End: last validation, last checkpoint, plot -------------------------------------------
  if (!summary.interrupted && last_validated_step != state.step && state.step > summary.first_step) {
    run_validation();
  }
  if (last_saved_step != state.step) save();
  if (summary.interrupted) {
    log << "interrupted at step " << state.step << "; checkpoint saved to "
        << summary.last_checkpoint << "\n";
  }
  if (root) {
    csv.close();
    write_plot(csv_path, out + kMetricsPng);
  }

  summary.final_step = state.step;
  summary.last_valid_loss = state.last_valid_loss;
  summary.last_valid_bleu = state.last_valid_bleu;
  summary.best_valid_loss = state.best_valid_loss;
  summary.best_valid_bleu = state.best_valid_bleu;
  summary.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return summary;
}

}  // namespace xf::trainer
