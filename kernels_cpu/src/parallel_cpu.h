#pragma once
// The kernels' one way into their threads: the worker pool of xf/kernels_cpu/worker_pool.h
// (workers that spin briefly and then sleep; oneDNN runs inside it on one OpenMP thread each).
#include <algorithm>
#include <cstdint>

#include "xf/kernels_cpu/worker_pool.h"

namespace xf::cpu::detail {

// Elementwise work below this many floats runs on the calling thread: waking the other
// threads costs a few microseconds, more than the loop itself.
constexpr int64_t kMinSharedWork = 16384;

// Runs body(i, thread) for i in [0, count) on `threads` threads (thread: 0 .. threads-1, for
// per-thread scratch), each thread taking one contiguous range of i (OpenMP's static schedule),
// or on the calling thread alone (thread 0) when one thread is asked for or the work is not
// worth sharing.
template <typename Body>
void parallel_for_on_threads(int64_t count, int threads, bool worth_sharing, const Body& body) {
  if (threads <= 1 || count <= 1 || !worth_sharing) {
    for (int64_t i = 0; i < count; ++i) body(i, 0);
    return;
  }
  run_on_threads(static_cast<int>(std::min<int64_t>(threads, count)), [&](int thread, int team) {
    const int64_t chunk = (count + team - 1) / team;  // team: 1 where the call runs inline
    const int64_t end = std::min(count, (thread + 1) * chunk);
    for (int64_t i = thread * chunk; i < end; ++i) body(i, thread);
  });
}

// Runs body(i) for i in [0, count): parallel_for_on_threads without the thread number.
template <typename Body>
void parallel_for(int64_t count, int threads, bool worth_sharing, const Body& body) {
  parallel_for_on_threads(count, threads, worth_sharing, [&](int64_t i, int) { body(i); });
}

// Splits [0, dim) into one contiguous column range per thread: column reductions run over all
// rows inside one thread, so sums never depend on how rows are split.
template <typename Body>
void for_each_column_block(int64_t dim, int threads, Body body) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, (dim + 15) / 16));
  parallel_for(blocks, threads, true, [&](int64_t block) {
    const int64_t begin = dim * block / blocks, end = dim * (block + 1) / blocks;
    body(begin, end);
  });
}

}  // namespace xf::cpu::detail
