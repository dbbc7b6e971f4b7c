// Checkpoint directories: exact round trip, atomic replacement, keep-last-M, keep-best, and the
// one-line errors for directories that are not (complete, intact) checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "error_of.h"
#include "tiny_model.h"
#include "xf/error.h"
#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer {
namespace {

using test::error_of;
namespace fs = std::filesystem;

// tests/common's tiny config, pre-norm with unequal layer counts, so that a swapped field shows.
ModelConfig tiny_config() {
  ModelConfig config = test::tiny_config();
  config.decoder_layers = 2;
  config.norm_position = NormPosition::pre;
  config.layer_norm_epsilon = 1e-5f;
  return config;
}


Checkpoint random_checkpoint(int64_t step, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Checkpoint c;
  c.config = tiny_config();
  size_t n = transformer_parameter_count(c.config);
  for (auto* v : {&c.parameters, &c.adam.first_moment, &c.adam.second_moment}) {
    v->resize(n);
    for (float& x : *v) x = normal(rng);
  }
  c.adam.step = step;
  c.options = {{"d-model", "8"}, {"train", "/data/x.tsv"}, {"lr-scale", "0.5"}};
  c.progress.step = step;
  c.progress.data = {3, 17, 99};
  c.progress.rng_seed = 1234567890123ull;
  c.progress.elapsed_seconds = 12.345678901234567;
  c.progress.tokens_seen = 98765;
  c.progress.has_best = true;
  c.progress.best_valid_loss = 2.718281828459045;
  c.progress.best_valid_bleu = 31.4;
  c.progress.validations_without_improvement = 2;
  c.progress.last_valid_loss = 3.0000000000000004;
  c.progress.last_valid_bleu = 29.9;
  c.tokenizer_model = std::string("spm\0bytes\xff", 10);
  return c;
}

std::string fresh_dir(const std::string& name) {
  std::string dir = std::string(XF_BINARY_DIR) + "/data_checkpoint_test_" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(DataCheckpoint, RoundTripIsExact) {
  std::string run = fresh_dir("round_trip");
  Checkpoint saved = random_checkpoint(123, 1);
  std::string path = save_checkpoint(run, saved, 0);
  EXPECT_EQ(path, run + "/step-000123");
  Checkpoint loaded = read_checkpoint(path);
  EXPECT_EQ(loaded.parameters, saved.parameters);  // bitwise: float == on identical bits
  EXPECT_EQ(loaded.adam.first_moment, saved.adam.first_moment);
  EXPECT_EQ(loaded.adam.second_moment, saved.adam.second_moment);
  EXPECT_EQ(loaded.adam.step, 123);
  EXPECT_EQ(loaded.options, saved.options);
  EXPECT_EQ(loaded.tokenizer_model, saved.tokenizer_model);
  EXPECT_EQ(loaded.progress.step, 123);
  EXPECT_EQ(loaded.progress.data.epoch, 3u);
  EXPECT_EQ(loaded.progress.data.batch_index, 17u);
  EXPECT_EQ(loaded.progress.data.seed, 99u);
  EXPECT_EQ(loaded.progress.rng_seed, 1234567890123ull);
  EXPECT_EQ(loaded.progress.elapsed_seconds, saved.progress.elapsed_seconds);
  EXPECT_EQ(loaded.progress.tokens_seen, 98765);
  EXPECT_TRUE(loaded.progress.has_best);
  EXPECT_EQ(loaded.progress.best_valid_loss, saved.progress.best_valid_loss);
  EXPECT_EQ(loaded.progress.best_valid_bleu, saved.progress.best_valid_bleu);
  EXPECT_EQ(loaded.progress.validations_without_improvement, 2);
  EXPECT_EQ(loaded.progress.last_valid_loss, saved.progress.last_valid_loss);
  // Every config field survives, the float epsilon exactly.
  EXPECT_EQ(config_to_key_values(loaded.config), config_to_key_values(saved.config));
  EXPECT_EQ(loaded.config.layer_norm_epsilon, 1e-5f);
  EXPECT_EQ(loaded.config.norm_position, NormPosition::pre);
  EXPECT_EQ(loaded.config.decoder_layers, 2u);
  // No temporary directories left behind.
  for (const auto& entry : fs::directory_iterator(run)) {
    EXPECT_EQ(entry.path().filename().string()[0] == '.', false) << entry.path();
  }
}

TEST(DataCheckpoint, KeepsTheLastMAndReplacesAtomically) {
  std::string run = fresh_dir("keep");
  for (int64_t step : {5, 10, 15, 20}) save_checkpoint(run, random_checkpoint(step, step), 2);
  auto kept = list_checkpoints(run);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], run + "/step-000015");
  EXPECT_EQ(kept[1], run + "/step-000020");
  // Saving the same step again replaces it.
  Checkpoint again = random_checkpoint(20, 777);
  save_checkpoint(run, again, 2);
  EXPECT_EQ(read_checkpoint(run + "/step-000020").parameters, again.parameters);
  EXPECT_EQ(list_checkpoints(run).size(), 2u);
  // best/ is separate from the step-* rotation.
  Checkpoint best = random_checkpoint(10, 10);
  save_best_checkpoint(run, best);
  save_checkpoint(run, random_checkpoint(25, 25), 1);
  EXPECT_EQ(list_checkpoints(run).size(), 1u);
  EXPECT_EQ(read_checkpoint(run + "/best").parameters, best.parameters);
}

