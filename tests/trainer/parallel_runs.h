#pragma once
// Running xf-train as users do, in one process or under mpirun, and comparing the runs: the
// helpers of the data-parallel tests (tests/trainer/parallel_mpi_test.cc over MPI,
// tests/trainer/cuda/parallel_nccl_test.cc over NCCL). XF_MPIEXEC names mpirun.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer::parallel_test {

using Clock = std::chrono::steady_clock;

inline const std::string kXfTrain = std::string(XF_BINARY_DIR) + "/bin/xf-train";

// As root (containers, CI) OpenMPI refuses to start without the first two. In a container
// without ptrace rights its shared-memory transport cannot copy between processes directly
// (CMA): the third makes it go through its shared buffers, which work everywhere.
inline void prepare_mpirun_environment() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
}

// xf-train's command line for `values` in one process (ranks 0) or under mpirun -np ranks.
inline std::vector<std::string> command(int ranks, const std::map<std::string, std::string>& values) {
  std::vector<std::string> argv;
  if (ranks > 0) argv = {XF_MPIEXEC, "--oversubscribe", "-np", std::to_string(ranks)};
  argv.push_back(kXfTrain);
  for (const auto& [name, value] : values) {
    argv.push_back("--" + name);
    if (name != "resume") argv.push_back(value);
  }
  return argv;
}

// Starts argv with stdout and stderr to `log`, in its own process group.
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    FILE* out = std::fopen(log.c_str(), "w");
    if (out == nullptr) _exit(126);
    dup2(fileno(out), STDOUT_FILENO);
    dup2(fileno(out), STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid`; past `limit` seconds kills its process group and reports -1.
inline int wait_exit(pid_t pid, double limit, double* seconds = nullptr) {
  const auto start = Clock::now();
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - start).count();
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A run of the tests' tiny models takes seconds (a test of three runs took 7 s at most beside a
// busy loop on every core); past this bound it is taken for hung, ended, and the test fails.
constexpr double kRunLimitSeconds = 120;

inline int run(int ranks, const std::map<std::string, std::string>& values,
               const std::string& log) {
  return wait_exit(spawn(command(ranks, values), log), kRunLimitSeconds);
}

// The process mpirun (`launcher`) started as `rank`, found by its parent and environment.
inline pid_t find_rank(pid_t launcher, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(line.substr(paren + 2));
    char state;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent != launcher) continue;
    std::ifstream environ_file(entry.path() / "environ");
    std::string variable;
    while (std::getline(environ_file, variable, '\0')) {
      if (variable == wanted) return static_cast<pid_t>(std::stol(name));
    }
  }
  return 0;
}

inline bool wait_for(const std::string& path, double limit) {
  const auto start = Clock::now();
  while (!std::filesystem::exists(path)) {
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// metrics.csv rows of one kind ("train", "valid") as fields.
inline std::vector<std::vector<std::string>> csv_rows(const std::string& run, const std::string& kind) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(run + "/metrics.csv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(kind + ",", 0) != 0) continue;
    std::vector<std::string> fields;
    std::stringstream row(line);
    std::string field;
    while (std::getline(row, field, ',')) fields.push_back(field);
    rows.push_back(fields);
  }
  return rows;
}

// Whether parameter `index` is a key bias: adding a constant to every attention logit of a
// query leaves the softmax unchanged, so the loss does not depend on these and their true
// gradient is zero. What the backward pass computes for them is rounding noise, which Adam
// (dividing by its own running size) turns into full-size steps: they drift differently under
// another summation order without changing any output (the losses are compared separately).
inline std::vector<bool> key_biases(const ModelConfig& config) {
  std::vector<bool> mask;
  const size_t d = config.d_model;
  for (const auto& spec : transformer_parameters(config)) {
    const size_t size = static_cast<size_t>(spec.elements());
    const size_t start = mask.size();
    mask.resize(start + size, false);
    auto ends_with = [&](const std::string& suffix) {
      return spec.name.size() >= suffix.size() &&
             spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    // Fused [query | key | value] and [key | value] (transformer.cc).
    if (ends_with(std::string(schema::kSelfAttentionQkv.name) + schema::kBias)) std::fill_n(mask.begin() + start + d, d, true);
    if (ends_with(std::string(schema::kCrossAttentionKeyValue.name) + schema::kBias)) std::fill_n(mask.begin() + start, d, true);
  }
  return mask;
}

// The parameters of two runs that summed the same gradients in another order. An f32 sum of
// two partial sums differs from one sum by a few units in the last place; Adam carries that into
// each update at about the same relative size, so after a dozen steps at a learning rate of
// ~1e-2 the parameters agree to a few 1e-6 (measured: 1.5e-6 to 2.7e-6, on weights up to 0.74).
inline void expect_parameters_agree(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  const std::vector<bool> skip = key_biases(a.config);
  ASSERT_EQ(skip.size(), a.parameters.size());
  double worst = 0;
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    if (skip[i]) continue;
    const double difference = std::abs(double(a.parameters[i]) - double(b.parameters[i]));
    worst = std::max(worst, difference / std::max(1.0, std::abs(double(a.parameters[i]))));
  }
  EXPECT_LT(worst, 1e-5);
  std::cout << "largest parameter difference (relative, floor 1; key biases aside): " << worst
            << "\n";
}

// Losses printed with six significant digits: equal up to the last digit.
inline void expect_losses_agree(const std::vector<std::vector<std::string>>& a,
                         const std::vector<std::vector<std::string>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i][1], b[i][1]);  // the same step
    EXPECT_NEAR(std::stod(a[i][3]), std::stod(b[i][3]), 2e-5 * std::stod(a[i][3]))
        << a[i][0] << " step " << a[i][1];
  }
}

}  // namespace xf::trainer::parallel_test
