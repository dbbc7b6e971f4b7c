// Backward of scaled dot-product attention (trainer only).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "xf/kernels_cpu/backward.h"

namespace xf::cpu {

template <typename T>
void attention_backward(const T* dout, HeadStrides dout_strides, const T* q, HeadStrides q_strides,
                        const T* k, HeadStrides k_strides, const T* v, HeadStrides v_strides,
                        const T* probabilities, const uint8_t* dropout_mask, T dropout_scale,
                        T* dq, HeadStrides dq_strides, T* dk, HeadStrides dk_strides, T* dv,
                        HeadStrides dv_strides, const AttentionShape& shape, T* scratch,
                        int threads) {
  const int64_t batch = shape.batch, heads = shape.heads, tq = shape.query_len,
                tk = shape.key_len, dh = shape.head_dim;
  const T inv_sqrt = T(1) / std::sqrt(T(dh));
  // With O = P_d V, P_d = P * mask * scale, S = Q K^T / sqrt(dh), P = softmax(S):
  //   dV = P_d^T dO;  dP = (dO V^T) * mask * scale;  dS = P * (dP - rowsum(dP * P));
  //   dQ = dS K / sqrt(dh);  dK = dS^T Q / sqrt(dh).
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    const int64_t b = bh / heads, h = bh % heads;
    T* dp = scratch + static_cast<int64_t>(omp_get_thread_num()) * 2 * tk;  // [key_len]
    T* ds = dp + tk;                                                         // [key_len]
    const T* qb = q + b * q_strides.batch + h * q_strides.head;
    const T* kb = k + b * k_strides.batch + h * k_strides.head;
    const T* vb = v + b * v_strides.batch + h * v_strides.head;
    const T* dob = dout + b * dout_strides.batch + h * dout_strides.head;
    T* dqb = dq + b * dq_strides.batch + h * dq_strides.head;
    T* dkb = dk + b * dk_strides.batch + h * dk_strides.head;
    T* dvb = dv + b * dv_strides.batch + h * dv_strides.head;
    for (int64_t j = 0; j < tk; ++j) {
      std::fill(dkb + j * dk_strides.position, dkb + j * dk_strides.position + dh, T(0));
      std::fill(dvb + j * dv_strides.position, dvb + j * dv_strides.position + dh, T(0));
    }
    for (int64_t i = 0; i < tq; ++i) {
      const T* p = probabilities + (bh * tq + i) * tk;
      const uint8_t* mask = dropout_mask ? dropout_mask + (bh * tq + i) * tk : nullptr;
      const T* doi = dob + i * dout_strides.position;
      T row_sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        if (p[j] == T(0)) {  // masked key (or an underflow): no gradient through it
          dp[j] = 0;
          continue;
        }
        const T keep = mask ? (mask[j] ? dropout_scale : T(0)) : T(1);
        const T* vj = vb + j * v_strides.position;
        T* dvj = dvb + j * dv_strides.position;
        const T pd = p[j] * keep;
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < dh; ++c) dot += doi[c] * vj[c];
#pragma omp simd
        for (int64_t c = 0; c < dh; ++c) dvj[c] += pd * doi[c];
        dp[j] = dot * keep;
        row_sum += dp[j] * p[j];
      }
      T* dqi = dqb + i * dq_strides.position;
      std::fill(dqi, dqi + dh, T(0));
      const T* qi = qb + i * q_strides.position;
      for (int64_t j = 0; j < tk; ++j) {
        ds[j] = p[j] * (dp[j] - row_sum) * inv_sqrt;
        if (ds[j] == T(0)) continue;
        const T* kj = kb + j * k_strides.position;
        T* dkj = dkb + j * dk_strides.position;
#pragma omp simd
        for (int64_t c = 0; c < dh; ++c) {
          dqi[c] += ds[j] * kj[c];
          dkj[c] += ds[j] * qi[c];
        }
      }
    }
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
