#pragma once
// The CPU kernels' threads: a pool of workers per calling thread that wait for work with a short
// spin and then sleep, so that a translator sharing its cores with other busy processes does not
// burn its time slices waiting (GNU OpenMP's workers spin for about 3 ms before they sleep:
// `--threads 2` took 13 s where `--threads 1` took 1 s on a busy 2-core machine,
// docs/BENCHMARKS.md "Threads that yield").
//
// Each thread that calls run_on_threads() gets its own workers (started at its first call with
// more than one thread, joined when it exits), so translators on different threads never wait
// for each other. The workers run oneDNN with one OpenMP thread each (omp_set_num_threads(1)),
// so that oneDNN never starts OpenMP teams of its own beside them.
#include <cstdint>

namespace xf::cpu {

// How long a waiting thread (a worker waiting for work, the caller waiting for its workers)
// spins before it sleeps, in microseconds. A waiter whose last spin ended in a sleep (its
// partner was not running: a busy machine) spins a quarter as long the next time, down to
// kMinSpinMicroseconds; one whose spin succeeds goes back to the full spin.
// XF_SPIN_MICROSECONDS overrides the full spin (read once; 0: sleep at once), for benchmarks.
constexpr int kSpinMicroseconds = 50;
constexpr int kMinSpinMicroseconds = 2;
int spin_microseconds();

namespace detail {
using ThreadTask = void (*)(const void* task, int thread, int threads);
void run_task_on_threads(int threads, ThreadTask call, const void* task);
}  // namespace detail

// Runs body(thread, team) once for every thread in [0, team): thread 0 on the calling thread,
// the others on its workers; returns when all have returned. team is `threads`, or 1 where the
// call runs inline: threads <= 1, or a call from inside a body (nested calls run on the thread
// that makes them), so a body divides its work by `team`, not by `threads`. A body must not
// throw on a worker (as in an OpenMP region); thrown on the calling thread, it is rethrown once
// the workers are done.
template <typename Body>
void run_on_threads(int threads, const Body& body) {
  detail::run_task_on_threads(
      threads,
      [](const void* task, int thread, int count) { (*static_cast<const Body*>(task))(thread, count); },
      &body);
}

// Workers started so far by the calling thread's pool (for tests).
int pool_workers();

}  // namespace xf::cpu
