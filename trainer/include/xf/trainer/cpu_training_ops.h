#pragma once
// TrainingOps on the CPU (training_ops.h): kernels_cpu's training kernels (xf/kernels/, forward
// and backward; oneDNN sgemm for float, plain loops for double) on OpenMP threads, host memory
// throughout. Dropout masks are drawn into a scratch buffer at each use.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "xf/kernels/matmul.h"
#include "xf/trainer/training_ops.h"

namespace xf::trainer {

template <typename T>
class CpuTrainingOps final : public TrainingOps<T> {
 public:
  // threads: OpenMP threads for every op (the caller sizes oneDNN's pool, omp_set_num_threads).
  CpuTrainingOps(size_t parameter_count, int threads);

  // The linear layers' matrix products in bf16 (cpu::Bf16Gemm: inputs rounded to bf16, f32
  // sums, f32 everything else; float only, on a CPU with bf16 instructions), or back in f32.
  void set_bf16_products(bool enabled);
  bool bf16_products() const { return bf16_ != nullptr; }

  T* parameters() override { return parameters_.data(); }
  T* gradients() override { return gradients_.data(); }
  T* reserve_values(size_t count) override;
  size_t value_alignment() const override { return 64; }  // a cache line
  int32_t* reserve_indices(size_t count) override;
  void upload_indices(int32_t* device, const int32_t* host, size_t count) override;
  void reserve_workspace(int64_t rows, int64_t width, const AttentionShape& largest) override;
  int64_t max_key_length() const override { return 0; }

  void copy(T* to, const T* from, int64_t count) override;
  void zero(T* x, int64_t count) override;
  void add(T* out, const T* a, const T* b, int64_t count) override;
  void dropout(T* x, int64_t count, const DropoutDraw& draw) override;
  void bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim) override;
  void bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim, T* dbias) override;
  void ssru_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim, T* cell,
                    T* out) override;
  void ssru_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell, int64_t batch,
                     int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride) override;
  void embedding_forward(const T* table, int64_t vocab, int64_t dim, const int32_t* ids,
                         const int32_t* positions, int64_t count, T scale, T* out) override;
  void embedding_backward(const T* dout, const int32_t* ids, int64_t count, int64_t dim,
                          int64_t vocab, T scale, T* dtable) override;
  void linear_forward(const T* x, const T* weight, const T* bias, int64_t rows, int64_t in,
                      int64_t out, T* y) override;
  void linear_backward(const T* dy, const T* x, const T* weight, int64_t rows, int64_t in,
                       int64_t out, T* dx, bool accumulate_dx, T* dweight, T* dbias) override;
  void layer_norm_forward(const T* x, const T* gamma, const T* beta, float epsilon, int64_t rows,
                          int64_t dim, T* out, T* mean, T* rstd) override;
  void layer_norm_backward(const T* dout, const T* x, const T* mean, const T* rstd,
                           const T* gamma, int64_t rows, int64_t dim, T* dx, T* dgamma,
                           T* dbeta) override;
  void attention_forward(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                         const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                         const AttentionShape& shape, const int32_t* key_lengths,
                         int64_t causal_offset, T* probabilities,
                         const DropoutDraw* dropout) override;
  void attention_backward(const T* dout, HeadStrides dout_strides, const T* q,
                          HeadStrides q_strides, const T* k, HeadStrides k_strides, const T* v,
                          HeadStrides v_strides, const T* probabilities,
                          const DropoutDraw* dropout, T* dq, HeadStrides dq_strides, T* dk,
                          HeadStrides dk_strides, T* dv, HeadStrides dv_strides,
                          const AttentionShape& shape) override;
  void cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                     float smoothing, bool write_gradient, double* row_loss,
                     double* row_nll) override;

 private:
  // The mask of `count` elements of a draw, in mask_ (grown on first need).
  const uint8_t* draw_mask(const DropoutDraw& draw, size_t count);

  int threads_;
  std::vector<T> parameters_, gradients_, values_;
  std::vector<int32_t> indices_;
  std::vector<T> attention_scratch_;  // [threads, 2 * longest sequence]
  std::vector<uint8_t> mask_;
  std::unique_ptr<cpu::Bf16Gemm> bf16_;  // null: f32 products (oneDNN sgemm)
};

extern template class CpuTrainingOps<float>;
extern template class CpuTrainingOps<double>;

}  // namespace xf::trainer
