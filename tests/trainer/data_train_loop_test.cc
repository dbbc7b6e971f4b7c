// xf-train's engine: option parsing and checking, determinism, exact resume (N steps straight ==
// k steps, stop, resume to N), a clean stop on request, checkpoint averaging into a .xfm.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "error_of.h"
#include "xf/error.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "xf/kernels/matmul.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/tensorboard_events.h"
#include "xf/trainer/train_loop.h"
#include "xf/trainer/transformer.h"
#include "xf/translator.h"
#include "reverse_corpus.h"

namespace xf::trainer {
namespace {

using test::error_of;
namespace fs = std::filesystem;

std::string test_dir(const std::string& name) {
  std::string dir = std::string(XF_BINARY_DIR) + "/data_train_loop_test/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(DataTrainLoop, ArgumentsAndOptionErrorsAreOneLine) {
  EXPECT_EQ(error_of([] { parse_train_arguments({"--frobnicate", "3"}); }),
            "unknown option '--frobnicate' (try --help)");
  EXPECT_EQ(error_of([] { parse_train_arguments({"--train"}); }), "--train needs a value");
  EXPECT_EQ(error_of([] { parse_train_arguments({"stray"}); }),
            "unexpected argument 'stray' (options start with --; try --help)");
  EXPECT_EQ(error_of([] { parse_train_arguments({"--resume=1"}); }), "--resume takes no value");
  auto parsed = parse_train_arguments({"--train", "a.tsv", "--out=run", "--resume"});
  EXPECT_EQ(parsed.at("train"), "a.tsv");
  EXPECT_EQ(parsed.at("out"), "run");
  EXPECT_EQ(parsed.at("resume"), "1");

  std::map<std::string, std::string> base = {{"train", "a.tsv"}, {"out", "run"}};
  auto with = [&](const std::string& key, const std::string& value) {
    auto values = base;
    values[key] = value;
    return error_of([&] { train_options_from_map(values); });
  };
  EXPECT_EQ(with("d-model", "abc"), "--d-model: 'abc' is not an integer");
  EXPECT_EQ(with("d-model", "12x"), "--d-model: '12x' is not an integer");
  EXPECT_EQ(with("heads", "7"), "--heads 7 does not divide --d-model 512");
  EXPECT_EQ(with("norm", "middle"), "--norm: 'middle' is not one of pre|post");
  EXPECT_EQ(with("device", "tpu"), "--device: 'tpu' is not one of cpu|cuda|cuda-f32");
  EXPECT_EQ(with("dropout", "1.5"), "--dropout: 1.5 is out of range");
  EXPECT_EQ(with("tgt-lang", "en"), "--src-lang and --tgt-lang are both 'en'");
  EXPECT_EQ(with("batch-tokens", "50"), "--batch-tokens 50 cannot hold one pair of --max-length 100");
  EXPECT_EQ(error_of([] { train_options_from_map({{"out", "x"}}); }), "--train FILE is required");
  EXPECT_EQ(error_of([] { train_options_from_map({{"train", "x"}}); }), "--out DIR is required");
}

TEST(DataTrainLoop, LayersSetsBothAndSpecificCountsWin) {
  auto options = train_options_from_map(
      {{"train", "t"}, {"out", "o"}, {"layers", "3"}, {"decoder-layers", "2"}});
  EXPECT_EQ(options.encoder_layers, 3u);
  EXPECT_EQ(options.decoder_layers, 2u);
  // The saved form reproduces the options.
  auto again = train_options_from_map(train_options_to_map(options));
  EXPECT_EQ(train_options_to_map(again), train_options_to_map(options));
  EXPECT_EQ(again.decoder_layers, 2u);
}

TEST(DataTrainLoop, CudaWithoutCudaIsAClearError) {
  std::string dir = test_dir("cuda");
  auto values = tiny_run(write_reverse_corpus(dir, 20, 1), dir + "/run", {{"device", "cuda"}});
  std::ostringstream log;
  const std::string error = error_of([&] { run_training(train_options_from_map(values), log); });
  // A build with CUDA training (trainer/cuda) trains where a GPU is visible, and says there is
  // none otherwise.
  if (error.empty()) GTEST_SKIP() << "skipped: this build trained on a CUDA GPU";
  EXPECT_TRUE(error.find("without CUDA") != std::string::npos ||
              error.find("no usable CUDA device") != std::string::npos)
      << error;
}

// --bf16: refused beside --device cuda, and on a CPU without bf16 instructions; elsewhere a run
// differs from the f32 one (the products are bf16), is deterministic, and a resumed run keeps
// --bf16 and continues it bit for bit.
TEST(DataTrainLoop, Bf16IsForTheCpuAndResumesExactly) {
  EXPECT_EQ(error_of([] { parse_train_arguments({"--bf16=1"}); }), "--bf16 takes no value");
  std::string dir = test_dir("bf16");
  const std::string train = write_reverse_corpus(dir, 120, 2);
  std::ostringstream log;
  auto values = tiny_run(train, dir + "/cuda", {{"bf16", "1"}, {"device", "cuda"}});
  EXPECT_EQ(error_of([&] { train_options_from_map(values); }),
            "--bf16 is for --device cpu (--device cuda computes in f16 already)");
  values = tiny_run(train, dir + "/bf16", {{"bf16", "1"}, {"max-steps", "8"}});
  if (!cpu::bf16_products_in_hardware()) {
    EXPECT_NE(error_of([&] { run_training(train_options_from_map(values), log); })
                  .find("neither AVX512-BF16 nor AMX"),
              std::string::npos);
    GTEST_SKIP() << "this CPU has no bf16 instructions";
  }
  const TrainSummary bf16 = run_training(train_options_from_map(values), log);
  const TrainSummary f32 = run_training(train_options_from_map(tiny_run(train, dir + "/f32", {{"max-steps", "8"}})), log);
  ASSERT_EQ(bf16.step_losses.size(), 8u);
  EXPECT_NE(bf16.step_losses, f32.step_losses);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(bf16.step_losses[i], f32.step_losses[i], 0.05 * f32.step_losses[i]) << "step " << i;
  }

