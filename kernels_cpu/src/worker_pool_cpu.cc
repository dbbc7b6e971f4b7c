// The kernels' worker pool (xf/kernels_cpu/worker_pool.h): one per calling thread, each waiter
// spinning a bounded time before it sleeps on a condition variable.
#include "xf/kernels_cpu/worker_pool.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xf::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int read_spin_microseconds() {
  const char* text = std::getenv("XF_SPIN_MICROSECONDS");
  if (text == nullptr || *text == '\0') return kSpinMicroseconds;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 && value <= 1000000 ? static_cast<int>(value) : kSpinMicroseconds;
}

// One waiter's spin length: the full spin while its spins succeed, a quarter of the last one
// after a spin that ended in a sleep (its partner was descheduled: spinning only burns the time
// slice the partner needs), never below kMinSpinMicroseconds.
class SpinBudget {
 public:
  SpinBudget() : microseconds_(spin_microseconds()) {}
  // Spins until ready() or the budget runs out; true when ready.
  template <typename Ready>
  bool spin_until(const Ready& ready) {
    const int full = spin_microseconds();
    if (microseconds_ > 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(microseconds_);
      do {
        for (int i = 0; i < 32; ++i) {
          if (ready()) {
            microseconds_ = full;
            return true;
          }
          cpu_relax();
        }
      } while (std::chrono::steady_clock::now() < deadline);
    }
    if (ready()) return true;
    microseconds_ = full == 0 ? 0 : std::max(std::min(full, kMinSpinMicroseconds), microseconds_ / 4);
    return false;
  }

 private:
  int microseconds_;
};

// True on a pool's workers and on a caller inside run_on_threads(): nested calls run inline.
thread_local bool t_inside_task = false;

class WorkerPool {
 public:
  ~WorkerPool() {
    stopping_.store(true);
    generation_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      work_ready_.notify_all();
    }
    for (std::thread& worker : workers_) worker.join();
  }

  int workers() const { return static_cast<int>(workers_.size()); }

  void run(int threads, detail::ThreadTask call, const void* task) {
    while (workers() < threads - 1) {
      const int index = workers() + 1;
      const uint64_t current = generation_.load();  // the new worker waits for the next task
      workers_.emplace_back([this, index, current] { work(index, current); });
    }
    call_ = call;
    task_ = task;
    threads_ = threads;
    unfinished_.store(workers());  // every worker answers, those outside the team too
    generation_.fetch_add(1);  // seq_cst: publishes the task; ordered against sleeping_ below
    if (sleeping_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      work_ready_.notify_all();
    }
    std::exception_ptr error;
    try {
      call(task, 0, threads);
    } catch (...) {
      error = std::current_exception();  // the workers still read `task`: wait for them first
    }
    wait_until([this] { return unfinished_.load() == 0; }, caller_spin_, caller_done_);
    if (error) std::rethrow_exception(error);
  }

 private:
  // Spins, then sleeps on `wakeup` until ready(). Whoever makes ready() true changes the atomic
  // it reads (seq_cst) and then reads sleeping_: either it sees this sleeper and notifies under
  // the mutex, or this sleeper's own check under the mutex sees the change.
  template <typename Ready>
  void wait_until(const Ready& ready, SpinBudget& spin, std::condition_variable& wakeup) {
    if (spin.spin_until(ready)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    sleeping_.fetch_add(1);
    wakeup.wait(lock, ready);
    sleeping_.fetch_sub(1);
  }

  void work(int index, uint64_t seen) {
    omp_set_num_threads(1);  // oneDNN inside a task runs on this thread alone
    t_inside_task = true;    // a task's own run_on_threads() runs inline
    SpinBudget spin;
    for (;;) {
      wait_until([&] { return generation_.load() != seen; }, spin, work_ready_);
      seen = generation_.load();
      if (stopping_.load()) return;
      if (index < threads_) call_(task_, index, threads_);  // else: a smaller team this time
      if (unfinished_.fetch_sub(1) == 1 && sleeping_.load() > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        caller_done_.notify_all();
      }
    }
  }

  std::vector<std::thread> workers_;
  // The task, written by the caller before it bumps generation_ and read by the workers after
  // they see the bump.
  detail::ThreadTask call_ = nullptr;
  const void* task_ = nullptr;
  int threads_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> unfinished_{0};  // workers still running the task
  std::atomic<int> sleeping_{0};    // threads asleep on either condition variable
  SpinBudget caller_spin_;
  std::mutex mutex_;
  std::atomic<bool> stopping_{false};
  std::condition_variable work_ready_, caller_done_;
};

// The calling thread's pool. After fork() the child has none of the parent's workers (only the
// forking thread lives on), and the pool's mutex may have been held by one of them: a pool made
// in another process is abandoned, never touched again (leaked), and a fresh one made.
class PoolOfThisThread {
 public:
  ~PoolOfThisThread() {
    if (owner_ != getpid()) pool_.release();  // a parent's: its workers are not ours to join
  }
  WorkerPool& get() {
    if (!pool_ || owner_ != getpid()) {
      if (pool_) pool_.release();
      pool_ = std::make_unique<WorkerPool>();
      owner_ = getpid();
    }
    return *pool_;
  }

 private:
  std::unique_ptr<WorkerPool> pool_;
  pid_t owner_ = 0;
};

WorkerPool& this_threads_pool() {
  thread_local PoolOfThisThread pool;
  return pool.get();
}

}  // namespace

int spin_microseconds() {
  static const int microseconds = read_spin_microseconds();
  return microseconds;
}

int pool_workers() { return this_threads_pool().workers(); }

namespace detail {

void run_task_on_threads(int threads, ThreadTask call, const void* task) {
  if (threads <= 1 || t_inside_task) {
    call(task, 0, 1);
    return;
  }
  struct Inside {
    Inside() { t_inside_task = true; }
    ~Inside() { t_inside_task = false; }
  } inside;
  this_threads_pool().run(threads, call, task);
}

}  // namespace detail
}  // namespace xf::cpu
