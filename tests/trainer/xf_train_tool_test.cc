// xf-train as a process: SIGTERM (kill, systemd, Slurm, Kubernetes) and SIGHUP save a checkpoint
// and exit 0 as Ctrl-C does, and the run resumes from it; a second xf-train into a running one's
// directory is refused in one line naming the first one's PID.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reverse_corpus.h"
#include "run_command.h"
#include "temp_dir.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer {
namespace {

using test::read_file;
using test::wait_status;

// The tiny run's options on `train` into `out`, then `extra`.
std::vector<std::string> tiny_arguments(const std::string& train, const std::string& out,
                                        const std::vector<std::string>& extra) {
  std::vector<std::string> args;
  for (const auto& [name, value] : tiny_run(train, out)) {
    args.push_back("--" + name);
    args.push_back(value);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// xf-train with `arguments`, its stderr into `err`; returns its PID.
pid_t start_xf_train(const std::vector<std::string>& arguments, const std::string& err) {
  std::vector<std::string> args = {XF_TRAIN};
  args.insert(args.end(), arguments.begin(), arguments.end());
  return test::spawn(args, -1, -1, err);
}

// Waits until `path` holds `text` (a progress line); false after a minute.
bool wait_for_text(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class XfTrainProcess : public ::testing::TestWithParam<int> {
 protected:
  std::string dir_ = test::make_temp_dir("xf_train_process");
  std::string train_ = write_reverse_corpus(dir_, 60, 7);
};

// A run asked for a million steps, stopped by the signal after it has started.
TEST_P(XfTrainProcess, AStopSignalSavesACheckpointAndExitsZeroAndTheRunResumes) {
  const int signal = GetParam();
  const std::string out = dir_ + "/run", err = dir_ + "/stderr";
  const pid_t pid = start_xf_train(tiny_arguments(train_, out, {"--max-steps", "1000000", "--log-every", "1"}), err);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(err, "\nstep ")) << read_file(err);
  ASSERT_EQ(::kill(pid, signal), 0);
  EXPECT_EQ(wait_status(pid), 0) << read_file(err);
  const auto checkpoints = list_checkpoints(out);
  ASSERT_EQ(checkpoints.size(), 1u) << read_file(err);
  const int64_t step = read_checkpoint(checkpoints.back()).progress.step;
  EXPECT_NE(read_file(err).find("interrupted at step " + std::to_string(step) + "; checkpoint saved"),
            std::string::npos) << read_file(err);

  const test::CommandRun resumed = test::run_command(
      std::string(XF_TRAIN) + " --resume --out " + out + " --max-steps " + std::to_string(step + 1), dir_);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(read_checkpoint(list_checkpoints(out).back()).progress.step, step + 1);
}

INSTANTIATE_TEST_SUITE_P(Signals, XfTrainProcess, ::testing::Values(SIGTERM, SIGHUP, SIGINT),
                         [](const auto& info) {
                           return std::string(info.param == SIGTERM ? "Sigterm"
                                              : info.param == SIGHUP ? "Sighup" : "Sigint");
                         });

// No stop signal has a handler, and every thread blocks them all (the OpenMP workers of
// --threads 2 too): a handler that ran on a thread inside oneDNN's AVX-512 GEMM corrupted the
// heap (exit 134 in 5 of 20 SIGTERMs). One thread takes them with sigwait().
TEST(XfTrainSignals, NoStopSignalHasAHandlerAndEveryThreadBlocksThem) {
  const std::string dir = test::make_temp_dir("xf_train_signal_mask");
  const std::string train = write_reverse_corpus(dir, 60, 9), err = dir + "/stderr";
  const pid_t pid = start_xf_train(
      tiny_arguments(train, dir + "/run", {"--max-steps", "1000000", "--log-every", "1", "--threads", "2"}), err);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(err, "\nstep ")) << read_file(err);
  EXPECT_GE(test::expect_stop_signals_taken_by_one_thread(pid), 3);  // main, OpenMP's, the signal thread
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_status(pid), 0) << read_file(err);
}

// Stop signals at random moments of a run on two threads, a d_model 64 model: each run saves,
// exits 0 and names the step (scripts/stress/signals.sh sends hundreds).
TEST(XfTrainSignals, StopSignalsAtRandomMomentsOnTwoThreadsEachSaveAndExitZero) {
  const std::string dir = test::make_temp_dir("xf_train_signals");
  const std::string train = write_reverse_corpus(dir, 200, 10);
  std::mt19937 rng(11);
  for (int run = 0; run < 6; ++run) {
    const int signal = run % 2 ? SIGHUP : SIGTERM;
    SCOPED_TRACE("run " + std::to_string(run) + ", signal " + std::to_string(signal));
    const std::string out = dir + "/run" + std::to_string(run), err = out + ".stderr";
    const pid_t pid = start_xf_train(
        tiny_arguments(train, out, {"--max-steps", "1000000", "--log-every", "1", "--threads", "2",
                                    "--d-model", "64", "--d-ff", "128", "--heads", "4"}),
        err);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_for_text(err, "\nstep ")) << read_file(err);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng)));
    ASSERT_EQ(::kill(pid, signal), 0);
    ASSERT_EQ(wait_status(pid), 0) << read_file(err);
    const auto checkpoints = list_checkpoints(out);
    ASSERT_EQ(checkpoints.size(), 1u) << read_file(err);
    EXPECT_NE(read_file(err).find("interrupted at step " +
                                  std::to_string(read_checkpoint(checkpoints.back()).progress.step)),
              std::string::npos) << read_file(err);
  }
}

