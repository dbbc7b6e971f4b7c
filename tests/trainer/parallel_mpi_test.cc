// Data-parallel xf-train over MPI, run as users run it: `mpirun -np 2 xf-train ...` against one
// process on the same global batches (losses and parameters agree up to the order of the f32
// sums), exact resume on two ranks and on another rank count, and faults: a killed rank, a rank
// that stops answering, and a clean stop forwarded by mpirun. Built where MPI is found.
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
#include <sstream>
#include <thread>

#include "reverse_corpus.h"
#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"

namespace xf::trainer {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kXfTrain = std::string(XF_BINARY_DIR) + "/bin/xf-train";

class ParallelMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    // Root in containers and CI: OpenMPI refuses without these.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    dir_ = std::string(XF_BINARY_DIR) + "/parallel_mpi_test/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    train_ = write_reverse_corpus(dir_, 120, 2);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // xf-train's command line for `values` in one process (ranks 0) or under mpirun -np ranks.
  static std::vector<std::string> command(int ranks, const std::map<std::string, std::string>& values) {
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
  static pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
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
  static int wait_exit(pid_t pid, double limit, double* seconds = nullptr) {
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

  int run(int ranks, const std::map<std::string, std::string>& values, const std::string& log) {
    return wait_exit(spawn(command(ranks, values), log), 300);
  }

  // The process mpirun (`launcher`) started as `rank`, found by its parent and environment.
  static pid_t find_rank(pid_t launcher, int rank) {
    const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    for (const auto& entry : fs::directory_iterator("/proc")) {
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

  static bool wait_for(const std::string& path, double limit) {
    const auto start = Clock::now();
    while (!fs::exists(path)) {
      if (std::chrono::duration<double>(Clock::now() - start).count() > limit) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  static std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // metrics.csv rows of one kind ("train", "valid") as fields.
  static std::vector<std::vector<std::string>> csv_rows(const std::string& run, const std::string& kind) {
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

  std::map<std::string, std::string> tiny(const std::string& run_name, int steps) {
    auto values = tiny_run(train_, dir_ + "/" + run_name);
    values["max-steps"] = std::to_string(steps);
    return values;
  }

  std::string dir_, train_;
};

// Whether parameter `index` is a key bias: adding a constant to every attention logit of a
// query leaves the softmax unchanged, so the loss does not depend on these and their true
// gradient is zero. What the backward pass computes for them is rounding noise, which Adam
// (dividing by its own running size) turns into full-size steps: they drift differently under
// another summation order without changing any output (the losses are compared separately).
std::vector<bool> key_biases(const ModelConfig& config) {
  std::vector<bool> mask;
  const size_t d = config.d_model;
  for (const auto& spec : transformer_parameters(config)) {
    size_t size = 1;
    for (uint64_t extent : spec.shape) size *= extent;
    const size_t start = mask.size();
    mask.resize(start + size, false);
    auto ends_with = [&](const std::string& suffix) {
      return spec.name.size() >= suffix.size() &&
             spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    // Fused [query | key | value] and [key | value] (transformer.cc).
    if (ends_with("self_attention.qkv.bias")) std::fill_n(mask.begin() + start + d, d, true);
    if (ends_with("cross_attention.key_value.bias")) std::fill_n(mask.begin() + start, d, true);
  }
  return mask;
}

// The parameters of two runs that summed the same gradients in another order. An f32 sum of
// two partial sums differs from one sum by a few units in the last place; Adam carries that into
// each update at about the same relative size, so after a dozen steps at a learning rate of
// ~1e-2 the parameters agree to a few 1e-6 (measured: 2.7e-6 at most, on weights up to 0.74).
void expect_parameters_agree(const Checkpoint& a, const Checkpoint& b) {
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
void expect_losses_agree(const std::vector<std::vector<std::string>>& a,
                         const std::vector<std::vector<std::string>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i][1], b[i][1]);  // the same step
    EXPECT_NEAR(std::stod(a[i][3]), std::stod(b[i][3]), 2e-5 * std::stod(a[i][3]))
        << a[i][0] << " step " << a[i][1];
  }
}

TEST_F(ParallelMpi, TwoRanksTrainAsOneProcessOnTheSameBatches) {
  const int steps = 12;
  auto one = tiny("one", steps), two = tiny("two", steps);
  for (auto* values : {&one, &two}) {
    (*values)["dropout"] = "0";  // masks depend on each share's shape: see docs/TRAINING.md
    (*values)["dev"] = train_;
    (*values)["valid-every"] = "6";
    (*values)["valid-bleu-sentences"] = "64";  // two chunks of 32: one per rank
  }
  ASSERT_EQ(run(0, one, dir_ + "/one.log"), 0) << read_text(dir_ + "/one.log");
  ASSERT_EQ(run(2, two, dir_ + "/two.log"), 0) << read_text(dir_ + "/two.log");
  EXPECT_NE(read_text(dir_ + "/two.log").find("data parallel: MPI, 2 ranks"), std::string::npos);

  expect_losses_agree(csv_rows(dir_ + "/one", "train"), csv_rows(dir_ + "/two", "train"));
  auto valid_one = csv_rows(dir_ + "/one", "valid"), valid_two = csv_rows(dir_ + "/two", "valid");
  expect_losses_agree(valid_one, valid_two);
  for (size_t i = 0; i < valid_one.size(); ++i) EXPECT_EQ(valid_one[i][7], valid_two[i][7]);  // BLEU

  Checkpoint a = read_checkpoint(dir_ + "/one/" + checkpoint_name(steps));
  Checkpoint b = read_checkpoint(dir_ + "/two/" + checkpoint_name(steps));
  expect_parameters_agree(a, b);
  EXPECT_EQ(a.progress.tokens_seen, b.progress.tokens_seen);
  EXPECT_EQ(a.progress.data.batch_index, b.progress.data.batch_index);
  EXPECT_EQ(a.adam.step, b.adam.step);
}

TEST_F(ParallelMpi, BatchesOfFewerRowsThanRanksLeaveARankIdle) {
  // Pairs of 4..7 pieces in batches of at most 12 padded tokens: one or two rows a batch.
  const int steps = 10;
  auto one = tiny("one", steps), two = tiny("two", steps);
  for (auto* values : {&one, &two}) {
    (*values)["dropout"] = "0";
    (*values)["max-length"] = "7";
    (*values)["batch-tokens"] = "12";
  }
  ASSERT_EQ(run(0, one, dir_ + "/one.log"), 0) << read_text(dir_ + "/one.log");
  ASSERT_EQ(run(2, two, dir_ + "/two.log"), 0) << read_text(dir_ + "/two.log");
  expect_losses_agree(csv_rows(dir_ + "/one", "train"), csv_rows(dir_ + "/two", "train"));
  expect_parameters_agree(read_checkpoint(dir_ + "/one/" + checkpoint_name(steps)),
                          read_checkpoint(dir_ + "/two/" + checkpoint_name(steps)));
}

TEST_F(ParallelMpi, ResumedTwoRankRunEqualsAStraightOneBitwise) {
  const int steps = 12;
  auto straight = tiny("straight", steps);  // with dropout: each share's masks are reproducible
  ASSERT_EQ(run(2, straight, dir_ + "/straight.log"), 0) << read_text(dir_ + "/straight.log");
  auto first = tiny("parts", 5);
  ASSERT_EQ(run(2, first, dir_ + "/first.log"), 0) << read_text(dir_ + "/first.log");
  ASSERT_EQ(run(2, {{"out", dir_ + "/parts"}, {"resume", "1"}, {"max-steps", std::to_string(steps)}},
                dir_ + "/second.log"),
            0)
      << read_text(dir_ + "/second.log");
  EXPECT_NE(read_text(dir_ + "/second.log").find("resuming from"), std::string::npos);

  auto rows_straight = csv_rows(dir_ + "/straight", "train");
  auto rows_parts = csv_rows(dir_ + "/parts", "train");
  ASSERT_EQ(rows_parts.size(), static_cast<size_t>(steps));
  for (size_t i = 0; i < rows_straight.size(); ++i) {
    EXPECT_EQ(rows_parts[i][3], rows_straight[i][3]) << "step " << i + 1;
  }
  Checkpoint a = read_checkpoint(dir_ + "/straight/" + checkpoint_name(steps));
  Checkpoint b = read_checkpoint(dir_ + "/parts/" + checkpoint_name(steps));
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_EQ(a.adam.second_moment, b.adam.second_moment);
}

TEST_F(ParallelMpi, ResumesOnAnotherNumberOfRanks) {
  const int steps = 12;
  auto straight = tiny("straight", steps);
  straight["dropout"] = "0";
  ASSERT_EQ(run(0, straight, dir_ + "/straight.log"), 0) << read_text(dir_ + "/straight.log");
  auto first = tiny("parts", 5);
  first["dropout"] = "0";
  ASSERT_EQ(run(2, first, dir_ + "/first.log"), 0) << read_text(dir_ + "/first.log");
  // Two ranks saved it; one process continues it.
  ASSERT_EQ(run(0, {{"out", dir_ + "/parts"}, {"resume", "1"}, {"max-steps", std::to_string(steps)}},
                dir_ + "/second.log"),
            0)
      << read_text(dir_ + "/second.log");
  expect_losses_agree(csv_rows(dir_ + "/straight", "train"), csv_rows(dir_ + "/parts", "train"));
  expect_parameters_agree(read_checkpoint(dir_ + "/straight/" + checkpoint_name(steps)),
                          read_checkpoint(dir_ + "/parts/" + checkpoint_name(steps)));
}

TEST_F(ParallelMpi, AKilledRankEndsEveryRankAndKeepsTheCheckpoints) {
  auto values = tiny("run", 100000000);
  values["save-every"] = "20";
  values["keep"] = "0";
  const std::string log = dir_ + "/run.log";
  pid_t launcher = spawn(command(2, values), log);
  ASSERT_TRUE(wait_for(dir_ + "/run/" + checkpoint_name(40), 120)) << read_text(log);
  pid_t victim = find_rank(launcher, 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  double seconds = 0;
  const int status = wait_exit(launcher, 60, &seconds);
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the run did not end within 60 s of a rank's death";
  const std::string text = read_text(log);
  EXPECT_NE(text.find("xf-train: rank 0 of 2: ended by the launcher"), std::string::npos) << text;
  std::cout << "all ranks ended " << seconds << " s after rank 1 was killed\n";
  // Every checkpoint written is whole.
  const auto checkpoints = list_checkpoints(dir_ + "/run");
  ASSERT_GE(checkpoints.size(), 2u);
  for (const auto& checkpoint : checkpoints) EXPECT_NO_THROW(read_checkpoint(checkpoint)) << checkpoint;
}

TEST_F(ParallelMpi, ARankThatStopsAnsweringEndsTheRunAfterTheTimeout) {
  auto values = tiny("run", 100000000);
  values["save-every"] = "20";
  values["comm-timeout"] = "2";
  const std::string log = dir_ + "/run.log";
  pid_t launcher = spawn(command(2, values), log);
  ASSERT_TRUE(wait_for(dir_ + "/run/" + checkpoint_name(40), 120)) << read_text(log);
  pid_t frozen = find_rank(launcher, 1);
  ASSERT_GT(frozen, 0);
  kill(frozen, SIGSTOP);
  double seconds = 0;
  const int status = wait_exit(launcher, 60, &seconds);
  kill(frozen, SIGKILL);  // in case the launcher left it behind (it is stopped)
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the run hung";
  const std::string text = read_text(log);
  EXPECT_NE(text.find("xf-train: rank 0 of 2: no answer from the other ranks for 2 s"),
            std::string::npos)
      << text;
  std::cout << "all ranks ended " << seconds << " s after rank 1 stopped (timeout 2 s)\n";
  for (const auto& checkpoint : list_checkpoints(dir_ + "/run")) {
    EXPECT_NO_THROW(read_checkpoint(checkpoint)) << checkpoint;
  }
}

TEST_F(ParallelMpi, SigusrToMpirunStopsEveryRankWithACheckpoint) {
  auto values = tiny("run", 100000000);
  values["save-every"] = "20";
  const std::string log = dir_ + "/run.log";
  pid_t launcher = spawn(command(2, values), log);
  ASSERT_TRUE(wait_for(dir_ + "/run/" + checkpoint_name(40), 120)) << read_text(log);
  kill(launcher, SIGUSR1);  // mpirun forwards it to every rank
  ASSERT_EQ(wait_exit(launcher, 60), 0) << read_text(log);
  const std::string text = read_text(log);
  const size_t at = text.find("interrupted at step ");
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t step = std::stoll(text.substr(at + 20));
  EXPECT_EQ(read_checkpoint(dir_ + "/run/" + checkpoint_name(step)).progress.step, step);
}

}  // namespace
}  // namespace xf::trainer
