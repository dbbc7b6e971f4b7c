// Training-step throughput of the CUDA trainer: forward_backward + device Adam on random batches
// of a fixed shape, the base model by default (d_model 512, 6+6 layers, d_ff 2048, 8 heads).
// A program, not a test (scripts/gpu_check.sh runs it on a GPU machine).
//   xf_cuda_train_step_bench [--precision f32|mixed-f16] [--steps N] [--batch N] [--length N]
//                            [--d-model N] [--layers N] [--d-ff N] [--heads N] [--vocab N]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "xf/kernels_cuda/check.h"
#include "xf/trainer/cuda_model.h"
#include "xf/trainer/transformer.h"

int main(int argc, char** argv) {
  int steps = 10, batch = 200, length = 32, d_model = 512, layers = 6, d_ff = 2048, heads = 8,
      vocab = 8000;
  xf::trainer::CudaPrecision precision = xf::trainer::CudaPrecision::mixed_f16;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf("usage: xf_cuda_train_step_bench [--precision f32|mixed-f16] [--steps N] "
                  "[--batch N] [--length N] [--d-model N] [--layers N] [--d-ff N] [--heads N] "
                  "[--vocab N]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "xf_cuda_train_step_bench: %s needs a value\n", arg.c_str());
      return 2;
    }
    const std::string text = argv[++i];
    if (arg == "--precision") {
      if (text == "f32") precision = xf::trainer::CudaPrecision::f32;
      else if (text == "mixed-f16") precision = xf::trainer::CudaPrecision::mixed_f16;
      else {
        std::fprintf(stderr, "xf_cuda_train_step_bench: --precision is f32 or mixed-f16\n");
        return 2;
      }
      continue;
    }
    const int value = std::atoi(text.c_str());
    if (value < 1) {
      std::fprintf(stderr, "xf_cuda_train_step_bench: %s must be a positive integer\n",
                   arg.c_str());
      return 2;
    }
    if (arg == "--steps") steps = value;
    else if (arg == "--batch") batch = value;
    else if (arg == "--length") length = value;
    else if (arg == "--d-model") d_model = value;
    else if (arg == "--layers") layers = value;
    else if (arg == "--d-ff") d_ff = value;
    else if (arg == "--heads") heads = value;
    else if (arg == "--vocab") vocab = value;
    else {
      std::fprintf(stderr, "xf_cuda_train_step_bench: unknown option %s\n", arg.c_str());
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
    // Initialized on the host (as xf-train does), then uploaded.
    xf::trainer::TransformerModel host(config, xf::trainer::TrainingOptions{}, 1);
    host.initialize(1);
    xf::trainer::CudaTransformerModel model(config, xf::trainer::TrainingOptions{}, precision);
    model.set_parameters(host.parameters());
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
    std::fprintf(stderr, "%s, %s: %zu parameters; batch %d x (%lld, %lld), %lld source + %lld "
                 "target tokens\n", model.device_name().c_str(), xf::trainer::to_string(precision),
                 model.parameter_count(), batch, (long long)data.source_len,
                 (long long)data.target_len, (long long)data.source_tokens,
                 (long long)data.target_tokens);
    double total = 0;
    int skipped = 0;
    for (int step = 0; step <= steps; ++step) {  // step 0 warms up (arenas, cuBLAS)
      const auto start = std::chrono::steady_clock::now();
      model.zero_gradients();
      const auto sums = model.forward_backward(data, static_cast<uint64_t>(step));
      const auto result = model.adam_step(1e-4, 1.0 / sums.token_count, 0.0);
      XF_CUDA_CHECK(cudaDeviceSynchronize());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) total += seconds;
      skipped += result.applied ? 0 : 1;
      std::fprintf(stderr, "step %d: %.4f s, loss %.4f, loss scale %g%s\n", step, seconds,
                   sums.loss_sum / sums.token_count, result.loss_scale,
                   result.applied ? "" : " (skipped: overflow)");
    }
    const double per_step = total / steps;
    std::printf("%s seconds/step %.4f  target tokens/s %.0f  (source+target) tokens/s %.0f  "
                "skipped steps %d\n", xf::trainer::to_string(precision), per_step,
                data.target_tokens / per_step,
                (data.source_tokens + data.target_tokens) / per_step, skipped);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xf_cuda_train_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
