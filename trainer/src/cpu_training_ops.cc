// TrainingOps on the CPU over kernels_cpu (cpu_training_ops.h).
#include "xf/trainer/cpu_training_ops.h"

#include <algorithm>
#include <type_traits>

#include "xf/error.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/recurrent.h"
#include "xf/kernels/dropout.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/matmul.h"
#include "xf/kernels/softmax.h"

namespace xf::trainer {

template <typename T>
CpuTrainingOps<T>::CpuTrainingOps(size_t parameter_count, int threads)
    : threads_(threads), parameters_(parameter_count, T(0)), gradients_(parameter_count, T(0)) {
  if (threads < 1) throw Error("transformer: threads must be >= 1");
}

template <typename T>
void CpuTrainingOps<T>::set_bf16_products(bool enabled) {
  if (!enabled) {
    bf16_.reset();
  } else if (!bf16_) {
    if (!std::is_same_v<T, float>) throw Error("transformer: bf16 products are for float models");
    bf16_ = std::make_unique<cpu::Bf16Gemm>(threads_);
  }
}

template <typename T>
T* CpuTrainingOps<T>::reserve_values(size_t count) {
  if (values_.size() < count) values_.resize(count);
  return values_.data();
}

template <typename T>
int32_t* CpuTrainingOps<T>::reserve_indices(size_t count) {
  if (indices_.size() < count) indices_.resize(count);
  return indices_.data();
}

template <typename T>
void CpuTrainingOps<T>::upload_indices(int32_t* device, const int32_t* host, size_t count) {
  std::copy(host, host + count, device);
}

template <typename T>
void CpuTrainingOps<T>::reserve_workspace(int64_t, int64_t, const AttentionShape& largest) {
  const size_t scratch =
      static_cast<size_t>(threads_ * 2 * std::max(largest.query_len, largest.key_len));
  if (attention_scratch_.size() < scratch) attention_scratch_.resize(scratch);
}

template <typename T>
void CpuTrainingOps<T>::copy(T* to, const T* from, int64_t count) {
  std::copy(from, from + count, to);
}

template <typename T>
void CpuTrainingOps<T>::zero(T* x, int64_t count) {
  std::fill(x, x + count, T(0));
}

template <typename T>
void CpuTrainingOps<T>::add(T* out, const T* a, const T* b, int64_t count) {
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template <typename T>
const uint8_t* CpuTrainingOps<T>::draw_mask(const DropoutDraw& draw, size_t count) {
  if (mask_.size() < count) mask_.resize(count);
  cpu::make_dropout_mask(draw.seed, draw.site, count, draw.p, mask_.data(), threads_,
                         draw.first_index);
  return mask_.data();
}

namespace {
template <typename T>
T keep_scale(float p) {
  return static_cast<T>(1.0 / (1.0 - p));
}
}  // namespace

template <typename T>
void CpuTrainingOps<T>::dropout(T* x, int64_t count, const DropoutDraw& draw) {
  const size_t n = static_cast<size_t>(count);
  cpu::apply_dropout(x, draw_mask(draw, n), n, keep_scale<T>(draw.p), threads_);
}

template <typename T>
void CpuTrainingOps<T>::bias_relu_forward(T* x, const T* bias, int64_t rows, int64_t dim) {
  cpu::bias_relu_forward(x, bias, rows, dim, threads_);
}

template <typename T>
void CpuTrainingOps<T>::bias_relu_backward(T* dy, const T* y, int64_t rows, int64_t dim,
                                           T* dbias) {
  cpu::bias_relu_backward(dy, y, rows, dim, dbias, threads_);
}

template <typename T>
void CpuTrainingOps<T>::ssru_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len,
                                     int64_t dim, T* cell, T* out) {
  cpu::ssru_scan_forward(x, f, in_stride, batch, len, dim, cell, out, threads_);
}

template <typename T>
void CpuTrainingOps<T>::ssru_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell,
                                      int64_t batch, int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride) {
  cpu::ssru_scan_backward(dout, x, f, in_stride, cell, batch, len, dim, dx, df, d_stride, threads_);
}

template <typename T>
void CpuTrainingOps<T>::embedding_forward(const T* table, int64_t vocab, int64_t dim,
                                          const int32_t* ids, const int32_t* positions,
                                          int64_t count, T scale, T* out) {
  cpu::embedding_forward(table, vocab, dim, ids, positions, count, scale, out, threads_);
}