  auto part_values = values;
  part_values["out"] = dir + "/parts";
  part_values["max-steps"] = "4";
  const TrainSummary part1 = run_training(train_options_from_map(part_values), log);
  const TrainOptions resumed =
      resolve_train_options({{"out", dir + "/parts"}, {"resume", "1"}, {"max-steps", "8"}});
  EXPECT_TRUE(resumed.bf16);  // taken from the checkpoint's options
  const TrainSummary part2 = run_training(resumed, log);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  EXPECT_EQ(joined, bf16.step_losses);  // bitwise
  fs::remove_all(dir);
}

TEST(DataTrainLoop, ResumeEqualsStraightRunBitwise) {
  std::string dir = test_dir("resume");
  std::string train = write_reverse_corpus(dir, 120, 2);
  const int total_steps = 14, first_part = 6;
  std::ostringstream log;

  const auto straight_values = tiny_run(train, dir + "/straight", {{"max-steps", std::to_string(total_steps)}});
  TrainSummary straight = run_training(train_options_from_map(straight_values), log);
  ASSERT_EQ(straight.step_losses.size(), static_cast<size_t>(total_steps));

  // Same seed, same run: determinism.
  TrainSummary again = run_training(
      train_options_from_map(tiny_run(train, dir + "/again", {{"max-steps", std::to_string(total_steps)}})), log);
  EXPECT_EQ(again.step_losses, straight.step_losses);

  // k steps, stop, resume to N. The run crosses an epoch boundary (120 pairs, ~8 batches).
  auto part_values = tiny_run(train, dir + "/parts", {{"max-steps", std::to_string(first_part)}});
  TrainSummary part1 = run_training(train_options_from_map(part_values), log);
  ASSERT_EQ(part1.final_step, first_part);
  TrainOptions resumed = resolve_train_options(
      {{"out", dir + "/parts"}, {"resume", "1"}, {"max-steps", std::to_string(total_steps)}});
  EXPECT_EQ(resumed.d_model, 16u);  // taken from the checkpoint's options
  TrainSummary part2 = run_training(resumed, log);
  EXPECT_EQ(part2.first_step, first_part);
  ASSERT_EQ(part2.final_step, total_steps);

  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  ASSERT_EQ(joined.size(), straight.step_losses.size());
  for (size_t i = 0; i < joined.size(); ++i) {
    EXPECT_EQ(joined[i], straight.step_losses[i]) << "step " << i + 1;  // bitwise
  }
  EXPECT_EQ(read_checkpoint(part2.last_checkpoint).parameters,
            read_checkpoint(straight.last_checkpoint).parameters);
  // The loss curve kept in metrics.csv has one train row per step, resumed or not.
  std::ifstream csv(dir + "/parts/metrics.csv");
  std::string line;
  int train_rows = 0;
  while (std::getline(csv, line)) train_rows += line.rfind("train,", 0) == 0;
  EXPECT_EQ(train_rows, total_steps);
  // TensorBoard's events: a file for each start (the run and its resumption).
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/parts")) {
    event_files += is_tensorboard_event_file(entry.path().filename().string());
  }
  EXPECT_EQ(event_files, 2);
}

