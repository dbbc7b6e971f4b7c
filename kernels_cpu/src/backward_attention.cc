// Backward of scaled dot-product attention (trainer only).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "simd_cpu.h"
#include "xf/kernels_cpu/backward.h"

namespace xf::cpu {

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

#define XF_INSTANTIATE(T)                                                                     \
  template void attention_backward<T>(const T*, HeadStrides, const T*, HeadStrides, const T*, \
                                      HeadStrides, const T*, HeadStrides, const T*,           \
                                      const uint8_t*, T, T*, HeadStrides, T*, HeadStrides, T*, \
                                      HeadStrides, const AttentionShape&, T*, int);
XF_INSTANTIATE(float)
XF_INSTANTIATE(double)
#undef XF_INSTANTIATE

}  // namespace xf::cpu
