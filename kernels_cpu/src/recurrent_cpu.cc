// Marian's SSRU cell, one decoding step (xf/kernels/recurrent.h).
#include "xf/kernels/recurrent.h"

#include <cmath>

#include "parallel_cpu.h"
#include "simd_cpu.h"

namespace xf::cpu {
namespace {

// sigmoid as 1 / (1 + exp(-f)): exp overflowing to inf gives 0, never NaN.
XF_VECTORIZED_BODY void ssru_row_body(const float* x, const float* f, float* c, bool first, int64_t dim,
                                      float* out) {
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-f[i]));
    const float previous = first ? 0.0f : c[i];
    const float next = s * previous + (1.0f - s) * x[i];
    c[i] = next;
    out[i] = next > 0.0f ? next : 0.0f;
  }
}
XF_DISPATCH_BY_ISA(ssru_row)

}  // namespace

void ssru_step(const float* in, float* cell, const int32_t* state_rows, bool first, int64_t rows, int64_t dim,
               float* out, int threads) {
  detail::parallel_for(rows, threads, rows * dim > detail::kMinSharedWork, [&](int64_t r) {
    const float* row = in + r * 2 * dim;
    const int64_t state_row = state_rows != nullptr ? state_rows[r] : r;
    ssru_row(row, row + dim, cell + state_row * dim, first, dim, out + r * dim);
  });
}

}  // namespace xf::cpu