// Trains `values` (their --max-steps the total) for `first_part` steps, resumes in their --out
// (the options from the checkpoint) to the total, and expects the losses and the final weights
// of `straight` bit for bit. Returns the resumed run's options.
TrainOptions expect_exact_resume(std::map<std::string, std::string> values, int first_part,
                                 const TrainSummary& straight, std::ostream& log) {
  const std::string total_steps = values.at("max-steps");
  values["max-steps"] = std::to_string(first_part);
  const TrainSummary part1 = run_training(train_options_from_map(values), log);
  const TrainOptions resumed =
      resolve_train_options({{"out", values.at("out")}, {"resume", "1"}, {"max-steps", total_steps}});
  const TrainSummary part2 = run_training(resumed, log);
  std::vector<double> joined = part1.step_losses;
  joined.insert(joined.end(), part2.step_losses.begin(), part2.step_losses.end());
  EXPECT_EQ(joined, straight.step_losses);  // bitwise
  EXPECT_EQ(read_checkpoint(part2.last_checkpoint).parameters,
            read_checkpoint(straight.last_checkpoint).parameters);
  return resumed;
}

// --modify-*: a run with text modifiers (and joins) trains on other batches than one without,
// is deterministic, keeps the options in its checkpoints (and so in the model file's metadata),
// and stopped and resumed equals the straight run bit for bit across epochs whose modified
// examples differ.
TEST(DataTrainLoop, ModifiedExamplesResumeExactly) {
  EXPECT_EQ(error_of([] {
              train_options_from_map({{"train", "t"}, {"out", "o"}, {"modify-typo", "-0.1"}});
            }),
            "--modify-typo: -0.1 is out of range");
  EXPECT_EQ(error_of([] {
              train_options_from_map({{"train", "t"}, {"out", "o"}, {"modify-lowercase", "0.6"},
                                      {"modify-titlecase", "0.5"}});
            }),
            "--modify-lowercase, --modify-uppercase and --modify-titlecase add up to more than 1 "
            "(one draw picks at most one of them)");
  std::string dir = test_dir("modifiers");
  std::string train = write_reverse_corpus(dir, 120, 3);
  const int total_steps = 14, first_part = 6;
  std::ostringstream log;
  auto modified_values = [&](const std::string& out) {
    return tiny_run(train, dir + out,
                    {{"modify-typo", "0.5"}, {"modify-uppercase", "0.2"}, {"modify-titlecase", "0.1"},
                     {"modify-lowercase", "0.2"}, {"modify-no-final-punctuation", "0.3"},
                     {"join-probability", "0.3"}, {"max-steps", std::to_string(total_steps)}});
  };
  const TrainSummary straight = run_training(train_options_from_map(modified_values("/straight")), log);
  ASSERT_EQ(straight.step_losses.size(), static_cast<size_t>(total_steps));
  EXPECT_EQ(run_training(train_options_from_map(modified_values("/again")), log).step_losses,
            straight.step_losses);
  auto joins_only = modified_values("/joins");
  for (const char* name : {"modify-typo", "modify-uppercase", "modify-titlecase", "modify-lowercase",
                           "modify-no-final-punctuation"}) {
    joins_only.erase(name);
  }
  EXPECT_NE(run_training(train_options_from_map(joins_only), log).step_losses, straight.step_losses);
  const auto saved = read_checkpoint(straight.last_checkpoint).options;
  EXPECT_EQ(std::stod(saved.at("modify-typo")), 0.5);  // saved at full precision
  EXPECT_EQ(std::stod(saved.at("modify-uppercase")), 0.2);
  EXPECT_EQ(std::stod(saved.at("modify-no-final-punctuation")), 0.3);

  const TrainOptions resumed = expect_exact_resume(modified_values("/parts"), first_part, straight, log);
  EXPECT_EQ(resumed.modifiers.typo, 0.5);  // taken from the checkpoint's options
  EXPECT_EQ(resumed.modifiers.titlecase, 0.1);
  fs::remove_all(dir);
}

