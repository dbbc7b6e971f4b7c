// Scaled dot-product attention over strided [batch, heads, positions, head_dim] views, the
// trainer's forward (with dropout) and the backward.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/kernels/attention.h"

namespace xf::cpu {
namespace {

// The helpers are inline, not XF_VECTORIZED: they are inlined into attend_one_query's clones,
// where a call per key through the clone dispatcher would cost as much as the 64-term dot.
using detail::dot;

// In place: scores[j] <- exp(scores[j] - max), returns the sum.
inline float exp_shifted(float* scores, int64_t n, float max) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = detail::exp_non_positive(scores[j] - max);
    scores[j] = e;
    sum += e;
  }
  return sum;
}

inline void scale_in_place(float* x, int64_t n, float factor) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] *= factor;
}

// 8 floats: one ymm (AVX2, and AVX-512, where 16-float vectors and their sums across lanes made
// AVX2 slower), two xmm or NEON registers, by the build that inlines it.
typedef float Floats8 __attribute__((vector_size(32)));

// Adds x[0..8) * y[0..8) to acc (loads by memcpy: no alignment needed).
inline __attribute__((always_inline)) void add_products8(Floats8& acc, const float* x, const float* y) {
  Floats8 a, b;
  std::memcpy(&a, x, sizeof a);
  std::memcpy(&b, y, sizeof b);
  acc += a * b;
}

// The sums of the 8 lanes of a, b, c and d together, by shuffles that stay within 128-bit
// halves until the last (unpack, then shufps, then one swap of halves): the four reductions of
// an `omp simd` loop came out as scalar adds from a copy on the stack (perf annotate, GCC 12).
inline __attribute__((always_inline)) void lane_sums_of_four(const Floats8& a, const Floats8& b,
                                                             const Floats8& c, const Floats8& d,
                                                             float (&sums)[4]) {
  // {a0+a2, b0+b2, a1+a3, b1+b3 | a4+a6, b4+b6, a5+a7, b5+b7}, and the same of c and d.
  const Floats8 ab = __builtin_shufflevector(a, b, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(a, b, 2, 10, 3, 11, 6, 14, 7, 15);
  const Floats8 cd = __builtin_shufflevector(c, d, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(c, d, 2, 10, 3, 11, 6, 14, 7, 15);
  // {a0..3, b0..3, c0..3, d0..3 | a4..7, b4..7, c4..7, d4..7}, each a sum of four lanes.
  const Floats8 quads = __builtin_shufflevector(ab, cd, 0, 1, 8, 9, 4, 5, 12, 13) +
                        __builtin_shufflevector(ab, cd, 2, 3, 10, 11, 6, 7, 14, 15);
  const Floats8 whole = quads + __builtin_shufflevector(quads, quads, 4, 5, 6, 7, 0, 1, 2, 3);
  for (int i = 0; i < 4; ++i) sums[i] = whole[i];
}

// sums[i * sums_stride] = scale * dot(x, rows[i]) for four rows, in one pass over x: four
// independent sums (one at a time, each would wait on its own latency and horizontal sum).
// Inlined into each ISA's build of its callers (an out-of-line copy was compiled for baseline
// SSE2 and cost its 8-float vectors their registers).
inline __attribute__((always_inline)) void scaled_dots_of_four(const float* x,
                                                               const float* const (&rows)[4],
                                                               int64_t n, float scale, float* sums,
                                                               int64_t sums_stride) {
  const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
  if (n % 8 == 0) {  // head sizes 64, 128, ...: 8-lane partial sums, added up together
    Floats8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t d = 0; d < n; d += 8) {
      add_products8(a0, r0 + d, x + d);
      add_products8(a1, r1 + d, x + d);
      add_products8(a2, r2 + d, x + d);
      add_products8(a3, r3 + d, x + d);
    }
    float lane_sums[4];
    lane_sums_of_four(a0, a1, a2, a3, lane_sums);
    for (int i = 0; i < 4; ++i) sums[i * sums_stride] = scale * lane_sums[i];
    return;
  }
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t d = 0; d < n; ++d) {
    const float xd = x[d];
    s0 += r0[d] * xd;
    s1 += r1[d] * xd;
    s2 += r2[d] * xd;
    s3 += r3[d] * xd;
  }
  sums[0] = scale * s0;
  sums[sums_stride] = scale * s1;
  sums[2 * sums_stride] = scale * s2;
  sums[3 * sums_stride] = scale * s3;
}

