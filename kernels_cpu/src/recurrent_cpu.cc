// Marian's SSRU cell (xf/kernels/recurrent.h): one decoding step, row by row, and the recurrence
// over whole sequences with its backward, where each (batch row, feature) is an independent scan
// over the steps.
#include "xf/kernels/recurrent.h"

#include <algorithm>

#include "parallel_cpu.h"
#include "simd_cpu.h"
#include "xf/error.h"

namespace xf::cpu {
namespace {

// ssru_forget_weight with the kernels' vectorizable exp: std::exp is a libm call per value,
// which kept the decoding step's loop scalar (7.5% of the student's batch-32 time, perf).
XF_VECTORIZED_BODY void ssru_row_body(const float* x, const float* f, float* c, bool first, int64_t dim,
                                      float* out) {
  // The first step's previous cell is 0 (c may hold anything then), read as 0 x the finite
  // candidate row: a load under a condition (first ? 0 : c[i]) kept GCC from vectorizing.
  const float* previous = first ? x : c;
  const float keep = first ? 0.0f : 1.0f;
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) {
    const float forget = 1.0f / (1.0f + detail::exp_vectorizable(-f[i]));
    const float next = ssru_next_cell(forget, keep * previous[i], x[i]);
    c[i] = next;
    out[i] = next > 0.0f ? next : 0.0f;
  }
}
XF_DISPATCH_BY_ISA(ssru_row)

void check_shape(int64_t in_stride, int64_t batch, int64_t len, int64_t dim, const char* what) {
  if (batch < 0 || len < 0 || dim <= 0 || in_stride < dim)
    throw Error(std::string(what) + ": bad shape");
}

}  // namespace

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, int threads) {
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork, [&](int64_t r) {
    const float* row = in + r * 2 * dim;
    const int64_t state_row = state_rows != nullptr ? state_rows[r] : r;
    ssru_row(row, row + dim, cell + state_row * dim, first, dim, out + r * dim);
  });
}

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
        const T s = ssru_forget_weight(f[r * in_stride + j]);
        const T c = ssru_next_cell(s, previous ? previous[j] : T(0), x[r * in_stride + j]);
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
        const T s = ssru_forget_weight(f[r * in_stride + j]);
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