template <typename T>
void CpuTrainingOps<T>::embedding_backward(const T* dout, const int32_t* ids, int64_t count,
                                           int64_t dim, int64_t, T scale, T* dtable) {
  cpu::embedding_backward(dout, ids, count, dim, scale, dtable, threads_);
}

template <typename T>
void CpuTrainingOps<T>::linear_forward(const T* x, const T* weight, const T* bias, int64_t rows,
                                       int64_t in, int64_t out, T* y) {
  cpu::linear_forward(x, weight, bias, rows, in, out, y, threads_, bf16_.get());
}

template <typename T>
void CpuTrainingOps<T>::linear_backward(const T* dy, const T* x, const T* weight, int64_t rows,
                                        int64_t in, int64_t out, T* dx, bool accumulate_dx,
                                        T* dweight, T* dbias) {
  cpu::linear_backward(dy, x, weight, rows, in, out, dx, accumulate_dx, dweight, dbias, threads_,
                       bf16_.get());
}

template <typename T>
void CpuTrainingOps<T>::layer_norm_forward(const T* x, const T* gamma, const T* beta,
                                           float epsilon, int64_t rows, int64_t dim, T* out,
                                           T* mean, T* rstd) {
  cpu::layer_norm_forward(x, gamma, beta, static_cast<T>(epsilon), rows, dim, out, mean, rstd,
                          threads_);
}

template <typename T>
void CpuTrainingOps<T>::layer_norm_backward(const T* dout, const T* x, const T* mean,
                                            const T* rstd, const T* gamma, int64_t rows,
                                            int64_t dim, T* dx, T* dgamma, T* dbeta) {
  cpu::layer_norm_backward(dout, x, mean, rstd, gamma, rows, dim, dx, dgamma, dbeta, threads_);
}

template <typename T>
void CpuTrainingOps<T>::attention_forward(const T* q, HeadStrides q_strides, const T* k,
                                          HeadStrides k_strides, const T* v,
                                          HeadStrides v_strides, T* out, HeadStrides out_strides,
                                          const AttentionShape& shape, const int32_t* key_lengths,
                                          int64_t causal_offset, T* probabilities,
                                          const DropoutDraw* dropout) {
  const size_t count =
      static_cast<size_t>(shape.batch * shape.heads * shape.query_len * shape.key_len);
  cpu::attention_forward(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape,
                         key_lengths, causal_offset, probabilities,
                         dropout ? draw_mask(*dropout, count) : nullptr,
                         keep_scale<T>(dropout ? dropout->p : 0.0f), attention_scratch_.data(),
                         threads_);
}

template <typename T>
void CpuTrainingOps<T>::attention_backward(const T* dout, HeadStrides dout_strides, const T* q,
                                           HeadStrides q_strides, const T* k,
                                           HeadStrides k_strides, const T* v,
                                           HeadStrides v_strides, const T* probabilities,
                                           const DropoutDraw* dropout, T* dq,
                                           HeadStrides dq_strides, T* dk, HeadStrides dk_strides,
                                           T* dv, HeadStrides dv_strides,
                                           const AttentionShape& shape) {
  const size_t count =
      static_cast<size_t>(shape.batch * shape.heads * shape.query_len * shape.key_len);
  cpu::attention_backward(dout, dout_strides, q, q_strides, k, k_strides, v, v_strides,
                          probabilities, dropout ? draw_mask(*dropout, count) : nullptr,
                          keep_scale<T>(dropout ? dropout->p : 0.0f), dq, dq_strides, dk,
                          dk_strides, dv, dv_strides, shape, attention_scratch_.data(), threads_);
}

template <typename T>
void CpuTrainingOps<T>::cross_entropy(T* logits, const int32_t* targets, int64_t rows,
                                      int64_t vocab, float smoothing, bool write_gradient,
                                      double* row_loss, double* row_nll) {
  cpu::label_smoothed_cross_entropy(logits, targets, rows, vocab, static_cast<T>(smoothing), -1,
                                    write_gradient, row_loss, row_nll, threads_);
}

template class CpuTrainingOps<float>;
template class CpuTrainingOps<double>;

}  // namespace xf::trainer
