#pragma once
// The kernels' one way into OpenMP.
#include <algorithm>
#include <cstdint>

namespace xf::cpu::detail {

// Elementwise work below this many floats runs on the calling thread: waking the other
// threads costs a few microseconds, more than the loop itself.
constexpr int64_t kMinSharedWork = 16384;

// Runs body(i) for i in [0, count) on `threads` OpenMP threads, or on the calling thread alone
// when one thread is asked for or the work is not worth sharing. It never enters a one-thread
// parallel region: libgomp mallocs a new team for every one of those (measured: 2 allocations
// per call of an `if(false)` region), which would break the runtime's allocation-free rule.
// A region always has `threads` threads, so libgomp keeps reusing the same team.
template <typename Body>
void parallel_for(int64_t count, int threads, bool worth_sharing, const Body& body) {
  if (threads <= 1 || count <= 1 || !worth_sharing) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i) body(i);
}

// Splits [0, dim) into one contiguous column range per thread: column reductions run over all
// rows inside one thread, so sums never depend on how rows are split.
template <typename Body>
void for_each_column_block(int64_t dim, int threads, Body body) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, (dim + 15) / 16));
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = dim * block / blocks, end = dim * (block + 1) / blocks;
    body(begin, end);
  }
}

}  // namespace xf::cpu::detail