// --join-probability: a run with joined examples trains on other batches than one without,
// is deterministic, and stopped and resumed (the options from the checkpoint) equals the
// straight run bit for bit, across epoch boundaries whose joins differ.
TEST(DataTrainLoop, JoinedExamplesResumeExactly) {
  EXPECT_EQ(error_of([] {
              train_options_from_map({{"train", "t"}, {"out", "o"}, {"join-probability", "1.5"}});
            }),
            "--join-probability: 1.5 is out of range");
  EXPECT_EQ(error_of([] {
              train_options_from_map({{"train", "t"}, {"out", "o"}, {"join-max-pairs", "1"}});
            }),
            "--join-max-pairs: 1 is out of range 2..64");
  std::string dir = test_dir("joins");
  std::string train = write_reverse_corpus(dir, 120, 2);
  const int total_steps = 14, first_part = 6;
  std::ostringstream log;
  auto joined_values = [&](const std::string& out) {
    return tiny_run(train, dir + out,
                    {{"join-probability", "0.5"}, {"join-max-pairs", "3"}, {"max-steps", std::to_string(total_steps)}});
  };
  const TrainSummary straight = run_training(train_options_from_map(joined_values("/straight")), log);
  ASSERT_EQ(straight.step_losses.size(), static_cast<size_t>(total_steps));
  EXPECT_EQ(run_training(train_options_from_map(joined_values("/again")), log).step_losses,
            straight.step_losses);
  const auto plain_values = tiny_run(train, dir + "/plain", {{"max-steps", std::to_string(total_steps)}});
  EXPECT_NE(run_training(train_options_from_map(plain_values), log).step_losses, straight.step_losses);

  const TrainOptions resumed = expect_exact_resume(joined_values("/parts"), first_part, straight, log);
  EXPECT_EQ(resumed.join_probability, 0.5);  // taken from the checkpoint's options
  EXPECT_EQ(resumed.join_max_pairs, 3);
  fs::remove_all(dir);
}

TEST(DataTrainLoop, StopRequestSavesACheckpointAndReturns) {
  std::string dir = test_dir("stop");
  const auto values = tiny_run(write_reverse_corpus(dir, 40, 3), dir + "/run", {{"max-steps", "1000"}});
  std::atomic<bool> stop{true};  // already requested: the loop finishes one step
  std::ostringstream log;
  TrainSummary summary = run_training(train_options_from_map(values), log, &stop);
  EXPECT_TRUE(summary.interrupted);
  EXPECT_EQ(summary.final_step, 1);
  EXPECT_EQ(read_checkpoint(dir + "/run/step-000001").progress.step, 1);
  EXPECT_NE(log.str().find("interrupted at step 1; checkpoint saved"), std::string::npos);
}

TEST(DataTrainLoop, ValidationKeepsBestAndEarlyStops) {
  std::string dir = test_dir("valid");
  std::string train = write_reverse_corpus(dir, 60, 4);
  // BLEU of one-word outputs is always 0 (no 4-grams), so it never improves after the first
  // validation: best/ is step 2's model, and training stops after two more validations.
  const auto values = tiny_run(train, dir + "/run",
                               {{"dev", train}, {"valid-every", "2"}, {"max-steps", "200"}, {"best-by", "bleu"},
                                {"early-stop", "2"}, {"valid-bleu-sentences", "5"}});
  std::ostringstream log;
  TrainSummary summary = run_training(train_options_from_map(values), log);
  EXPECT_TRUE(summary.early_stopped) << log.str();
  EXPECT_EQ(summary.final_step, 6);
  Checkpoint best = read_checkpoint(dir + "/run/best");
  EXPECT_EQ(best.progress.step, 2);
  EXPECT_EQ(best.progress.best_valid_loss, summary.best_valid_loss);
  EXPECT_NE(summary.last_valid_loss, summary.best_valid_loss);  // later validations differ
  EXPECT_GT(summary.best_valid_loss, 0);
}

