// The kernels' worker pool (xf/kernels_cpu/worker_pool.h): every thread of a team runs its body
// once, nested and one-thread calls run inline, an exception on the calling thread waits for the
// workers, callers on different threads get their own workers, and idle workers sleep instead of
// spinning (the point of the pool: a busy machine). Run under TSan by the tsan preset.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "xf/kernels_cpu/worker_pool.h"

namespace {

using xf::cpu::run_on_threads;

TEST(WorkerPool, EveryThreadOfTheTeamRunsOnceAndItsWritesAreSeen) {
  for (int round = 0; round < 2000; ++round) {
    const int threads = 1 + round % 4;  // teams of changing size share one pool
    std::vector<int> runs(threads, 0);  // plain ints: the pool's return must publish them
    std::vector<int> teams(threads, 0);
    run_on_threads(threads, [&](int thread, int team) {
      runs[thread] += 1;
      teams[thread] = team;
    });
    for (int t = 0; t < threads; ++t) {
      ASSERT_EQ(runs[t], 1) << "round " << round << " thread " << t;
      ASSERT_EQ(teams[t], threads);
    }
  }
  EXPECT_EQ(xf::cpu::pool_workers(), 3);  // grown to the largest team, never beyond
}

TEST(WorkerPool, OneThreadAndNestedCallsRunInlineOnTheirCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  run_on_threads(1, [&](int thread, int team) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(thread, 0);
    EXPECT_EQ(team, 1);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  std::vector<int> inner_runs(2, 0);
  run_on_threads(2, [&](int thread, int) {
    const std::thread::id outer = std::this_thread::get_id();
    run_on_threads(2, [&](int inner, int team) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      EXPECT_EQ(inner, 0);
      EXPECT_EQ(team, 1);
      ++inner_runs[thread];
    });
  });
  EXPECT_EQ(inner_runs, (std::vector<int>{1, 1}));
}

TEST(WorkerPool, AnExceptionOnTheCallerIsRethrownAfterTheWorkersFinish) {
  std::atomic<int> finished{0};
  EXPECT_THROW(run_on_threads(3, [&](int thread, int) {
                 if (thread == 0) throw std::runtime_error("caller's share failed");
                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                 finished.fetch_add(1);
               }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 2);  // both workers were done before the throw left run_on_threads
  int runs = 0;
  run_on_threads(3, [&](int thread, int) {
    if (thread == 0) ++runs;
  });
  EXPECT_EQ(runs, 1);  // the pool still works
}

TEST(WorkerPool, CallersOnDifferentThreadsDoNotShareWorkers) {
  constexpr int kCallers = 3, kRounds = 500;
  std::vector<long> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&sums, c] {
      for (int round = 0; round < kRounds; ++round) {
        long parts[2] = {0, 0};
        run_on_threads(2, [&](int thread, int) { parts[thread] = thread + 1 + round; });
        sums[c] += parts[0] + parts[1];
      }
      EXPECT_EQ(xf::cpu::pool_workers(), 1);
    });
  }
  for (std::thread& caller : callers) caller.join();
  long expected = 0;
  for (int round = 0; round < kRounds; ++round) expected += 3 + 2 * round;
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(sums[c], expected) << "caller " << c;
}

// CPU seconds (user + system) of every thread of this process but the calling one.
double cpu_seconds_of_other_threads() {
  const long ticks = sysconf(_SC_CLK_TCK);
  const std::string self = std::to_string(static_cast<long>(gettid()));
  double seconds = 0;
  DIR* tasks = opendir("/proc/self/task");
  while (dirent* entry = readdir(tasks)) {
    const std::string tid = entry->d_name;
    if (tid == "." || tid == ".." || tid == self) continue;
    std::ifstream stat("/proc/self/task/" + tid + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (name) "
    std::string field;
    for (int i = 3; i <= 13; ++i) fields >> field;  // fields 3..13
    long user = 0, system = 0;
    fields >> user >> system;                        // fields 14, 15
    seconds += static_cast<double>(user + system) / ticks;
  }
  closedir(tasks);
  return seconds;
}

TEST(WorkerPool, IdleWorkersSleepInsteadOfSpinning) {
  if (xf::cpu::spin_microseconds() > 10000) GTEST_SKIP() << "XF_SPIN_MICROSECONDS asks for long spins";
  run_on_threads(2, [](int, int) {});  // starts the worker; it now waits for work
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past any spin
  const double before = cpu_seconds_of_other_threads();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double idle = cpu_seconds_of_other_threads() - before;
  // A spinning worker takes a core's worth: about 0.5 s here (at least 0.1 even on a machine
  // busy enough to give it a fifth of a core); a sleeping one, clock ticks of 10 ms at most.
  EXPECT_LT(idle, 0.05) << "idle workers used " << idle << " CPU seconds in 0.5 s of waiting";
}

// A child forked after the pool started has none of its workers: its calls must start new ones
// rather than wait forever for the parent's.
TEST(WorkerPool, AForkedChildStartsWorkersOfItsOwn) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan refuses to start threads in a child forked from a threaded process";
#endif
  run_on_threads(2, [](int, int) {});  // the parent's worker exists
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int runs[2] = {0, 0};
    run_on_threads(2, [&](int thread, int) { runs[thread] = 1; });
    _exit(runs[0] == 1 && runs[1] == 1 ? 0 : 1);
  }
  int status = 0;
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waited_ms + 10 >= 10000) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the child hung in run_on_threads (waited 10 s)";
    }
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
