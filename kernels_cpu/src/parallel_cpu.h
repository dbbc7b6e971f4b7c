#pragma once
// The kernels' one way into OpenMP.
#include <cstdint>

namespace xf::cpu::detail {

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

}  // namespace xf::cpu::detail