TEST(DataTrainLoop, ConvertAveragesTwoKnownCheckpoints) {
  std::string dir = test_dir("convert");
  const auto values = tiny_run(write_reverse_corpus(dir, 40, 5), dir + "/run",
                               {{"max-steps", "2"}, {"save-every", "1"}, {"src-lang", "fr"}, {"tgt-lang", "en"},
                                {"tsv-columns", "fr,en"}});
  std::ostringstream log;
  run_training(train_options_from_map(values), log);
  Checkpoint a = read_checkpoint(dir + "/run/step-000001");
  Checkpoint b = read_checkpoint(dir + "/run/step-000002");
  ASSERT_NE(a.parameters, b.parameters);

  Checkpoint mean = average_checkpoints({a, b}, {"a", "b"});
  EXPECT_EQ(mean.progress.step, 2);  // the newest one's bookkeeping
  std::string path = dir + "/mean.xfm";
  write_model_file(mean, DType::f32, model_metadata(mean, {"a", "b"}, {{"test.bleu", "12.5"}}), path);

  auto file = ModelFile::open(path);
  EXPECT_EQ(file->config().d_model, 16u);
  EXPECT_EQ(file->source_tokenizer(), a.tokenizer_model);
  EXPECT_EQ(file->metadata_value("source_language"), "fr");
  EXPECT_EQ(file->metadata_value("target_language"), "en");
  EXPECT_EQ(file->metadata_value("training.steps"), "2");
  EXPECT_EQ(file->metadata_value("training.averaged"), "2");
  EXPECT_EQ(file->metadata_value("test.bleu"), "12.5");
  size_t offset = 0, checked = 0;
  for (const auto& spec : transformer_parameters(a.config)) {
    const TensorView& tensor = file->tensor(spec.name);
    ASSERT_EQ(tensor.dtype, DType::f32);
    const float* stored = static_cast<const float*>(tensor.data);
    for (uint64_t i = 0; i < tensor.elements(); ++i, ++offset) {
      float expected = static_cast<float>((static_cast<double>(a.parameters[offset]) +
                                           static_cast<double>(b.parameters[offset])) / 2);
      ASSERT_EQ(stored[i], expected) << spec.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, a.parameters.size());

  // int8: matrices quantized, vectors kept f32.
  write_model_file(mean, DType::int8, {}, dir + "/mean8.xfm");
  auto quantized = ModelFile::open(dir + "/mean8.xfm");
  for (const auto& spec : transformer_parameters(a.config)) {
    EXPECT_EQ(quantized->tensor(spec.name).dtype, spec.shape.size() >= 2 ? DType::int8 : DType::f32)
        << spec.name;
  }

  // Weighted: sum(w p) / sum(w) in double, element by element; one positive weight a checkpoint.
  Checkpoint weighted = average_checkpoints({a, b}, {"a", "b"}, {1.0, 3.0});
  ASSERT_EQ(weighted.parameters.size(), a.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    const float expected = static_cast<float>((1.0 * a.parameters[i] + 3.0 * b.parameters[i]) / 4.0);
    ASSERT_EQ(weighted.parameters[i], expected) << i;
  }
  EXPECT_EQ(average_checkpoints({a, b}, {"a", "b"}, {2.0, 2.0}).parameters, mean.parameters);
  EXPECT_EQ(error_of([&] { average_checkpoints({a, b}, {"a", "b"}, {1.0}); }),
            "weights: 1 given for 2 inputs (one per input)");
  EXPECT_EQ(error_of([&] { average_checkpoints({a, b}, {"a", "b"}, {1.0, -1.0}); }),
            "weights: each must be a positive number");

  // Checkpoints of different models do not average.
  Checkpoint other = b;
  other.config.d_ff = 64;
  EXPECT_EQ(error_of([&] { average_checkpoints({a, other}, {"a", "other"}); }),
            "other: model config differs from a; cannot average");
}

TEST(DataTrainLoop, InitFromModelFileStartsFromItsWeightsVocabularyAndShape) {
  std::string dir = test_dir("init_from");
  std::string train = write_reverse_corpus(dir, 80, 7);
  std::ostringstream log;
  const auto values = tiny_run(train, dir + "/source", {{"max-steps", "12"}});
  TrainSummary source = run_training(train_options_from_map(values), log);
  Checkpoint trained = read_checkpoint(source.last_checkpoint);

  // f32 files give the checkpoint's parameters back bit for bit, int8 within half a step of
  // each row's scale.
  write_model_file(trained, DType::f32, {}, dir + "/source.xfm");
  write_model_file(trained, DType::int8, {}, dir + "/source8.xfm");
  EXPECT_EQ(parameters_from_model_file(*ModelFile::open(dir + "/source.xfm")), trained.parameters);
  auto int8_file = ModelFile::open(dir + "/source8.xfm");
  std::vector<float> widened = parameters_from_model_file(*int8_file);
  ASSERT_EQ(widened.size(), trained.parameters.size());
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(trained.config)) {
    const TensorView& tensor = int8_file->tensor(spec.name);
    for (uint64_t i = 0; i < tensor.elements(); ++i, ++offset) {
      const float tolerance = tensor.dtype == DType::int8
                                  ? 0.5001f * tensor.row_scales[i / tensor.cols()]
                                  : 0.0f;
      ASSERT_NEAR(widened[offset], trained.parameters[offset], tolerance) << spec.name << "[" << i << "]";
    }
  }

  // A run started from the file takes its shape and vocabulary (the options' --d-model is
  // ignored) and its first loss is the trained model's, far below a fresh start's.
  auto init_values = tiny_run(train, dir + "/continued", {{"init-from", dir + "/source.xfm"}, {"d-model", "32"},
                                                           {"max-steps", "1"}, {"save-every", "1"}});
  TrainSummary continued = run_training(train_options_from_map(init_values), log);
  Checkpoint first = read_checkpoint(continued.last_checkpoint);
  EXPECT_EQ(config_to_key_values(first.config), config_to_key_values(trained.config));
  EXPECT_EQ(first.tokenizer_model, trained.tokenizer_model);
  // The options saved with it (a model file's training.options) name the shape trained, not
  // the ignored --d-model.
  const std::map<std::string, std::string> trained_shape = {
      {"d-model", std::to_string(trained.config.d_model)},
      {"heads", std::to_string(trained.config.num_heads)},
      {"d-ff", std::to_string(trained.config.d_ff)},
      {"encoder-layers", std::to_string(trained.config.encoder_layers)},
      {"decoder-layers", std::to_string(trained.config.decoder_layers)},
      {"max-positions", std::to_string(trained.config.max_positions)},
      {"vocab-size", std::to_string(trained.config.source_vocab_size)}};
  for (const auto& [key, value] : trained_shape) EXPECT_EQ(first.options.at(key), value) << key;
  EXPECT_EQ(first.options.at("norm"),
            trained.config.norm_position == NormPosition::pre ? "pre" : "post");
  TrainSummary fresh = run_training(train_options_from_map(tiny_run(train, dir + "/fresh", {{"max-steps", "1"}})), log);
  ASSERT_EQ(continued.step_losses.size(), 1u);
  EXPECT_LT(continued.step_losses[0], source.step_losses.front() * 0.8);
  EXPECT_LT(continued.step_losses[0], fresh.step_losses[0] * 0.8);

  init_values["out"] = dir + "/refused";  // "continued" holds a run: a new one is refused there
  init_values["spm"] = dir + "/source/sentencepiece.model";
  EXPECT_EQ(error_of([&] { run_training(train_options_from_map(init_values), log); }),
            "--init-from and --spm: the model file brings its SentencePiece model");
  init_values.erase("spm");
  init_values["init-from"] = dir + "/missing.xfm";
  EXPECT_NE(error_of([&] { run_training(train_options_from_map(init_values), log); })
                .find("missing.xfm"), std::string::npos);
  fs::remove_all(dir);
}

