// Dropout masks from the counter-based hash, and their application.
#include "xf/kernels/dropout.h"

#include <algorithm>

namespace xf::cpu {

void make_dropout_mask(uint64_t seed, uint64_t site, size_t count, float p, uint8_t* mask,
                       int threads, uint64_t first_index) {
  const uint32_t threshold = dropout_hash::threshold(p);
  const uint64_t stream = dropout_hash::site_stream(seed, site) + first_index;
  const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) mask[i] = dropout_hash::keeps(stream, threshold, i) ? 1 : 0;
}

template <typename T>
void apply_dropout(T* x, const uint8_t* mask, size_t count, T scale, int threads) {
  const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] = mask[i] ? x[i] * scale : T(0);
}

template void apply_dropout<float>(float*, const uint8_t*, size_t, float, int);
template void apply_dropout<double>(double*, const uint8_t*, size_t, double, int);

}  // namespace xf::cpu
