#pragma once
// Matrix products through oneDNN.
//
// The runtime uses StaticMatmul: one oneDNN primitive per static shape, made at plan time,
// executed with a user scratchpad (DESIGN.md: runtime-dim primitives and dnnl_sgemm allocate on
// every call). Every execute goes through run_primitive() so a test can count oneDNN's own
// bookkeeping allocations apart from ours.
// The trainer, whose shapes change with every batch, uses gemm().
#include <cstddef>
#include <cstdint>
#include <memory>

#include "xf/kernels_cpu/kernels.h"

namespace dnnl {
class engine;
class stream;
class primitive;
}  // namespace dnnl

namespace xf::cpu {

// One CPU engine and stream for a Translator or trainer.
class CpuEngine {
 public:
  explicit CpuEngine(int threads);
  ~CpuEngine();
  int threads() const { return threads_; }
  dnnl::engine& engine();
  dnnl::stream& stream();

 private:
  int threads_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// y[M, N] = x[M, K] W[N, K]^T (+ bias[N]), for one fixed M. f32 weights use an f32 primitive;
// int8 weights quantize x per tensor (dynamic absmax) into a workspace and use an s8 x s8
// primitive whose output scales combine the row scales of W with x's scale.
// f16 / bf16 weights are not supported here (the converter widens them for the CPU, or the
// Translator does once at load).
class StaticMatmul {
 public:
  StaticMatmul(CpuEngine& engine, int64_t m, const WeightMatrix& weights, bool with_bias);
  ~StaticMatmul();
  StaticMatmul(StaticMatmul&&) noexcept;
  StaticMatmul& operator=(StaticMatmul&&) noexcept;

  int64_t m() const;
  // Bytes of caller-provided memory run() needs (oneDNN scratchpad plus int8 staging).
  size_t workspace_bytes() const;
  // workspace: workspace_bytes() bytes, 64-byte aligned. No allocation by xf inside.
  void run(const float* x, const float* bias, float* y, void* workspace) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when the flag is set.
// For the trainer (dnnl_sgemm; allocates inside oneDNN, so never on the runtime's hot path).
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

// Executes a oneDNN primitive. The single place xf calls execute() from, so an allocation
// counter can attribute what happens inside it to oneDNN.
void run_primitive(const dnnl::primitive& primitive, dnnl::stream& stream, int num_args,
                   const int* arg_ids, void* const* arg_memories);

// Counts of heap allocations made while inside run_primitive() (set by tests and xf-bench
// through an allocation hook; see runtime/include/xf/alloc_counter.h).
bool inside_backend_call();

}  // namespace xf::cpu