inline void axpy(float a, const float* x, int64_t n, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// One query row: out = softmax(scale * q k_j^T, j < visible) v.     scores: [visible]
XF_VECTORIZED_BODY void attend_one_query_body(const float* q, const float* k, int64_t k_position_stride,
                                    const float* v, int64_t v_position_stride, int64_t visible,
                                    int64_t head_dim, float scale, float* scores, float* out,
                                    float* probabilities, int64_t key_len) {
  if (visible <= 0) {
    std::fill(out, out + head_dim, 0.0f);
    if (probabilities != nullptr) std::fill(probabilities, probabilities + key_len, 0.0f);
    return;
  }
  // Four keys at a time, each summed as dot() sums it.
  int64_t j = 0;
  for (; j + 4 <= visible; j += 4) {
    const float* key = k + j * k_position_stride;
    const float* keys[4] = {key, key + k_position_stride, key + 2 * k_position_stride,
                            key + 3 * k_position_stride};
    scaled_dots_of_four(q, keys, head_dim, scale, scores + j, 1);
  }
  for (; j < visible; ++j) scores[j] = scale * dot(q, k + j * k_position_stride, head_dim);
  float max = -std::numeric_limits<float>::infinity();
  for (j = 0; j < visible; ++j) max = scores[j] > max ? scores[j] : max;
  // q is fully read: from here on out may be written even when it aliases q.
  const float sum = exp_shifted(scores, visible, max);
  scale_in_place(scores, visible, 1.0f / sum);
  std::fill(out, out + head_dim, 0.0f);
  // Four value rows a pass over out, added in key order (the sums of one axpy a key).
  for (j = 0; j + 4 <= visible; j += 4) {
    const float* v0 = v + j * v_position_stride;
    const float* v1 = v0 + v_position_stride;
    const float* v2 = v1 + v_position_stride;
    const float* v3 = v2 + v_position_stride;
    const float p0 = scores[j], p1 = scores[j + 1], p2 = scores[j + 2], p3 = scores[j + 3];
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) {
      float o = out[d];
      o += p0 * v0[d];
      o += p1 * v1[d];
      o += p2 * v2[d];
      o += p3 * v3[d];
      out[d] = o;
    }
  }
  for (; j < visible; ++j) axpy(scores[j], v + j * v_position_stride, head_dim, out);
  if (probabilities != nullptr) {
    std::copy(scores, scores + visible, probabilities);
    std::fill(probabilities + visible, probabilities + key_len, 0.0f);
  }
}
XF_DISPATCH_BY_ISA(attend_one_query)

// Up to kQueryBlock queries of one (batch, head) at once: each key and value row is loaded once
// for all of them (the encoder's queries, or the beams of one sentence in cross-attention).
constexpr int64_t kQueryBlock = 4;
constexpr int64_t kMaxBlockKeys = 512;  // scores of a block live on the stack: 8 KB
constexpr int64_t kMaxBlockHeadDim = 256;

struct QueryBlock {
  int64_t count = 0;                  // 2..kQueryBlock
  const float* q[kQueryBlock];        // [head_dim] each
  float* out[kQueryBlock];            // [head_dim] each
  float* probabilities[kQueryBlock];  // [key_len] each, or null
  int64_t visible[kQueryBlock];
};

