// xf-train started as several ranks says in one line when this build cannot join them (no MPI
// under mpirun, no NCCL for GPU ranks, no GPU for a rank), and exits 1 before any work.
#include <gtest/gtest.h>

#include <filesystem>

#include "parallel_runs.h"
#include "reverse_corpus.h"

namespace xf::trainer {
namespace {
namespace fs = std::filesystem;
using namespace parallel_test;

class Ranks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(XF_BINARY_DIR) + "/ranks_test/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs a tiny xf-train in one process with `environment` added; returns its output.
  std::string run_with(const std::map<std::string, std::string>& environment, int* status) {
    const auto values = tiny_run(write_reverse_corpus(dir_, 20, 1), dir_ + "/run", {{"device", "cuda"}, {"max-steps", "1"}});
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    *status = wait_exit(spawn(command(0, values), dir_ + "/log"), 120);
    for (const auto& [name, value] : environment) unsetenv(name.c_str());
    return read_text(dir_ + "/log");
  }

  std::string dir_;
};

TEST_F(Ranks, GpuRanksThisBuildCannotJoinAreAOneLineError) {
  int status = 0;
  const std::string output =
      run_with({{"XF_RANKS", "2"}, {"XF_RANK", "1"}, {"NCCL_COMM_ID", "127.0.0.1:1"}}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
#ifdef XF_TEST_WITH_NCCL
  // Rank 1 takes the second GPU of its machine (XF_LOCAL_RANK defaults to XF_RANK).
  if (output.find("but this machine shows") == std::string::npos) {
    GTEST_SKIP() << "skipped: this machine has a second GPU: " << output;
  }
  EXPECT_EQ(output.rfind("xf-train: rank 1 takes GPU 1 (one GPU per rank on each machine)", 0), 0u)
      << output;
#else
  EXPECT_EQ(output, "xf-train: XF_RANKS=2 asks for GPU ranks, but this xf-train was built without "
                    "NCCL\n");
#endif
}

TEST_F(Ranks, RanksWithoutTheirVariablesAreAOneLineError) {
  int status = 0;
  std::string output = run_with({{"XF_RANKS", "2"}, {"XF_RANK", "2"}}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(output, "xf-train: XF_RANKS=2 needs XF_RANK in 0..1\n");
  output = run_with({{"XF_RANKS", "2"}, {"XF_RANK", "0"}}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(output, "xf-train: XF_RANKS needs NCCL_COMM_ID=HOST:PORT, where rank 0 listens\n");
}

#ifndef XF_TEST_WITH_MPI
TEST_F(Ranks, MpirunRanksWithoutMpiAreAOneLineError) {
  int status = 0;
  const std::string output = run_with({{"OMPI_COMM_WORLD_SIZE", "2"}}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(output, "xf-train: started as 2 ranks by mpirun, but this xf-train was built without "
                    "MPI: it trains in one process (install libopenmpi-dev and rebuild)\n");
}
#endif

}  // namespace
}  // namespace xf::trainer
