// Training-step throughput of the CUDA trainer: forward_backward + device Adam on random batches
// of a fixed shape, the base model by default (d_model 512, 6+6 layers, d_ff 2048, 8 heads).
// A program, not a test (scripts/gpu_check.sh runs it on a GPU machine).
//   xf_cuda_train_step_bench [--precision f32|mixed-f16] [--steps N] [--batch N] [--length N]
//                            [--d-model N] [--layers N] [--d-ff N] [--heads N] [--vocab N]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

#include "step_bench.h"
#include "xf/kernels_cuda/check.h"
#include "xf/trainer/cuda_model.h"
#include "xf/trainer/transformer.h"

int main(int argc, char** argv) {
  xf::trainer::bench::StepBenchOptions options;
  options.steps = 10, options.batch = 200, options.d_model = 512, options.layers = 6;
  options.d_ff = 2048, options.heads = 8;
  const int status = xf::trainer::bench::parse_step_bench_options(
      argc, argv, "xf_cuda_train_step_bench", "[--precision f32|mixed-f16] ", options);
  if (status >= 0) return status;
  const int steps = options.steps, batch = options.batch;
  const xf::trainer::CudaPrecision precision = options.precision == "f32"
                                                   ? xf::trainer::CudaPrecision::f32
                                                   : xf::trainer::CudaPrecision::mixed_f16;
  try {
    const xf::ModelConfig config = xf::trainer::bench::step_bench_config(options);
    // Initialized on the host (as xf-train does), then uploaded.
    xf::trainer::TransformerModel host(config, xf::trainer::TrainingOptions{}, 1);
    host.initialize(1);
    xf::trainer::CudaTransformerModel model(config, xf::trainer::TrainingOptions{}, precision);
    model.set_parameters(host.parameters());
    const xf::trainer::Batch data = xf::trainer::bench::step_bench_batch(config, options);
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