XF_VECTORIZED_BODY void attend_query_block_body(const QueryBlock& block, const float* k,
                                      int64_t k_position_stride, const float* v,
                                      int64_t v_position_stride, int64_t head_dim, float scale,
                                      int64_t key_len) {
  float scores[kQueryBlock][kMaxBlockKeys];
  float unused_output[kMaxBlockHeadDim];  // the output of the block's empty slots
  const float* q[kQueryBlock];
  float* out[kQueryBlock];
  int64_t visible[kQueryBlock];
  int64_t max_visible = 0;
  for (int64_t i = 0; i < kQueryBlock; ++i) {
    const bool used = i < block.count;
    q[i] = used ? block.q[i] : block.q[0];
    out[i] = used ? block.out[i] : unused_output;
    visible[i] = used ? std::max<int64_t>(0, block.visible[i]) : 0;
    max_visible = std::max(max_visible, visible[i]);
  }
  // Scores for every key some query of the block sees (the others' extra scores are ignored).
  for (int64_t j = 0; j < max_visible; ++j)
    scaled_dots_of_four(k + j * k_position_stride, q, head_dim, scale, &scores[0][j], kMaxBlockKeys);
  // Every q is read: outputs may be written from here on, even where they alias queries.
  for (int64_t i = 0; i < kQueryBlock; ++i) {
    std::fill(out[i], out[i] + head_dim, 0.0f);
    if (visible[i] > 0) {
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < visible[i]; ++j) max = scores[i][j] > max ? scores[i][j] : max;
      const float sum = exp_shifted(scores[i], visible[i], max);
      scale_in_place(scores[i], visible[i], 1.0f / sum);
    }
    // Zero weight for the keys this query does not see.
    std::fill(scores[i] + visible[i], scores[i] + max_visible, 0.0f);
    if (i < block.count && block.probabilities[i] != nullptr) {
      std::copy(scores[i], scores[i] + visible[i], block.probabilities[i]);
      std::fill(block.probabilities[i] + visible[i], block.probabilities[i] + key_len, 0.0f);
    }
  }
  for (int64_t j = 0; j < max_visible; ++j) {
    const float* value = v + j * v_position_stride;
    const float p0 = scores[0][j], p1 = scores[1][j], p2 = scores[2][j], p3 = scores[3][j];
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) {
      const float vd = value[d];
      out[0][d] += p0 * vd;
      out[1][d] += p1 * vd;
      out[2][d] += p2 * vd;
      out[3][d] += p3 * vd;
    }
  }
}
XF_DISPATCH_BY_ISA(attend_query_block)

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
  const bool by_blocks =
      shape.query_len > 1 && shape.key_len <= kMaxBlockKeys && shape.head_dim <= kMaxBlockHeadDim;
  if (by_blocks) {
    // One task per (batch, head, block of queries); scores on the stack, scratch unused.
    const int64_t blocks_per_head = (shape.query_len + kQueryBlock - 1) / kQueryBlock;
    detail::parallel_for(
        shape.batch * shape.heads * blocks_per_head, threads, true, [&](int64_t task) {
          const int64_t first = (task % blocks_per_head) * kQueryBlock;
          const int64_t h = (task / blocks_per_head) % shape.heads;
          const int64_t b = task / (blocks_per_head * shape.heads);
          int64_t key_limit = shape.key_len;
          if (key_lengths != nullptr) key_limit = std::min<int64_t>(key_limit, key_lengths[b]);
          QueryBlock block;
          block.count = std::min(kQueryBlock, shape.query_len - first);
          for (int64_t n = 0; n < block.count; ++n) {
            const int64_t i = first + n;
            const int64_t row = (b * shape.heads + h) * shape.query_len + i;
            block.q[n] = q + b * q_strides.batch + h * q_strides.head + i * q_strides.position;
            block.out[n] =
                out + b * out_strides.batch + h * out_strides.head + i * out_strides.position;
            block.probabilities[n] =
                probabilities != nullptr ? probabilities + row * shape.key_len : nullptr;
            block.visible[n] =
                causal_offset >= 0 ? std::min(key_limit, i + causal_offset + 1) : key_limit;
          }
          attend_query_block(block, k + b * k_strides.batch + h * k_strides.head,
                             k_strides.position, v + b * v_strides.batch + h * v_strides.head,
                             v_strides.position, shape.head_dim, scale, shape.key_len);
        });
    return;
  }
  detail::parallel_for_on_threads(rows, threads, true, [&](int64_t row, int thread) {
    attend_row(row, scratch + static_cast<int64_t>(thread) * shape.key_len);
  });
}

