// Training-step throughput of the CPU trainer: forward_backward + Adam on random batches of a
// fixed shape. A program, not a test.
//   xf_train_step_bench [--threads N] [--steps N] [--batch N] [--length N] [--d-model N]
//                       [--layers N] [--d-ff N] [--heads N] [--vocab N]
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"

int main(int argc, char** argv) {
  int threads = 2, steps = 5, batch = 128, length = 32, d_model = 256, layers = 3, d_ff = 1024,
      heads = 4, vocab = 8000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("usage: xf_train_step_bench [--threads N] [--steps N] [--batch N] [--length N]"
                  " [--d-model N] [--layers N] [--d-ff N] [--heads N] [--vocab N]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "xf_train_step_bench: %s needs a value\n", arg.c_str());
      return 2;
    }
    const int value = std::atoi(argv[++i]);
    if (value < 1) {
      std::fprintf(stderr, "xf_train_step_bench: %s must be a positive integer\n", arg.c_str());
      return 2;
    }
    if (arg == "--threads") threads = value;
    else if (arg == "--steps") steps = value;
    else if (arg == "--batch") batch = value;
    else if (arg == "--length") length = value;
    else if (arg == "--d-model") d_model = value;
    else if (arg == "--layers") layers = value;
    else if (arg == "--d-ff") d_ff = value;
    else if (arg == "--heads") heads = value;
    else if (arg == "--vocab") vocab = value;
    else {
      std::fprintf(stderr, "xf_train_step_bench: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  try {
    xf::ModelConfig config;
    config.source_vocab_size = config.target_vocab_size = static_cast<uint32_t>(vocab);
    config.d_model = d_model;
    config.num_heads = heads;
    config.d_ff = d_ff;
    config.encoder_layers = config.decoder_layers = layers;
    xf::trainer::TransformerModel model(config, xf::trainer::TrainingOptions{}, threads);
    model.initialize(1);
    xf::trainer::Adam adam(model.parameter_count(), xf::trainer::AdamOptions{}, threads);
    // Lengths between 3/4 of the maximum and the maximum, like a length-grouped batch.
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int32_t> token(4, vocab - 1);
    std::uniform_int_distribution<int> len(length * 3 / 4, length - 1);
    std::vector<std::vector<int32_t>> sources(batch), targets(batch);
    for (int b = 0; b < batch; ++b) {
      sources[b].resize(len(rng));
      targets[b].resize(len(rng));
      for (auto& t : sources[b]) t = token(rng);
      for (auto& t : targets[b]) t = token(rng);
    }
    const xf::trainer::Batch data = xf::trainer::make_batch(config, sources, targets);
    std::fprintf(stderr, "model: %zu parameters; batch %d x (%lld, %lld), %lld source + %lld "
                 "target tokens; %d threads\n", model.parameter_count(), batch,
                 (long long)data.source_len, (long long)data.target_len,
                 (long long)data.source_tokens, (long long)data.target_tokens, threads);
    // Wall time, and process CPU time (all threads): on a shared, loaded machine the CPU time
    // per step is the steadier figure.
    double total = 0, total_cpu = 0;
    for (int step = 0; step <= steps; ++step) {  // step 0 warms up (arenas, oneDNN)
      const auto start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();
      model.zero_gradients();
      const auto sums = model.forward_backward(data, step);
      adam.step(model.parameters(), model.gradients(), 1e-4, 1.0 / sums.token_count);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
      if (step > 0) total += seconds, total_cpu += cpu_seconds;
      std::fprintf(stderr, "step %d: %.3f s (cpu %.3f s), loss %.4f\n", step, seconds,
                   cpu_seconds, sums.loss_sum / sums.token_count);
    }
    const double per_step = total / steps;
    std::printf("seconds/step %.4f  target tokens/s %.0f  (source+target) tokens/s %.0f  "
                "cpu seconds/step %.4f\n", per_step, data.target_tokens / per_step,
                (data.source_tokens + data.target_tokens) / per_step, total_cpu / steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xf_train_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
