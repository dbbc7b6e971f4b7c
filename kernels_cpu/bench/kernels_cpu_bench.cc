// Google Benchmark program for the CPU kernels at the Transformer-base shapes (d_model 512,
// 8 heads, d_ff 2048, vocabulary 32000): matmuls at decode-step row counts and our own kernels.
// A program, never a test: build target xf-kernels-bench, run with OMP_NUM_THREADS=<threads>.
// Arguments are the rows (M) or the batch; docs/KERNELS_CPU.md has figures from this machine.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/softmax.h"

namespace {

using namespace xf::cpu;

std::vector<float> random_values(size_t count, float range = 1.0f) {
  std::mt19937 engine(42);
  std::uniform_real_distribution<float> distribution(-range, range);
  std::vector<float> values(count);
  for (float& v : values) v = distribution(engine);
  return values;
}

int threads() { return omp_get_max_threads(); }

// range(0): M, range(1): N, range(2): K, range(3): 0 f32 packed, 1 f32 stored layout, 2 int8.
void BM_StaticMatmul(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int variant = static_cast<int>(state.range(3));
  const std::vector<float> weights = random_values(n * k);
  std::vector<int8_t> quantized(n * k);
  std::vector<float> scales(n);
  quantize_int8_per_row(weights.data(), n, k, quantized.data(), scales.data(), threads());
  CpuEngine engine(threads());
  engine.set_weight_packing(variant == 0);
  const WeightMatrix matrix =
      variant == 2 ? WeightMatrix{xf::DType::int8, quantized.data(), scales.data(), n, k}
                   : WeightMatrix{xf::DType::f32, weights.data(), nullptr, n, k};
  StaticMatmul matmul(engine, m, matrix, true);
  std::vector<float> workspace(matmul.workspace_bytes() / sizeof(float) + 16);
  const std::vector<float> x = random_values(m * k), bias = random_values(n);
  std::vector<float> y(m * n);
  for (auto _ : state) {
    matmul.run(x.data(), bias.data(), y.data(), workspace.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetLabel(matmul.implementation());
}

void matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int variant : {0, 1, 2}) {
    for (auto [n, k] : {std::pair{512, 512}, {1536, 512}, {2048, 512}, {512, 2048}, {32000, 512}}) {
      for (int m : {1, 4, 32, 128, 256}) b->Args({m, n, k, variant});
    }
  }
}
BENCHMARK(BM_StaticMatmul)->Apply(matmul_shapes)->Unit(benchmark::kMicrosecond);

// Int8 products of translating one sentence with the bundled model (d_model 256, d_ff 1024,
// 8,446 output pieces): the decoder's step (1 row) and the encoder of a short source (10, 16).
void bundled_int8_shapes(benchmark::internal::Benchmark* b) {
  for (auto [n, k] : {std::pair{768, 256}, {256, 1024}, {1024, 256}, {8446, 256}}) {
    for (int m : {1, 10, 16, 32, 128}) b->Args({m, n, k, 2});
  }
}
BENCHMARK(BM_StaticMatmul)
    ->Name("BM_StaticMatmulBundledInt8")
    ->Apply(bundled_int8_shapes)
    ->Unit(benchmark::kMicrosecond);

// The same shapes in f32 (packed weights), up to batch 32 x beam 4 rows.
void bundled_f32_shapes(benchmark::internal::Benchmark* b) {
  for (auto [n, k] : {std::pair{768, 256}, {256, 1024}, {1024, 256}, {8446, 256}}) {
    for (int m : {1, 4, 32, 128}) b->Args({m, n, k, 0});
  }
}
BENCHMARK(BM_StaticMatmul)
    ->Name("BM_StaticMatmulBundledF32")
    ->Apply(bundled_f32_shapes)
    ->Unit(benchmark::kMicrosecond);

// The bundled model's decoder-step products with the weights cold, as in a translation: a step
// reads every layer's weights (16 MB in f32) once, so they come from L3 or memory, not L2 as in
// the loops above. Each iteration runs the next of `copies` copies of the weights (40 x 768 KB,
// 8 x 8.6 MB: more than L2). range(3): 0 f32 packed, 2 int8; range(4): copies.
void BM_StaticMatmulCold(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool int8 = state.range(3) == 2;
  const int64_t copies = state.range(4);
  CpuEngine engine(threads());
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<int8_t>> quantized(copies, std::vector<int8_t>(n * k));
  std::vector<std::vector<float>> scales(copies, std::vector<float>(n));
  std::vector<std::unique_ptr<StaticMatmul>> matmuls;
  for (int64_t c = 0; c < copies; ++c) {
    weights.push_back(random_values(n * k));
    weights.back()[0] += static_cast<float>(c);  // distinct matrices: no shared packed copy
    quantize_int8_per_row(weights[c].data(), n, k, quantized[c].data(), scales[c].data(),
                          threads());
    const WeightMatrix matrix =
        int8 ? WeightMatrix{xf::DType::int8, quantized[c].data(), scales[c].data(), n, k}
             : WeightMatrix{xf::DType::f32, weights[c].data(), nullptr, n, k};
    matmuls.push_back(std::make_unique<StaticMatmul>(engine, m, matrix, true));
  }
  std::vector<float> workspace(matmuls[0]->workspace_bytes() / sizeof(float) + 16);
  const std::vector<float> x = random_values(m * k), bias = random_values(n);
  std::vector<float> y(m * n);
  int64_t next = 0;
  for (auto _ : state) {
    matmuls[next]->run(x.data(), bias.data(), y.data(), workspace.data());
    next = (next + 1) % copies;
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetLabel(matmuls[0]->implementation());
}

void bundled_cold_shapes(benchmark::internal::Benchmark* b) {
  for (int variant : {0, 2}) {
    for (auto [n, k, copies] : {std::tuple{768, 256, 40}, {256, 1024, 40}, {8446, 256, 8}}) {
      for (int m : {4, 24, 104, 128}) b->Args({m, n, k, variant, copies});
    }
  }
}
BENCHMARK(BM_StaticMatmulCold)->Apply(bundled_cold_shapes)->Unit(benchmark::kMicrosecond);

// The FFN's second product over a ReLU's output (SparseInputMatmul) at the bundled model's shape
// (N 256, K 1024), with `copies` distinct weight matrices taken in turn (40: cold, as in a
// translation; 1: warm). range(0): M, range(1): percent of x nonzero, range(2): copies.
// GFLOP/s counts the dense product's work, to compare with BM_StaticMatmulCold's.
void BM_SparseInputMatmul(benchmark::State& state) {
  const int64_t m = state.range(0), n = 256, k = 1024, percent = state.range(1), copies = state.range(2);
  std::vector<std::unique_ptr<SparseInputMatmul>> products;
  for (int64_t c = 0; c < copies; ++c) {
    std::vector<float> weights = random_values(n * k);
    products.push_back(std::make_unique<SparseInputMatmul>(WeightMatrix{xf::DType::f32, weights.data(), nullptr, n, k},
                                                           threads()));
  }
  std::vector<float> x = random_values(m * k);
  std::mt19937 engine(7);
  std::uniform_int_distribution<int> hundred(0, 99);
  for (float& v : x) v = hundred(engine) < percent ? std::abs(v) : 0.0f;
  std::vector<float> workspace(products[0]->workspace_bytes() / sizeof(float) + 16);
  std::vector<float> y(m * n);
  int64_t next = 0;
  for (auto _ : state) {
    products[next]->run(x.data(), y.data(), m, workspace.data());
    next = (next + 1) % copies;
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_SparseInputMatmul)
    ->ArgsProduct({{4, 128}, {8, 20, 60}, {1, 40}})
    ->Unit(benchmark::kMicrosecond);

// The trainer's products (gemm, and Bf16Gemm for xf-train --bf16) at the bundled model's shapes:
// 2,500-token batches, d_model 256, d_ff 1024, vocabulary 8000. range(3): 0 f32, 1 bf16;
// range(4): 1 for the weight gradient's layout (A transposed: dW = dy^T x, K = the tokens).
void BM_TrainerGemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool bf16 = state.range(3) == 1, transpose_a = state.range(4) == 1;
  if (bf16 && !bf16_products_in_hardware()) {
    state.SkipWithError("this CPU has no bf16 instructions");
    return;
  }
  const std::vector<float> a = random_values(m * k), b = random_values(n * k);
  std::vector<float> c(m * n);
  std::unique_ptr<Bf16Gemm> bf16_gemm;
  if (bf16) bf16_gemm = std::make_unique<Bf16Gemm>(threads());
  // A: [m, k] (or [k, m] transposed); B: [n, k], read transposed as in y = x W^T.
  const int64_t lda = transpose_a ? m : k;
  for (auto _ : state) {
    if (bf16) {
      bf16_gemm->run(transpose_a, true, m, n, k, 1.0f, a.data(), lda, b.data(), k, 0.0f, c.data(),
                     n);
    } else {
      gemm(transpose_a, true, m, n, k, 1.0f, a.data(), lda, b.data(), k, 0.0f, c.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  if (bf16) state.SetLabel(bf16_gemm->implementation());
}

void trainer_gemm_shapes(benchmark::internal::Benchmark* b) {
  for (int bf16 : {0, 1}) {
    for (auto [m, n, k] : {std::tuple{2500, 768, 256}, {2500, 1024, 256}, {2500, 256, 1024},
                           {2500, 8000, 256}}) {
      b->Args({m, n, k, bf16, 0});
    }
    b->Args({1024, 256, 2500, bf16, 1});  // dW of the FFN's second layer
  }
}
BENCHMARK(BM_TrainerGemm)->Apply(trainer_gemm_shapes)->Unit(benchmark::kMicrosecond);

// Decoder self-attention step: range(0) = batch*beam rows, range(1) = step (keys step+1).
void BM_AttentionDecodeStep(benchmark::State& state) {
  const int64_t batch = state.range(0), step = state.range(1), heads = 8, head_dim = 64,
                max_len = 256, d_model = 512;
  const std::vector<float> cache = random_values(batch * heads * max_len * head_dim);
  const std::vector<float> query = random_values(batch * d_model);
  std::vector<float> out(batch * d_model), scratch(threads() * max_len);
  const HeadStrides cache_strides{heads * max_len * head_dim, max_len * head_dim, head_dim};
  const HeadStrides row_strides{d_model, head_dim, d_model};
  for (auto _ : state) {
    attention(query.data(), row_strides, cache.data(), cache_strides, cache.data(), cache_strides,
              out.data(), row_strides, {batch, heads, 1, step + 1, head_dim}, nullptr, step,
              nullptr, scratch.data(), threads());
  }
  state.counters["rows/s"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionDecodeStep)
    ->Args({1, 30})
    ->Args({128, 30})
    ->Args({128, 100})
    ->Unit(benchmark::kMicrosecond);

// Encoder self-attention over the fused QKV output: range(0) = batch, range(1) = length.
void BM_AttentionEncoder(benchmark::State& state) {
  const int64_t batch = state.range(0), len = state.range(1), heads = 8, head_dim = 64,
                d_model = 512;
  const std::vector<float> qkv = random_values(batch * len * 3 * d_model);
  std::vector<float> out(batch * len * d_model), scratch(threads() * len);
  std::vector<int32_t> lengths(batch, static_cast<int32_t>(len));
  const HeadStrides qkv_strides{len * 3 * d_model, head_dim, 3 * d_model};
  const HeadStrides out_strides{len * d_model, head_dim, d_model};
  for (auto _ : state) {
    attention(qkv.data(), qkv_strides, qkv.data() + d_model, qkv_strides, qkv.data() + 2 * d_model,
              qkv_strides, out.data(), out_strides, {batch, heads, len, len, head_dim},
              lengths.data(), -1, nullptr, scratch.data(), threads());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * batch * heads * len * len * head_dim,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
// Decoder cross-attention step: the beams of a sentence are its queries ([sentences, beam,
// d_model]) against the sentence's source K/V ([sentences, len, 2 * d_model]).
void BM_AttentionCrossStep(benchmark::State& state) {
  const int64_t sentences = state.range(0), beam = 4, len = state.range(1), heads = 8,
                head_dim = 64, d_model = 512;
  const std::vector<float> kv = random_values(sentences * len * 2 * d_model);
  const std::vector<float> query = random_values(sentences * beam * d_model);
  std::vector<float> out(query.size()), scratch(threads() * len);
  std::vector<int32_t> lengths(sentences, static_cast<int32_t>(len));
  const HeadStrides kv_strides{len * 2 * d_model, head_dim, 2 * d_model};
  const HeadStrides query_strides{beam * d_model, head_dim, d_model};
  for (auto _ : state) {
    attention(query.data(), query_strides, kv.data(), kv_strides, kv.data() + d_model, kv_strides,
              out.data(), query_strides, {sentences, heads, beam, len, head_dim}, lengths.data(),
              -1, nullptr, scratch.data(), threads());
  }
}
BENCHMARK(BM_AttentionCrossStep)->Args({32, 30})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_AttentionEncoder)->Args({1, 30})->Args({32, 40})->Unit(benchmark::kMicrosecond);

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = 512;
  const std::vector<float> x = random_values(rows * dim), residual = random_values(rows * dim),
                           bias = random_values(dim), gamma = random_values(dim),
                           beta = random_values(dim);
  std::vector<float> out(rows * dim);
  for (auto _ : state) {
    add_bias_residual_layer_norm(x.data(), bias.data(), residual.data(), gamma.data(), beta.data(),
                                 1e-6f, rows, dim, out.data(), nullptr, nullptr, threads());
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * 3 * sizeof(float));
}
BENCHMARK(BM_LayerNorm)->Arg(1)->Arg(128)->Arg(4096)->Unit(benchmark::kMicrosecond);

void BM_LogSoftmaxTopK(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = 32000, k = 4;
  const std::vector<float> logits = random_values(rows * vocab, 10.0f),
                           offsets = random_values(rows);
  std::vector<float> values(rows * k);
  std::vector<int32_t> indices(rows * k);
  for (auto _ : state) {
    log_softmax_top_k(logits.data(), offsets.data(), rows, vocab, k, values.data(), indices.data(),
                      threads());
  }
  state.SetBytesProcessed(state.iterations() * rows * vocab * sizeof(float));
}
BENCHMARK(BM_LogSoftmaxTopK)->Arg(1)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_Embed(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = 32000, dim = 512;
  const std::vector<float> table = random_values(vocab * dim);
  std::vector<int32_t> ids(rows), positions(rows);
  // range(1) = 1: every row at one position (a decode step); 0: positions 0..99 (a batch).
  for (int64_t i = 0; i < rows; ++i) {
    ids[i] = static_cast<int32_t>((i * 7919) % vocab);
    positions[i] = static_cast<int32_t>(state.range(1) == 1 ? 17 : i % 100);
  }
  std::vector<float> out(rows * dim);
  const WeightMatrix matrix{xf::DType::f32, table.data(), nullptr, vocab, dim};
  for (auto _ : state)
    embed(matrix, ids.data(), positions.data(), rows, std::sqrt(512.0f), out.data(), threads());
}
BENCHMARK(BM_Embed)->Args({1, 1})->Args({128, 1})->Args({128, 0})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
