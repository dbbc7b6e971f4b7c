// Data-parallel xf-train on GPUs, one rank per GPU summing gradients with NCCL: `mpirun -np G
// xf-train --device cuda-f32` against one process on one GPU (losses and parameters agree up to
// the order of the f32 sums), and the same ranks bootstrapped from XF_RANKS and NCCL_COMM_ID
// without MPI. Skipped, saying why, with fewer than two GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "parallel_runs.h"
#include "reverse_corpus.h"

namespace xf::trainer {
namespace {
namespace fs = std::filesystem;
using namespace parallel_test;

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

class ParallelNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = visible_gpus();
    if (gpus_ < 2) GTEST_SKIP() << "skipped: one rank per GPU needs 2 GPUs, " << gpus_ << " visible";
    prepare_mpirun_environment();
    dir_ = std::string(XF_BINARY_DIR) + "/parallel_nccl_test/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    train_ = write_reverse_corpus(dir_, 120, 2);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  std::map<std::string, std::string> tiny(const std::string& run_name, int steps) {
    auto values = tiny_run(train_, dir_ + "/" + run_name);
    values["max-steps"] = std::to_string(steps);
    values["device"] = "cuda-f32";  // f32: comparable to a few units in the last place
    values["attention-dropout"] = "0.1";  // and dropout 0.1: each rank draws its rows' masks
    return values;
  }

  void expect_same_training(const std::string& one, const std::string& many, int steps) {
    expect_losses_agree(csv_rows(dir_ + "/" + one, "train"), csv_rows(dir_ + "/" + many, "train"));
    expect_parameters_agree(read_checkpoint(dir_ + "/" + one + "/" + checkpoint_name(steps)),
                            read_checkpoint(dir_ + "/" + many + "/" + checkpoint_name(steps)));
  }

  int gpus_ = 0;
  std::string dir_, train_;
};

TEST_F(ParallelNccl, OneRankPerGpuTrainsAsOneProcess) {
  const int steps = 12;
  ASSERT_EQ(run(0, tiny("one", steps), dir_ + "/one.log"), 0) << read_text(dir_ + "/one.log");
  ASSERT_EQ(run(gpus_, tiny("many", steps), dir_ + "/many.log"), 0) << read_text(dir_ + "/many.log");
  EXPECT_NE(read_text(dir_ + "/many.log").find("data parallel: NCCL, " + std::to_string(gpus_)),
            std::string::npos)
      << read_text(dir_ + "/many.log");
  expect_same_training("one", "many", steps);
}

TEST_F(ParallelNccl, RanksFromEnvironmentVariablesTrainAsOneProcess) {
  const int steps = 12;
  ASSERT_EQ(run(0, tiny("one", steps), dir_ + "/one.log"), 0) << read_text(dir_ + "/one.log");
  setenv("NCCL_COMM_ID", "127.0.0.1:29517", 1);
  setenv("XF_RANKS", "2", 1);
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    setenv("XF_RANK", std::to_string(rank).c_str(), 1);
    ranks.push_back(spawn(command(0, tiny("env", steps)), dir_ + "/env" + std::to_string(rank) + ".log"));
  }
  for (const char* name : {"NCCL_COMM_ID", "XF_RANKS", "XF_RANK"}) unsetenv(name);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(wait_exit(ranks[rank], 300), 0) << read_text(dir_ + "/env" + std::to_string(rank) + ".log");
  }
  expect_same_training("one", "env", steps);
}

}  // namespace
}  // namespace xf::trainer
