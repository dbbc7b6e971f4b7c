// Training-step throughput of the CPU trainer: forward_backward + Adam on random batches of a
// fixed shape. A program, not a test.
//   xf_train_step_bench [--threads N] [--steps N] [--batch N] [--length N] [--d-model N]
//                       [--layers N] [--d-ff N] [--heads N] [--vocab N]
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>

#include "step_bench.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/transformer.h"

int main(int argc, char** argv) {
  xf::trainer::bench::StepBenchOptions options;
  const int status = xf::trainer::bench::parse_step_bench_options(
      argc, argv, "xf_train_step_bench", "[--threads N] ", options);
  if (status >= 0) return status;
  const int threads = options.threads, steps = options.steps, batch = options.batch;
  try {
    const xf::ModelConfig config = xf::trainer::bench::step_bench_config(options);
    xf::trainer::TransformerModel model(config, xf::trainer::TrainingOptions{}, threads);
    model.initialize(1);
    xf::trainer::Adam adam(model.parameter_count(), xf::trainer::AdamOptions{}, threads);
    const xf::trainer::Batch data = xf::trainer::bench::step_bench_batch(config, options);
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