// kill -9 early in a run: metrics.csv has the row of every step whose checkpoint was saved
// (the rows were held in the stream's buffer and lost).
TEST(XfTrainSignals, AfterKillNineMetricsHoldTheRowsOfTheSavedSteps) {
  const std::string dir = test::make_temp_dir("xf_train_kill9");
  const std::string train = write_reverse_corpus(dir, 60, 12), out = dir + "/run";
  const pid_t pid = start_xf_train(
      tiny_arguments(train, out, {"--max-steps", "1000000", "--save-every", "1", "--keep", "1000"}),
      dir + "/stderr");
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (list_checkpoints(out).size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_status(pid), 128 + SIGKILL);
  const auto checkpoints = list_checkpoints(out);
  ASSERT_GE(checkpoints.size(), 3u) << read_file(dir + "/stderr");
  const std::string metrics = read_file(out + "/metrics.csv");
  for (const auto& checkpoint : checkpoints) {
    const int64_t step = read_checkpoint(checkpoint).progress.step;
    EXPECT_NE(metrics.find("\ntrain," + std::to_string(step) + ","), std::string::npos)
        << "no row for step " << step << " in\n" << metrics;
  }
}

TEST(XfTrainLock, ASecondRunIntoARunningOnesDirectoryIsRefusedNamingItsPid) {
  const std::string dir = test::make_temp_dir("xf_train_lock");
  const std::string train = write_reverse_corpus(dir, 60, 8);
  const std::string out = dir + "/run";
  const pid_t first = start_xf_train(
      tiny_arguments(train, out, {"--max-steps", "1000000", "--log-every", "1", "--save-every", "1", "--keep", "2"}),
      dir + "/first");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(wait_for_text(dir + "/first", "\nstep ")) << read_file(dir + "/first");
  // A checkpoint, so that --resume gets as far as the lock.
  for (int tries = 0; tries < 1200 && list_checkpoints(out).empty(); ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A new run and a resumed one alike.
  for (const std::vector<std::string>& arguments :
       {tiny_arguments(train, out, {"--max-steps", "1"}),
        std::vector<std::string>{"--resume", "--out", out, "--max-steps", "1"}}) {
    const pid_t second = start_xf_train(arguments, dir + "/second");
    ASSERT_GT(second, 0);
    EXPECT_EQ(wait_status(second), 1);
    EXPECT_EQ(read_file(dir + "/second"), "xf-train: " + out + ": in use by xf-train process " +
                                              std::to_string(first) + " (lock file " + out + "/xf-train.lock)\n");
  }
  ::kill(first, SIGTERM);
  EXPECT_EQ(wait_status(first), 0) << read_file(dir + "/first");
}

}  // namespace
}  // namespace xf::trainer