TEST(DataCheckpoint, NotACheckpointIsAOneLineError) {
  std::string run = fresh_dir("not_a_checkpoint");
  fs::create_directories(run + "/empty");
  EXPECT_EQ(error_of([&] { read_checkpoint(run + "/empty"); }),
            run + "/empty: not an xf checkpoint (no checkpoint.txt)");
  EXPECT_EQ(error_of([&] { read_checkpoint(run + "/absent"); }),
            run + "/absent: not an xf checkpoint (not a directory)");
  {
    std::ofstream(run + "/file") << "x";
  }
  EXPECT_EQ(error_of([&] { read_checkpoint(run + "/file"); }),
            run + "/file: not an xf checkpoint (not a directory)");
}

TEST(DataCheckpoint, DamagedCheckpointsAreRefused) {
  std::string run = fresh_dir("damaged");
  std::string path = save_checkpoint(run, random_checkpoint(7, 7), 0);

  // Truncated parameters.
  std::string params = path + "/parameters.bin";
  auto size = fs::file_size(params);
  fs::resize_file(params, size - 8);
  EXPECT_NE(error_of([&] { read_checkpoint(path); }).find("parameters.bin: size"), std::string::npos);

  // A flipped value bit: the checksum catches it.
  path = save_checkpoint(run, random_checkpoint(7, 7), 0);
  {
    std::fstream file(path + "/adam.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    char byte = 0x5a;
    file.write(&byte, 1);
  }
  EXPECT_NE(error_of([&] { read_checkpoint(path); }).find("adam.bin: checksum mismatch"),
            std::string::npos);

  // A missing file.
  path = save_checkpoint(run, random_checkpoint(7, 7), 0);
  fs::remove(path + "/sentencepiece.model");
  EXPECT_EQ(error_of([&] { read_checkpoint(path); }),
            path + ": checkpoint is missing sentencepiece.model");

  // A config that disagrees with the stored parameters.
  path = save_checkpoint(run, random_checkpoint(7, 7), 0);
  {
    auto values = read_key_values(path + "/config.txt");
    values["d_ff"] = "32";
    std::ofstream(path + "/config.txt", std::ios::trunc) << format_key_values(values);
  }
  EXPECT_NE(error_of([&] { read_checkpoint(path); }).find("parameters, config.txt needs"),
            std::string::npos);

  // Another version.
  path = save_checkpoint(run, random_checkpoint(7, 7), 0);
  {
    std::string marker = read_file_bytes(path + "/checkpoint.txt");
    marker.replace(0, marker.find('\n'), "xf-checkpoint 99");
    std::ofstream(path + "/checkpoint.txt", std::ios::trunc) << marker;
  }
  EXPECT_NE(error_of([&] { read_checkpoint(path); }).find("checkpoint version '99' is not supported"),
            std::string::npos);
}

// keep_layers: every tensor of a kept layer is its original layer's, renumbered; the rest as
// before; a stack left empty stays whole; bad indices are refused.
TEST(DataCheckpoint, KeepLayersRenumbersTheKeptLayersTensors) {
  Checkpoint full = random_checkpoint(5, 9);
  full.config.encoder_layers = 4;
  full.config.decoder_layers = 3;
  full.parameters.resize(transformer_parameter_count(full.config));
  std::iota(full.parameters.begin(), full.parameters.end(), 0.0f);
  std::map<std::string, std::vector<float>> original;
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(full.config)) {
    original[spec.name].assign(full.parameters.begin() + offset,
                               full.parameters.begin() + offset + spec.elements());
    offset += spec.elements();
  }

  const Checkpoint kept = keep_layers(full, {0, 2, 3}, {1});
  EXPECT_EQ(kept.config.encoder_layers, 3u);
  EXPECT_EQ(kept.config.decoder_layers, 1u);
  EXPECT_EQ(kept.tokenizer_model, full.tokenizer_model);
  const auto from = [](std::string name) {  // the expected original of each kept tensor
    for (auto [now, was] : std::vector<std::pair<std::string, std::string>>{
             {"encoder.layers.1.", "encoder.layers.2."}, {"encoder.layers.2.", "encoder.layers.3."},
             {"decoder.layers.0.", "decoder.layers.1."}}) {
      if (name.rfind(now, 0) == 0) return was + name.substr(now.size());
    }
    return name;
  };
  offset = 0;
  size_t layer_tensors = 0;
  for (const auto& spec : transformer_parameters(kept.config)) {
    const std::vector<float> values(kept.parameters.begin() + offset,
                                    kept.parameters.begin() + offset + spec.elements());
    EXPECT_EQ(values, original.at(from(spec.name))) << spec.name;
    layer_tensors += spec.name != from(spec.name);
    offset += spec.elements();
  }
  EXPECT_EQ(offset, kept.parameters.size());
  EXPECT_EQ(layer_tensors, 2 * 12u + 20u);  // two encoder layers moved (12 tensors), one decoder

  EXPECT_EQ(keep_layers(full, {}, {}).parameters, full.parameters);
  EXPECT_EQ(error_of([&] { keep_layers(full, {0, 4}, {}); }),
            "the encoder layers to keep must be ascending indices below 4");
  EXPECT_EQ(error_of([&] { keep_layers(full, {}, {1, 0}); }),
            "the decoder layers to keep must be ascending indices below 3");
}

TEST(DataCheckpoint, WriteRefusesMismatchedSizes) {
  Checkpoint c = random_checkpoint(1, 1);
  c.parameters.pop_back();
  EXPECT_THROW(write_checkpoint(fresh_dir("mismatch") + "/step-000001", c), Error);
}

}  // namespace
}  // namespace xf::trainer