// --init-matching-from: a student of another shape (an SSRU decoder, one layer fewer) starts from
// the file's tensors of the same name and shape (embeddings, the encoder, the decoder's
// cross-attention and FFN) and from --seed's fresh values elsewhere (the SSRU cell).
TEST(DataTrainLoop, InitMatchingFromCopiesTheTensorsThatFitANewShape) {
  std::string dir = test_dir("init_matching");
  std::string train = write_reverse_corpus(dir, 80, 7);
  std::ostringstream log;
  TrainSummary teacher_run = run_training(
      train_options_from_map(tiny_run(train, dir + "/teacher", {{"max-steps", "12"}, {"layers", "2"}})), log);
  Checkpoint teacher = read_checkpoint(teacher_run.last_checkpoint);
  write_model_file(teacher, DType::f32, {}, dir + "/teacher.xfm");
  auto teacher_file = ModelFile::open(dir + "/teacher.xfm");

  // The copy itself: a 2+1 SSRU config over a fresh initialization.
  ModelConfig student = teacher.config;
  student.decoder_layers = 1;
  student.decoder_layer_kind = DecoderLayerKind::ssru;
  TransformerModel fresh(student, TrainingOptions{}, 1);
  fresh.initialize(5);
  std::vector<float> parameters(fresh.parameters(), fresh.parameters() + fresh.parameter_count());
  const std::vector<float> initialized = parameters;
  const std::vector<std::string> copied =
      copy_matching_parameters(*teacher_file, student, parameters.data());
  std::map<std::string, const float*> teacher_tensors;
  const float* at = teacher.parameters.data();
  for (const auto& spec : transformer_parameters(teacher.config)) {
    teacher_tensors[spec.name] = at;
    at += spec.elements();
  }
  size_t offset = 0, ssru_tensors = 0;
  for (const auto& spec : transformer_parameters(student)) {
    const size_t n = static_cast<size_t>(spec.elements());
    const std::vector<float> got(parameters.begin() + offset, parameters.begin() + offset + n);
    const bool is_copied = std::find(copied.begin(), copied.end(), spec.name) != copied.end();
    if (spec.name.find("ssru") != std::string::npos) {
      ++ssru_tensors;
      EXPECT_FALSE(is_copied) << spec.name;
      EXPECT_EQ(got, std::vector<float>(initialized.begin() + offset, initialized.begin() + offset + n))
          << spec.name << " is not the fresh initialization";
    } else {
      ASSERT_TRUE(is_copied) << spec.name;  // every other tensor has its namesake in the file
      const float* want = teacher_tensors.at(spec.name);
      EXPECT_EQ(got, std::vector<float>(want, want + n)) << spec.name;
    }
    offset += n;
  }
  EXPECT_GT(ssru_tensors, 0u);
  EXPECT_EQ(copied.size() + ssru_tensors, transformer_parameters(student).size());

  // Through xf-train: the run has the options' shape and the file's vocabulary, and its first
  // loss is far below a fresh start's of the same shape.
  auto values = tiny_run(train, dir + "/student",
                         {{"init-matching-from", dir + "/teacher.xfm"}, {"encoder-layers", "2"},
                          {"decoder-layers", "1"}, {"decoder-cell", "ssru"}, {"vocab-size", "30"},
                          {"max-steps", "1"}, {"save-every", "1"}});
  TrainSummary started = run_training(train_options_from_map(values), log);
  Checkpoint first = read_checkpoint(started.last_checkpoint);
  EXPECT_EQ(first.config.decoder_layers, 1u);
  EXPECT_EQ(first.config.decoder_layer_kind, DecoderLayerKind::ssru);
  EXPECT_EQ(first.config.source_vocab_size, teacher.config.source_vocab_size);
  EXPECT_EQ(first.tokenizer_model, teacher.tokenizer_model);
  EXPECT_EQ(first.options.at("vocab-size"), std::to_string(teacher.config.source_vocab_size));
  auto fresh_values = values;
  fresh_values.erase("init-matching-from");
  fresh_values["spm"] = dir + "/teacher/sentencepiece.model";
  fresh_values["out"] = dir + "/fresh";
  TrainSummary fresh_start = run_training(train_options_from_map(fresh_values), log);
  ASSERT_EQ(started.step_losses.size(), 1u);
  ASSERT_EQ(fresh_start.step_losses.size(), 1u);
  EXPECT_LT(started.step_losses[0], fresh_start.step_losses[0] * 0.9);

  // Another d_model (whose FFN biases still match by shape) and two starting files are refused.
  values["out"] = dir + "/wide";
  values["d-model"] = "24";
  EXPECT_NE(error_of([&] { run_training(train_options_from_map(values), log); })
                .find("no tensor has the name and shape of the embedding"), std::string::npos);
  values["d-model"] = "16";
  values["out"] = dir + "/both";
  values["init-from"] = dir + "/teacher.xfm";
  EXPECT_EQ(error_of([&] { run_training(train_options_from_map(values), log); }),
            "--init-from and --init-matching-from: give one model file to start from");
  fs::remove_all(dir);
}