template <typename T>
void attention_forward(const T* q, HeadStrides q_strides, const T* k, HeadStrides k_strides,
                       const T* v, HeadStrides v_strides, T* out, HeadStrides out_strides,
                       const AttentionShape& shape, const int32_t* key_lengths,
                       int64_t causal_offset, T* probabilities, const uint8_t* dropout_mask,
                       T dropout_scale, T* scratch, int threads) {
  if constexpr (std::is_same_v<T, float>) {
    if (!dropout_mask) {
      attention(q, q_strides, k, k_strides, v, v_strides, out, out_strides, shape,
                     key_lengths, causal_offset, probabilities, scratch, threads);
      return;
    }
  }
  (void)scratch;
  const int64_t heads = shape.heads, tq = shape.query_len, tk = shape.key_len,
                dh = shape.head_dim;
  const T inv_sqrt = T(1) / std::sqrt(T(dh));
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t bh = 0; bh < shape.batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    const int64_t keys = key_lengths ? std::min<int64_t>(tk, key_lengths[b]) : tk;
    for (int64_t i = 0; i < tq; ++i) {
      T* p = probabilities + (bh * tq + i) * tk;
      const int64_t visible =
          causal_offset < 0 ? keys : std::max<int64_t>(0, std::min(keys, i + causal_offset + 1));
      const T* qi = q + b * q_strides.batch + h * q_strides.head + i * q_strides.position;
      T max_score = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const T* kj = k + b * k_strides.batch + h * k_strides.head + j * k_strides.position;
        T s = 0;
        for (int64_t c = 0; c < dh; ++c) s += qi[c] * kj[c];
        p[j] = s * inv_sqrt;
        max_score = std::max(max_score, p[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        p[j] = std::exp(p[j] - max_score);
        sum += p[j];
      }
      for (int64_t j = 0; j < visible; ++j) p[j] /= sum;
      std::fill(p + visible, p + tk, T(0));
      T* oi = out + b * out_strides.batch + h * out_strides.head + i * out_strides.position;
      std::fill(oi, oi + dh, T(0));
      const uint8_t* mask = dropout_mask ? dropout_mask + (bh * tq + i) * tk : nullptr;
      for (int64_t j = 0; j < visible; ++j) {
        const T weight = mask ? (mask[j] ? p[j] * dropout_scale : T(0)) : p[j];
        const T* vj = v + b * v_strides.batch + h * v_strides.head + j * v_strides.position;
        for (int64_t c = 0; c < dh; ++c) oi[c] += weight * vj[c];
      }
    }
  }
}
namespace {

// One (batch, head) pair: pointers already offset to it.
template <typename T>
struct HeadArgs {
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* probabilities;  // [query_len, key_len]
  const uint8_t* mask;     // [query_len, key_len] or null
  T* dq;
  T* dk;
  T* dv;
  int64_t dout_step, q_step, k_step, v_step, dq_step, dk_step, dv_step;  // position strides
  int64_t query_len, key_len, head_dim;
  T dropout_scale, inv_sqrt;
  T* dp;  // [key_len] scratch
  T* ds;  // [key_len] scratch
};

// With O = P_d V, P_d = P * mask * scale, S = Q K^T / sqrt(dh), P = softmax(S):
//   dV = P_d^T dO;  dP = (dO V^T) * mask * scale;  dS = P * (dP - rowsum(dP * P));
//   dQ = dS K / sqrt(dh);  dK = dS^T Q / sqrt(dh).
template <typename T>
__attribute__((always_inline)) inline void attention_backward_head(const HeadArgs<T>& a) {
  const int64_t tq = a.query_len, tk = a.key_len, dh = a.head_dim;
  for (int64_t j = 0; j < tk; ++j) {
    std::fill(a.dk + j * a.dk_step, a.dk + j * a.dk_step + dh, T(0));
    std::fill(a.dv + j * a.dv_step, a.dv + j * a.dv_step + dh, T(0));
  }
  for (int64_t i = 0; i < tq; ++i) {
    const T* p = a.probabilities + i * tk;
    const uint8_t* mask = a.mask ? a.mask + i * tk : nullptr;
    const T* doi = a.dout + i * a.dout_step;
    T row_sum = 0;
    for (int64_t j = 0; j < tk; ++j) {
      if (p[j] == T(0)) {  // masked key (or an underflow): no gradient through it
        a.dp[j] = 0;
        continue;
      }
      const T keep = mask ? (mask[j] ? a.dropout_scale : T(0)) : T(1);
      const T* vj = a.v + j * a.v_step;
      T* dvj = a.dv + j * a.dv_step;
      const T pd = p[j] * keep;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < dh; ++c) dot += doi[c] * vj[c];
#pragma omp simd
      for (int64_t c = 0; c < dh; ++c) dvj[c] += pd * doi[c];
      a.dp[j] = dot * keep;
      row_sum += a.dp[j] * p[j];
    }
    T* dqi = a.dq + i * a.dq_step;
    std::fill(dqi, dqi + dh, T(0));
    const T* qi = a.q + i * a.q_step;
    for (int64_t j = 0; j < tk; ++j) {
      const T ds = p[j] * (a.dp[j] - row_sum) * a.inv_sqrt;
      if (ds == T(0)) continue;
      const T* kj = a.k + j * a.k_step;
      T* dkj = a.dk + j * a.dk_step;
#pragma omp simd
      for (int64_t c = 0; c < dh; ++c) {
        dqi[c] += ds * kj[c];
        dkj[c] += ds * qi[c];
      }
    }
  }
}

