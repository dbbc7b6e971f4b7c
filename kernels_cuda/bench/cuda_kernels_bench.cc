// cuda_kernels_bench: times each CUDA kernel at the shapes of one decoder step and one encoder
// pass of a base-size model (d_model 512, 8 heads, d_ff 2048, vocabulary 32000), f32 and f16,
// with CUDA events. A program, not a test (DESIGN.md); scripts/gpu_check.sh runs it.
//
//   cuda_kernels_bench [--rows N] [--source-len N] [--step N] [--iterations N]
//
// rows = batch x beam of a decoder step (default 128: batch 32, beam 4). Prints one line per
// kernel: name, dtype, shape, microseconds per call (mean over the iterations after a warm-up).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "xf/error.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/memory.h"

namespace {

using xf::cuda::half;

struct Options {
  int64_t rows = 128;
  int64_t source_len = 64;
  int64_t step = 50;
  int iterations = 200;
};

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::printf("cuda_kernels_bench [--rows N] [--source-len N] [--step N] [--iterations N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw xf::Error("option " + flag + " needs a value");
    const long value = std::strtol(argv[++i], nullptr, 10);
    if (value <= 0) throw xf::Error("option " + flag + " needs a positive integer");
    if (flag == "--rows") options.rows = value;
    else if (flag == "--source-len") options.source_len = value;
    else if (flag == "--step") options.step = value;
    else if (flag == "--iterations") options.iterations = static_cast<int>(value);
    else throw xf::Error("unknown option " + flag + " (see --help)");
  }
  return options;
}

// Times `launch` (which enqueues on `stream`) and prints microseconds per call.
void time_kernel(const char* name, const char* dtype, const std::string& shape,
                 cudaStream_t stream, int iterations, const std::function<void()>& launch) {
  for (int i = 0; i < 5; ++i) launch();
  cudaEvent_t start, stop;
  XF_CUDA_CHECK(cudaEventCreate(&start));
  XF_CUDA_CHECK(cudaEventCreate(&stop));
  XF_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i) launch();
  XF_CUDA_CHECK(cudaEventRecord(stop, stream));
  XF_CUDA_CHECK(cudaEventSynchronize(stop));
  float milliseconds = 0.0f;
  XF_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
  XF_CUDA_CHECK(cudaEventDestroy(start));
  XF_CUDA_CHECK(cudaEventDestroy(stop));
  std::printf("%-28s %-4s %-34s %10.2f us\n", name, dtype, shape.c_str(),
              1000.0 * milliseconds / iterations);
}

std::string dims(std::initializer_list<int64_t> values) {
  std::string text;
  for (const int64_t v : values) text += (text.empty() ? "" : "x") + std::to_string(v);
  return text;
}