TEST(DataTrainLoop, PrunedTargetVocabularyKeepsItsRowsAndTranslatesTheSame) {
  // Targets are the reversed sources with 'e' and 'f' written 'a' and 'b': the target side
  // never uses the pieces 'e' and 'f', which the source side does.
  std::string dir = test_dir("prune");
  std::string train = dir + "/train.tsv";
  std::vector<TextPair> pairs;
  {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> length(3, 6), letter(0, 5);
    std::ofstream out(train);
    for (int i = 0; i < 120; ++i) {
      std::string source;
      for (int k = length(rng); k > 0; --k) source.push_back(static_cast<char>('a' + letter(rng)));
      std::string target(source.rbegin(), source.rend());
      for (char& c : target) c = c == 'e' ? 'a' : c == 'f' ? 'b' : c;
      out << source << "\t" << target << "\n";
      pairs.push_back({source, target});
    }
  }
  std::ostringstream log;
  const auto values = tiny_run(train, dir + "/run", {{"max-steps", "300"}});
  TrainSummary run = run_training(train_options_from_map(values), log);
  Checkpoint full = read_checkpoint(run.last_checkpoint);
  ASSERT_TRUE(full.config.shared_embeddings);
  Tokenizer tokenizer = Tokenizer::from_model_proto(full.tokenizer_model, "run");

  const std::vector<int32_t> kept = target_pieces_used(pairs, tokenizer);
  std::vector<std::string> kept_pieces;
  for (int32_t id : kept) kept_pieces.push_back(tokenizer.piece(id));
  EXPECT_EQ(kept.size(), static_cast<size_t>(tokenizer.vocab_size()) - 2);
  for (const char* dropped : {"e", "f"}) {
    EXPECT_EQ(std::find(kept_pieces.begin(), kept_pieces.end(), dropped), kept_pieces.end());
  }

  PrunedModel pruned = prune_target_vocabulary(full, kept);
  const ModelConfig& c = pruned.checkpoint.config;
  EXPECT_FALSE(c.shared_embeddings);
  EXPECT_EQ(c.source_vocab_size, full.config.source_vocab_size);
  EXPECT_EQ(c.target_vocab_size, kept.size());
  // Source embedding: the whole shared one; target embedding: its rows `kept`; then the layers.
  const size_t d = c.d_model, shared = full.config.source_vocab_size * d;
  const std::vector<float>& p = pruned.checkpoint.parameters;
  ASSERT_EQ(p.size(), full.parameters.size() + kept.size() * d);
  EXPECT_TRUE(std::equal(full.parameters.begin(), full.parameters.begin() + shared, p.begin()));
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_TRUE(std::equal(p.begin() + shared + i * d, p.begin() + shared + (i + 1) * d,
                           full.parameters.begin() + kept[i] * d)) << "row " << i;
  }
  EXPECT_TRUE(std::equal(full.parameters.begin() + shared, full.parameters.end(),
                         p.begin() + shared + kept.size() * d));
  Tokenizer target = Tokenizer::from_model_proto(pruned.target_tokenizer, "pruned");
  ASSERT_EQ(target.vocab_size(), static_cast<int>(kept.size()));
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(target.piece(static_cast<int32_t>(i)), kept_pieces[i]);
  }

  // Greedy translations: the same wherever the full model chose kept pieces, which a model
  // trained on these targets does for nearly every sentence.
  write_model_file(full, DType::f32, {}, dir + "/full.xfm");
  write_model_file(pruned.checkpoint, DType::f32, {}, dir + "/pruned.xfm", pruned.target_tokenizer);
  std::vector<std::string> sources;
  for (size_t i = 0; i < 40; ++i) sources.push_back(pairs[i].source);
  TranslateOptions greedy;
  greedy.beam = 1;
  TranslatorOptions small;
  small.max_source_len = static_cast<int>(c.max_positions);
  auto full_out = Translator(Model::open(dir + "/full.xfm"), small).translate(sources, greedy);
  auto pruned_out = Translator(Model::open(dir + "/pruned.xfm"), small).translate(sources, greedy);
  size_t compared = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string& text = full_out[i].hypotheses[0].text;
    if (text.find_first_of("ef") != std::string::npos) continue;
    ++compared;
    EXPECT_EQ(pruned_out[i].hypotheses[0].text, text) << sources[i];
  }
  EXPECT_GE(compared, sources.size() * 3 / 4);

  EXPECT_EQ(error_of([&] { prune_target_vocabulary(full, {0, 1, 3, 2}); }),
            "prune_target_vocabulary: kept ids must be ascending target ids");

  // The vocabulary shared again (xf-convert --shared-vocabulary): exactly the full checkpoint's
  // config, tokenizer and weights; a file that is not a pruning of its source table is refused.
  const Checkpoint reshared =
      checkpoint_with_shared_vocabulary(*ModelFile::open(dir + "/pruned.xfm"));
  EXPECT_EQ(config_to_key_values(reshared.config), config_to_key_values(full.config));
  EXPECT_EQ(reshared.tokenizer_model, full.tokenizer_model);
  EXPECT_EQ(reshared.parameters, full.parameters);
  const auto reshare = [&](const std::string& file) {
    return error_of([&] { checkpoint_with_shared_vocabulary(*ModelFile::open(dir + file)); });
  };
  EXPECT_EQ(reshare("/full.xfm"), dir + "/full.xfm: has one shared vocabulary already");
  PrunedModel altered = pruned;
  altered.checkpoint.parameters[shared + 5 * d] += 1.0f;  // target row 5
  write_model_file(altered.checkpoint, DType::f32, {}, dir + "/altered.xfm",
                   altered.target_tokenizer);
  EXPECT_EQ(reshare("/altered.xfm"), dir + "/altered.xfm: target piece 5 is not a row of the "
                                           "source vocabulary; not a pruned shared vocabulary");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xf::trainer