// float: compiled for several instruction sets (simd_cpu.h); double (the tests): plain.
XF_VECTORIZED_BODY void run_head_body(const HeadArgs<float>& a) { attention_backward_head(a); }
XF_DISPATCH_BY_ISA(run_head)
void run_head(const HeadArgs<double>& a) { attention_backward_head(a); }

}  // namespace

template <typename T>
void attention_backward(const T* dout, HeadStrides dout_strides, const T* q, HeadStrides q_strides,
                        const T* k, HeadStrides k_strides, const T* v, HeadStrides v_strides,
                        const T* probabilities, const uint8_t* dropout_mask, T dropout_scale,
                        T* dq, HeadStrides dq_strides, T* dk, HeadStrides dk_strides, T* dv,
                        HeadStrides dv_strides, const AttentionShape& shape, T* scratch,
                        int threads) {
  const int64_t heads = shape.heads, tq = shape.query_len, tk = shape.key_len;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t bh = 0; bh < shape.batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    T* dp = scratch + static_cast<int64_t>(omp_get_thread_num()) * 2 * tk;
    const HeadArgs<T> args{
        dout + b * dout_strides.batch + h * dout_strides.head,
        q + b * q_strides.batch + h * q_strides.head,
        k + b * k_strides.batch + h * k_strides.head,
        v + b * v_strides.batch + h * v_strides.head,
        probabilities + bh * tq * tk,
        dropout_mask ? dropout_mask + bh * tq * tk : nullptr,
        dq + b * dq_strides.batch + h * dq_strides.head,
        dk + b * dk_strides.batch + h * dk_strides.head,
        dv + b * dv_strides.batch + h * dv_strides.head,
        dout_strides.position, q_strides.position, k_strides.position, v_strides.position,
        dq_strides.position, dk_strides.position, dv_strides.position,
        tq, tk, shape.head_dim,
        dropout_scale, T(1) / std::sqrt(T(shape.head_dim)),
        dp, dp + tk};
    run_head(args);
  }
}

#define XF_INSTANTIATE(T) \
  template void attention_forward<T>(const T*, HeadStrides, const T*, HeadStrides, const T*, \
                                     HeadStrides, T*, HeadStrides, const AttentionShape&, \
                                     const int32_t*, int64_t, T*, const uint8_t*, T, T*, int); \
  template void attention_backward<T>(const T*, HeadStrides, const T*, HeadStrides, const T*, \
                                      HeadStrides, const T*, HeadStrides, const T*, \
                                      const uint8_t*, T, T*, HeadStrides, T*, HeadStrides, T*, \
                                      HeadStrides, const AttentionShape&, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)

}  // namespace xf::cpu
