#pragma once
// What the training-step benchmarks share (xf_train_step_bench on the CPU,
// xf_cuda_train_step_bench on a GPU): the command line, the model config and one random batch of
// a fixed shape.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer::bench {

struct StepBenchOptions {
  int threads = 2, steps = 5, batch = 128, length = 32, d_model = 256, layers = 3, d_ff = 1024,
      heads = 4, vocab = 8000;
  std::string precision = "mixed-f16";  // the GPU bench's --precision
};

// Reads argv over `options` (holding the program's defaults). `extra_usage` names the program's
// own options; --threads and --precision are accepted when it lists them. Returns -1 to go on,
// else the exit status (0 after --help, 2 for a bad command line, with one line on stderr).
inline int parse_step_bench_options(int argc, char** argv, const char* program,
                                    const std::string& extra_usage, StepBenchOptions& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("usage: %s %s[--steps N] [--batch N] [--length N] [--d-model N] [--layers N] "
                  "[--d-ff N] [--heads N] [--vocab N]\n", program, extra_usage.c_str());
      return 0;
    }
    const bool known_extra = extra_usage.find(arg + " ") != std::string::npos;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, arg.c_str());
      return 2;
    }
    const std::string text = argv[++i];
    if (arg == "--precision" && known_extra) {
      if (text != "f32" && text != "mixed-f16") {
        std::fprintf(stderr, "%s: --precision is f32 or mixed-f16\n", program);
        return 2;
      }
      options.precision = text;
      continue;
    }
    const int value = std::atoi(text.c_str());
    int* field = arg == "--threads" && known_extra ? &options.threads
                 : arg == "--steps"                ? &options.steps
                 : arg == "--batch"                ? &options.batch
                 : arg == "--length"               ? &options.length
                 : arg == "--d-model"              ? &options.d_model
                 : arg == "--layers"               ? &options.layers
                 : arg == "--d-ff"                 ? &options.d_ff
                 : arg == "--heads"                ? &options.heads
                 : arg == "--vocab"                ? &options.vocab
                                                   : nullptr;
    if (field == nullptr) {
      std::fprintf(stderr, "%s: unknown option %s\n", program, arg.c_str());
      return 2;
    }
    if (value < 1) {
      std::fprintf(stderr, "%s: %s must be a positive integer\n", program, arg.c_str());
      return 2;
    }
    *field = value;
  }
  return -1;
}

inline ModelConfig step_bench_config(const StepBenchOptions& options) {
  ModelConfig config;
  config.source_vocab_size = config.target_vocab_size = static_cast<uint32_t>(options.vocab);
  config.d_model = options.d_model;
  config.num_heads = options.heads;
  config.d_ff = options.d_ff;
  config.encoder_layers = config.decoder_layers = options.layers;
  return config;
}

// Random sentence pairs whose lengths lie between 3/4 of the maximum and the maximum, like a
// length-grouped batch.
inline Batch step_bench_batch(const ModelConfig& config, const StepBenchOptions& options) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> token(4, options.vocab - 1);
  std::uniform_int_distribution<int> len(options.length * 3 / 4, options.length - 1);
  std::vector<std::vector<int32_t>> sources(options.batch), targets(options.batch);
  for (int b = 0; b < options.batch; ++b) {
    sources[b].resize(len(rng));
    targets[b].resize(len(rng));
    for (auto& t : sources[b]) t = token(rng);
    for (auto& t : targets[b]) t = token(rng);
  }
  return make_batch(config, sources, targets);
}

}  // namespace xf::trainer::bench
