// Scaled dot-product attention over strided [batch, heads, positions, head_dim] views.
#include <algorithm>
#include <cmath>
#include <limits>

#include <omp.h>

#include "simd_cpu.h"
#include "xf/kernels_cpu/kernels.h"

namespace xf::cpu {
namespace {

// The helpers are inline, not XF_VECTORIZED: they are inlined into attend_one_query's clones,
// where a call per key through the clone dispatcher would cost as much as the 64-term dot.
inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// In place: scores[j] <- exp(scores[j] - max), returns the sum.
inline float exp_shifted(float* scores, int64_t n, float max) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = detail::exp_vectorizable(scores[j] - max);
    scores[j] = e;
    sum += e;
  }
  return sum;
}

inline void scale_in_place(float* x, int64_t n, float factor) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] *= factor;
}

inline void axpy(float a, const float* x, int64_t n, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One query row: out = softmax(scale * q k_j^T, j < visible) v.     scores: [visible]
XF_VECTORIZED void attend_one_query(const float* q, const float* k, int64_t k_position_stride, const float* v,
                      int64_t v_position_stride, int64_t visible, int64_t head_dim, float scale,
                      float* scores, float* out, float* probabilities, int64_t key_len) {
  if (visible <= 0) {
    std::fill(out, out + head_dim, 0.0f);
    if (probabilities != nullptr) std::fill(probabilities, probabilities + key_len, 0.0f);
    return;
  }
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    scores[j] = scale * dot(q, k + j * k_position_stride, head_dim);
    max = scores[j] > max ? scores[j] : max;
  }
  // q is fully read: from here on out may be written even when it aliases q.
  const float sum = exp_shifted(scores, visible, max);
  scale_in_place(scores, visible, 1.0f / sum);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < visible; ++j) axpy(scores[j], v + j * v_position_stride, head_dim, out);
  if (probabilities != nullptr) {
    std::copy(scores, scores + visible, probabilities);
    std::fill(probabilities + visible, probabilities + key_len, 0.0f);
  }
}

}  // namespace

void attention(const float* q, HeadStrides q_strides, const float* k, HeadStrides k_strides,
               const float* v, HeadStrides v_strides, float* out, HeadStrides out_strides,
               const AttentionShape& shape, const int32_t* key_lengths, int64_t causal_offset,
               float* probabilities, float* scratch, int threads) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int64_t rows = shape.batch * shape.heads * shape.query_len;
  // One task per (batch, head, query): decode steps (query_len 1) still have batch * heads
  // tasks to share out.
  auto attend_row = [&](int64_t row, float* scores) {
    const int64_t i = row % shape.query_len;
    const int64_t h = (row / shape.query_len) % shape.heads;
    const int64_t b = row / (shape.query_len * shape.heads);
    int64_t visible = shape.key_len;
    if (key_lengths != nullptr) visible = std::min<int64_t>(visible, key_lengths[b]);
    if (causal_offset >= 0) visible = std::min(visible, i + causal_offset + 1);
    attend_one_query(q + b * q_strides.batch + h * q_strides.head + i * q_strides.position,
                     k + b * k_strides.batch + h * k_strides.head, k_strides.position,
                     v + b * v_strides.batch + h * v_strides.head, v_strides.position, visible,
                     shape.head_dim, scale, scores,
                     out + b * out_strides.batch + h * out_strides.head + i * out_strides.position,
                     probabilities != nullptr ? probabilities + row * shape.key_len : nullptr,
                     shape.key_len);
  };
  if (threads <= 1 || rows <= 1) {  // no one-thread parallel region (see parallel_cpu.h)
    for (int64_t row = 0; row < rows; ++row) attend_row(row, scratch);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    float* scores = scratch + static_cast<int64_t>(omp_get_thread_num()) * shape.key_len;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) attend_row(row, scores);
  }
}

}  // namespace xf::cpu
