#pragma once
// What the op contracts in xf/kernels/ share. Each op family has one header here: the contract
// of each op (shapes, layouts, semantics, aliasing, who validates what) written once, then its
// CPU declarations (namespace xf::cpu, kernels_cpu/src/<family>_cpu.cc) and its CUDA ones
// (namespace xf::cuda, kernels_cuda/src/<family>.cu), forward and backward side by side.
//
// Every kernel is a plain function over raw pointers and sizes, with an explicit workspace: no
// tensor classes, no knowledge of layers, no allocation inside a call.
// - CPU: host pointers and the caller's thread count; parallel loops run on xf's worker pool
//   (xf/kernels_cpu/worker_pool.h; oneDNN's products inside it, one OpenMP thread a slice; the
//   trainer's own loops still use OpenMP). Bad input throws xf::Error where a contract
//   says so.
// - CUDA: DEVICE pointers (indices, lengths and offsets too) and a stream; nothing allocates and
//   nothing synchronizes: a call only enqueues work on `stream`. Launch errors throw xf::Error
//   (XF_CUDA_CHECK_LAUNCH, xf/kernels_cuda/check.h); bad sizes throw before anything is launched;
//   ids and indices are validated by the caller on the host. Activations are f32 or f16 (`half`),
//   every reduction (dot products, softmax, LayerNorm statistics) accumulates in f32, and
//   parameters (bias, gamma, beta) have the activations' type.
// - Trainer kernels (a forward that keeps what its backward needs, and the backward): on the CPU
//   templates for float (what xf-train runs) and double (what the finite-difference tests run),
//   so the tests check the very code the trainer uses; on CUDA f32. "+=" outputs accumulate
//   (parameter gradients summed over a batch and over micro-batches), "=" outputs are
//   overwritten. Column reductions (bias, gamma, beta) are split by column on the CPU and summed
//   over fixed row chunks in a fixed order on CUDA, so results do not depend on the thread count
//   or launch shape.
//
// These headers compile without CUDA's (a CPU-only build includes them too): the CUDA names the
// declarations use are declared below exactly as CUDA's headers declare them.
#include <cstddef>
#include <cstdint>

#include "xf/dtype.h"
#include "xf/weight_layout.h"

struct __half;
typedef struct CUstream_st* cudaStream_t;
typedef struct cublasContext* cublasHandle_t;

namespace xf {

// A weight matrix [rows, cols] as stored in a model file: f32, f16, bf16, or int8 with one f32
// scale per row.
struct WeightMatrix {
  DType dtype = DType::f32;
  const void* data = nullptr;
  const float* row_scales = nullptr;  // int8 only
  int64_t rows = 0;
  int64_t cols = 0;
  // How data is arranged (xf/weight_layout.h): rows, or a layout the CPU's StaticMatmul reads in
  // place where reads_layout_in_place() says so. Every other kernel takes rows.
  WeightLayout layout = WeightLayout::rows;
};

// Element strides of a [batch, heads, positions, head_dim] view whose last dimension is
// contiguous. The fused QKV projection output [batch, len, 3*d_model] is such a view with
// head = head_dim, position = 3*d_model; the decoder's K/V cache [batch*beam, heads, max_len,
// head_dim] is another.
struct HeadStrides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t position = 0;
};

// Strides of a contiguous [batch, heads, positions, head_dim] tensor.
inline HeadStrides contiguous_head_strides(int64_t heads, int64_t positions, int64_t head_dim) {
  return HeadStrides{heads * positions * head_dim, positions * head_dim, head_dim};
}

struct AttentionShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t query_len = 0;
  int64_t key_len = 0;
  int64_t head_dim = 0;
};

namespace cpu {
using xf::AttentionShape;
using xf::HeadStrides;
using xf::WeightMatrix;
}  // namespace cpu

namespace cuda {
using half = __half;
using xf::AttentionShape;
using xf::contiguous_head_strides;
using xf::HeadStrides;
}  // namespace cuda

}  // namespace xf