// Every kernel of one decoder step and one encoder layer for activation type T.
template <typename T>
void bench_dtype(const char* dtype, const Options& o, cublasHandle_t cublas, cudaStream_t stream) {
  constexpr int64_t d_model = 512, heads = 8, head_dim = 64, d_ff = 2048, vocab = 32000;
  const int64_t rows = o.rows, max_len = o.step + 1, src = o.source_len;
  const int64_t encoder_rows = (rows / 4 > 0 ? rows / 4 : 1) * src;  // batch x source_len
  const int64_t largest = std::max<int64_t>({rows * vocab, rows * heads * max_len * head_dim,
                                             rows * heads * src * head_dim,
                                             encoder_rows * 3 * d_model, encoder_rows * d_ff,
                                             vocab * d_model});
  // Buffers hold zeros: timings do not depend on the values.
  xf::cuda::DeviceArena arena(6 * largest * sizeof(float) + 64 * xf::cuda::kArenaAlignment +
                              xf::cuda::cached_attention_workspace_bytes(rows, heads, head_dim,
                                                                         max_len));
  XF_CUDA_CHECK(cudaMemset(arena.base(), 0, arena.capacity()));
  T* a = arena.allocate_array<T>(largest);
  T* b = arena.allocate_array<T>(largest);
  T* c = arena.allocate_array<T>(largest);
  T* k_cache = arena.allocate_array<T>(rows * heads * max_len * head_dim);
  T* v_cache = arena.allocate_array<T>(rows * heads * max_len * head_dim);
  float* logits = arena.allocate_array<float>(rows * vocab);
  float* top_values = arena.allocate_array<float>(rows * 4);
  int32_t* top_indices = arena.allocate_array<int32_t>(rows * 4);
  int32_t* ids = arena.allocate_array<int32_t>(std::max(rows, encoder_rows));
  int32_t* lengths = arena.allocate_array<int32_t>(rows);
  void* attention_workspace = arena.allocate(
      xf::cuda::cached_attention_workspace_bytes(rows, heads, head_dim, max_len));
  const int iterations = o.iterations;

  // The step's matrix products: self-attention QKV, output, FFN in and out, vocabulary logits.
  struct Product {
    const char* name;
    int64_t m, n, k;
  };
  for (const Product& p : {Product{"matmul qkv", rows, 3 * d_model, d_model},
                           Product{"matmul attention out", rows, d_model, d_model},
                           Product{"matmul ffn in", rows, d_ff, d_model},
                           Product{"matmul ffn out", rows, d_model, d_ff},
                           Product{"matmul logits", rows, vocab, d_model},
                           Product{"matmul encoder qkv", encoder_rows, 3 * d_model, d_model}}) {
    time_kernel(p.name, dtype, "cublas " + dims({p.m, p.n, p.k}), stream, iterations,
                [&] { xf::cuda::matmul(cublas, a, b, c, p.m, p.n, p.k); });
  }
  if constexpr (std::is_same_v<T, half>) {
    time_kernel("matmul logits f32 out", dtype, "cublas " + dims({rows, vocab, d_model}), stream,
                iterations, [&] { xf::cuda::matmul(cublas, a, b, logits, rows, vocab, d_model); });
  }

  time_kernel("embed", dtype, dims({rows, d_model}), stream, iterations, [&] {
    xf::cuda::embed(a, vocab, d_model, ids, ids, rows, 22.6f, c, stream);
  });
  time_kernel("bias_residual_layer_norm", dtype, dims({rows, d_model}), stream, iterations, [&] {
    xf::cuda::add_bias_residual_layer_norm(a, b, c, b, b, 1e-6f, rows, d_model, c, nullptr,
                                           nullptr, stream);
  });
  time_kernel("bias_relu", dtype, dims({rows, d_ff}), stream, iterations,
              [&] { xf::cuda::bias_relu(c, b, rows, d_ff, stream); });
  xf::cuda::SplitHeadsOutputs<T> split;
  split.data[0] = c;
  split.data[1] = k_cache;
  split.data[2] = v_cache;
  split.strides[0] = xf::cuda::contiguous_head_strides(heads, 1, head_dim);
  split.strides[1] = split.strides[2] = xf::cuda::contiguous_head_strides(heads, max_len, head_dim);
  time_kernel("split_heads into cache", dtype, dims({rows, 3 * d_model}), stream, iterations, [&] {
    xf::cuda::add_bias_split_heads(a, 3 * d_model, b, 3, rows, 1, heads, head_dim, split,
                                   o.step, stream);
  });
  time_kernel("cached_attention", dtype, dims({rows, heads, o.step + 1, head_dim}), stream, iterations,
              [&] {
                xf::cuda::cached_attention(a, 3 * d_model, k_cache, v_cache, split.strides[1],
                                           rows, heads, head_dim, max_len, o.step, c, d_model,
                                           attention_workspace, stream);
              });
  XF_CUDA_CHECK(cudaMemsetAsync(lengths, 0x7f, rows * sizeof(int32_t), stream));  // no padding
  const xf::cuda::AttentionShape cross{rows, heads, 1, src, head_dim};
  const xf::cuda::HeadStrides query{d_model, head_dim, d_model};
  const xf::cuda::HeadStrides memory = xf::cuda::contiguous_head_strides(heads, src, head_dim);
  time_kernel("cross attention", dtype, dims({rows, heads, src, head_dim}), stream, iterations, [&] {
    xf::cuda::attention(a, query, b, memory, b, memory, c, query, cross, lengths, -1, nullptr,
                        stream);
  });
  const int64_t batch = encoder_rows / src;
  const xf::cuda::AttentionShape encoder{batch, heads, src, src, head_dim};
  const xf::cuda::HeadStrides packed{src * 3 * d_model, head_dim, 3 * d_model};
  const xf::cuda::HeadStrides out{src * d_model, head_dim, d_model};
  time_kernel("encoder attention", dtype, dims({batch, heads, src, src, head_dim}), stream, iterations,
              [&] {
                xf::cuda::attention(a, packed, a + d_model, packed, a + 2 * d_model, packed, c,
                                    out, encoder, lengths, -1, nullptr, stream);
              });
  time_kernel("log_softmax_top_k k=4", dtype, dims({rows, vocab}), stream, iterations, [&] {
    if constexpr (std::is_same_v<T, float>) {
      xf::cuda::log_softmax_top_k(logits, nullptr, rows, vocab, 4, top_values, top_indices,
                                  stream);
    } else {
      xf::cuda::log_softmax_top_k(a, nullptr, rows, vocab, 4, top_values, top_indices, stream);
    }
  });
  XF_CUDA_CHECK(cudaMemsetAsync(ids, 0, rows * sizeof(int32_t), stream));
  const int64_t cache_row = heads * max_len * head_dim;
  time_kernel("gather K/V cache rows", dtype, dims({rows, cache_row}), stream, iterations, [&] {
    xf::cuda::gather_rows(k_cache, cache_row, ids, rows, cache_row, c, cache_row, stream);
  });
  XF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_options(argc, argv);
    int device = 0;
    XF_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp properties{};
    XF_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    std::printf("device %s (sm %d%d), rows %lld, source_len %lld, step %lld, %d iterations\n",
                properties.name, properties.major, properties.minor,
                static_cast<long long>(options.rows), static_cast<long long>(options.source_len),
                static_cast<long long>(options.step), options.iterations);
    cudaStream_t stream;
    XF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t cublas;
    XF_CUBLAS_CHECK(cublasCreate(&cublas));
    const size_t workspace_bytes = xf::cuda::recommended_cublas_workspace_bytes(device);
    void* workspace = xf::cuda::device_malloc(workspace_bytes);
    xf::cuda::bind_cublas_handle(cublas, stream, workspace, workspace_bytes);
    bench_dtype<float>("f32", options, cublas, stream);
    bench_dtype<half>("f16", options, cublas, stream);
    xf::cuda::device_free(workspace);
    XF_CUBLAS_CHECK(cublasDestroy(cublas));
    XF_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", error.what());
    return 1;
  }
}
