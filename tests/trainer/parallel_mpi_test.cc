// Data-parallel xf-train over MPI, run as users run it: `mpirun -np 2 xf-train ...` against one
// process on the same global batches (losses and parameters agree up to the order of the f32
// sums), exact resume on two ranks and on another rank count, and faults: a killed rank, a rank
// that stops answering, and a clean stop forwarded by mpirun. Built where MPI is found.
#include <gtest/gtest.h>

#include <filesystem>

#include "parallel_runs.h"
#include "reverse_corpus.h"

namespace xf::trainer {
namespace {
namespace fs = std::filesystem;
using namespace parallel_test;

class ParallelMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    prepare_mpirun_environment();
    dir_ = std::string(XF_BINARY_DIR) + "/parallel_mpi_test/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    train_ = write_reverse_corpus(dir_, 120, 2);
  }
  void TearDown() override {
    for (pid_t launcher : long_runs_) {  // still running after a failed check: end it
      int status = 0;
      if (waitpid(launcher, &status, WNOHANG) == 0) {
        kill(-launcher, SIGKILL);
        waitpid(launcher, &status, 0);
      }
    }
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // A rank that waits 30 s for the others ends the run in one line (the watchdog), well before
  // kRunLimitSeconds ends it from outside.
  std::map<std::string, std::string> tiny(const std::string& run_name, int steps) {
    return tiny_run(train_, dir_ + "/" + run_name,
                    {{"max-steps", std::to_string(steps)}, {"comm-timeout", "30"}});
  }

  // Starts a long run on two ranks (extra options added) and returns mpirun's pid once step 40
  // is saved; its output goes to <dir>/run.log.
  pid_t start_long_run(const std::map<std::string, std::string>& extra) {
    auto values = tiny("run", 100000000);
    values["save-every"] = "20";
    for (const auto& [name, value] : extra) values[name] = value;
    pid_t launcher = spawn(command(2, values), log());
    long_runs_.push_back(launcher);
    EXPECT_TRUE(wait_for(dir_ + "/run/" + checkpoint_name(40), 120)) << read_text(log());
    return launcher;
  }
  std::string log() const { return dir_ + "/run.log"; }

  // Sends `signal` to rank 1 of a long run (extra options added) and waits at most 60 s for the
  // run to end: *status its exit status (-1: still running), *seconds the wait, *rank rank 1.
  void signal_rank_one(const std::map<std::string, std::string>& extra, int signal, pid_t* rank,
                       int* status, double* seconds) {
    const pid_t launcher = start_long_run(extra);
    *rank = find_rank(launcher, 1);
    ASSERT_GT(*rank, 0);
    kill(*rank, signal);
    *status = wait_exit(launcher, 60, seconds);
  }

  // `steps` on `straight_ranks` into straight/; 5 on two ranks into parts/, resumed there to `steps`
  // on `resume_ranks` (its output in second.log).
  void run_straight_and_resumed(int steps, int straight_ranks, int resume_ranks) {
    ASSERT_EQ(run(straight_ranks, tiny("straight", steps), dir_ + "/straight.log"), 0) << read_text(dir_ + "/straight.log");
    ASSERT_EQ(run(2, tiny("parts", 5), dir_ + "/first.log"), 0) << read_text(dir_ + "/first.log");
    ASSERT_EQ(run(resume_ranks, {{"out", dir_ + "/parts"}, {"resume", "1"}, {"max-steps", std::to_string(steps)}},
                  dir_ + "/second.log"), 0)
        << read_text(dir_ + "/second.log");
  }

  std::string dir_, train_;
  std::vector<pid_t> long_runs_;
};

TEST_F(ParallelMpi, TwoRanksTrainAsOneProcessOnTheSameBatches) {
  const int steps = 12;
  auto one = tiny("one", steps), two = tiny("two", steps);
  for (auto* values : {&one, &two}) {
    (*values)["attention-dropout"] = "0.1";  // and dropout 0.1: each rank draws its rows' masks
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
    (*values)["attention-dropout"] = "0.1";
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
  ASSERT_NO_FATAL_FAILURE(run_straight_and_resumed(steps, 2, 2));
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
  ASSERT_NO_FATAL_FAILURE(run_straight_and_resumed(steps, 0, 0));  // parts/ saved by two ranks, resumed by one process
  expect_losses_agree(csv_rows(dir_ + "/straight", "train"), csv_rows(dir_ + "/parts", "train"));
  expect_parameters_agree(read_checkpoint(dir_ + "/straight/" + checkpoint_name(steps)),
                          read_checkpoint(dir_ + "/parts/" + checkpoint_name(steps)));
}

TEST_F(ParallelMpi, AKilledRankEndsEveryRankAndKeepsTheCheckpoints) {
  pid_t victim = 0;
  int status = 0;
  double seconds = 0;
  ASSERT_NO_FATAL_FAILURE(signal_rank_one({{"keep", "0"}}, SIGKILL, &victim, &status, &seconds));
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the run did not end within 60 s of a rank's death";
  const std::string text = read_text(log());
  EXPECT_NE(text.find("xf-train: rank 0 of 2: ended by the launcher"), std::string::npos) << text;
  std::cout << "all ranks ended " << seconds << " s after rank 1 was killed\n";
  // Every checkpoint written is whole.
  const auto checkpoints = list_checkpoints(dir_ + "/run");
  ASSERT_GE(checkpoints.size(), 2u);
  for (const auto& checkpoint : checkpoints) EXPECT_NO_THROW(read_checkpoint(checkpoint)) << checkpoint;
}

TEST_F(ParallelMpi, ARankThatStopsAnsweringEndsTheRunAfterTheTimeout) {
  pid_t frozen = 0;
  int status = 0;
  double seconds = 0;
  // 15 s: under a busy loop on each core beside other work (load 20 on 2 cores) a 3 s timeout
  // ended a healthy run before step 40 (1 of 50 runs of scripts/stress/process_tests.sh).
  ASSERT_NO_FATAL_FAILURE(signal_rank_one({{"comm-timeout", "15"}}, SIGSTOP, &frozen, &status, &seconds));
  kill(frozen, SIGKILL);  // in case the launcher left it behind (it is stopped)
  EXPECT_NE(status, 0);
  EXPECT_NE(status, -1) << "the run hung";
  const std::string text = read_text(log());
  EXPECT_NE(text.find("xf-train: rank 0 of 2: no answer from the other ranks for 15 s"),
            std::string::npos)
      << text;
  std::cout << "all ranks ended " << seconds << " s after rank 1 stopped (timeout 15 s)\n";
  for (const auto& checkpoint : list_checkpoints(dir_ + "/run")) {
    EXPECT_NO_THROW(read_checkpoint(checkpoint)) << checkpoint;
  }
}

TEST_F(ParallelMpi, SigusrToMpirunStopsEveryRankWithACheckpoint) {
  pid_t launcher = start_long_run({});
  kill(launcher, SIGUSR1);  // mpirun forwards it to every rank
  ASSERT_EQ(wait_exit(launcher, 60), 0) << read_text(log());
  const std::string text = read_text(log());
  const size_t at = text.find("interrupted at step ");
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t step = std::stoll(text.substr(at + 20));
  EXPECT_EQ(read_checkpoint(dir_ + "/run/" + checkpoint_name(step)).progress.step, step);
}

}  // namespace
}  // namespace xf::trainer
