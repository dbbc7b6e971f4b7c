// The SSRU recurrence over whole sequences and its backward (xf/kernels/ssru_scan.h): each
// (batch row, feature) is an independent scan over the steps.
#include "xf/kernels/ssru_scan.h"

#include <algorithm>
#include <cmath>

#include "xf/error.h"

namespace xf::cpu {
namespace {

template <typename T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

void check_shape(int64_t in_stride, int64_t batch, int64_t len, int64_t dim, const char* what) {
  if (batch < 0 || len < 0 || dim <= 0 || in_stride < dim)
    throw Error(std::string(what) + ": bad shape");
}

}  // namespace

template <typename T>
void ssru_scan_forward(const T* x, const T* f, int64_t in_stride, int64_t batch, int64_t len, int64_t dim,
                       T* cell, T* out, int threads) {
  check_shape(in_stride, batch, len, dim, "ssru_scan_forward");
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static) if (batch * len * dim > 32768)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < len; ++t) {
      const int64_t r = b * len + t;
      const T* previous = t > 0 ? cell + (r - 1) * dim : nullptr;
      for (int64_t j = 0; j < dim; ++j) {
        const T s = sigmoid(f[r * in_stride + j]);
        const T c = (previous ? s * previous[j] : T(0)) + (T(1) - s) * x[r * in_stride + j];
        cell[r * dim + j] = c;
        out[r * dim + j] = c > T(0) ? c : T(0);
      }
    }
  }
}

template <typename T>
void ssru_scan_backward(const T* dout, const T* x, const T* f, int64_t in_stride, const T* cell, int64_t batch,
                        int64_t len, int64_t dim, T* dx, T* df, int64_t d_stride, int threads) {
  check_shape(in_stride, batch, len, dim, "ssru_scan_backward");
  if (d_stride < dim) throw Error("ssru_scan_backward: bad gradient stride");
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static) if (batch * len * dim > 32768)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < dim; ++j) {
      T carry = 0;  // d(loss)/d(c_t) through c_{t+1}
      for (int64_t t = len; t-- > 0;) {
        const int64_t r = b * len + t;
        const T c = cell[r * dim + j];
        const T dc = (c > T(0) ? dout[r * dim + j] : T(0)) + carry;
        const T s = sigmoid(f[r * in_stride + j]);
        const T previous = t > 0 ? cell[(r - 1) * dim + j] : T(0);
        dx[r * d_stride + j] = dc * (T(1) - s);
        df[r * d_stride + j] = dc * (previous - x[r * in_stride + j]) * s * (T(1) - s);
        carry = dc * s;
      }
    }
  }
}

template void ssru_scan_forward<float>(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                                       float*, int);
template void ssru_scan_forward<double>(const double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                        double*, double*, int);
template void ssru_scan_backward<float>(const float*, const float*, const float*, int64_t, const float*, int64_t,
                                        int64_t, int64_t, float*, float*, int64_t, int);
template void ssru_scan_backward<double>(const double*, const double*, const double*, int64_t, const double*,
                                         int64_t, int64_t, int64_t, double*, double*, int64_t, int);

}  // namespace xf::cpu
