#pragma once
// log_softmax over rows: alone, followed by the row's best entries (the search), or as the
// label-smoothed cross-entropy with its gradient (the trainer's loss).
//
// log_softmax_top_k: per row, log_softmax(logits[r, :]) + row_offsets[r] (row_offsets may be
//   null), then the k best values in descending order with their column indices (ties: lower
//   index first; NaN never ranked). Raw logits are ranked, then
//   value = ((x - max) - log(sum exp(x - max))) + row_offset.
//   logits: [rows, vocab]; top_values, top_indices: [rows, k]; 1 <= k <= vocab.
// log_softmax_top_k_columns: log_softmax_top_k of each row over a chosen list of its columns (a
//   lexical shortlist's, one list a sentence): row r reads logits[r, c] for the columns c of list
//   g = row_lists[r], columns[g * list_stride + j] for j < list_sizes[g] (ascending, each list at
//   least k long), bit for bit as log_softmax_top_k over those values gathered in that order;
//   top_indices are columns of logits. logits: [rows, vocab]; scratch: [threads, list_stride].
// log_softmax: in place over each row (the trainer's loss and the runtime's n-best scores).
//                                                                         logits: [rows, vocab]
// label_smoothed_cross_entropy: PyTorch's rule: the target distribution is
//   q = (1 - smoothing) * onehot(target) + smoothing / vocab, and
//   loss = -sum_j q_j log softmax(logits)_j. Rows whose target equals ignore_id score nothing.
//   row_loss, row_nll ([rows], double) receive each row's loss and -log p(target) (0 when
//   ignored); the caller sums them in order, so the total does not depend on the thread count.
//   When write_gradient, logits are overwritten with gradient_scale * (softmax - q) (0 when
//   ignored; the CPU's gradient_scale is 1, CUDA's carries the mixed-precision loss scale).
//   targets: [rows].
#include "xf/kernels/types.h"

namespace xf::cpu {

void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows,
                       int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                       int threads);

void log_softmax_top_k_columns(const float* logits, int64_t vocab, const int32_t* row_lists,
                               const int32_t* columns, const int32_t* list_sizes, int64_t list_stride,
                               const float* row_offsets, int64_t rows, int64_t k, float* top_values,
                               int32_t* top_indices, float* scratch, int threads);

void log_softmax(float* logits, int64_t rows, int64_t vocab, int threads);

template <typename T>
void label_smoothed_cross_entropy(T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  T smoothing, int32_t ignore_id, bool write_gradient,
                                  double* row_loss, double* row_nll, int threads);

}  // namespace xf::cpu

namespace xf::cuda {

// k <= kMaxTopK too.
inline constexpr int64_t kMaxTopK = 16;
void log_softmax_top_k(const float* logits, const float* row_offsets, int64_t rows,
                       int64_t vocab, int64_t k, float* top_values, int32_t* top_indices,
                       cudaStream_t stream);
void log_softmax_top_k(const half* logits, const float* row_offsets, int64_t rows, int64_t vocab,
                       int64_t k, float* top_values, int32_t* top_indices, cudaStream_t stream);

void log_softmax(float* logits, int64_t rows, int64_t vocab, cudaStream_t stream);

void label_smoothed_cross_entropy(float* logits, const int32_t* targets, int64_t rows,
                                  int64_t vocab, float smoothing, int32_t ignore_id,
                                  bool write_gradient, float gradient_scale, double* row_loss,
                                  double* row_nll, cudaStream_t stream);

}  // namespace xf::cuda
