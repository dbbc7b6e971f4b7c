// The run directory as one run owns it (xf/trainer/run_directory.h) and what --resume may
// change: a lock naming its holder (a stale one taken over), no new run mixed into an earlier
// one without --overwrite, a resumed run that keeps its architecture and vocabulary, and the
// leftovers of processes that died while saving tidied at start.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "error_of.h"
#include "reverse_corpus.h"
#include "run_command.h"  // read_file
#include "temp_dir.h"
#include "xf/error.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/run_directory.h"
#include "xf/trainer/train_loop.h"

namespace xf::trainer {
namespace {

using test::error_of;
namespace fs = std::filesystem;

using test::read_file;

// The PID of a process that has ended (a child started and waited for).
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

std::string host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

TEST(DataRunDirectory, ASecondHolderIsRefusedNamingTheFirstAndTheLockGoesWithIt) {
  const std::string dir = test::make_temp_dir("run_lock") + "/run";
  const std::string lock = dir + "/xf-train.lock";
  std::ostringstream log;
  {
    RunDirectory held(dir, false, false, log);
    EXPECT_EQ(read_file(lock), std::to_string(::getpid()) + " " + host() + "\n");
    // flock() locks per open file: a second claim conflicts even from the same process.
    EXPECT_EQ(error_of([&] { RunDirectory(dir, true, false, log); }),
              dir + ": in use by xf-train process " + std::to_string(::getpid()) + " (lock file " + lock + ")");
  }
  EXPECT_FALSE(fs::exists(lock));  // removed when the run ends
  RunDirectory again(dir, true, false, log);
  EXPECT_TRUE(fs::exists(lock));
}

TEST(DataRunDirectory, ALockFileOfADeadProcessIsTakenOver) {
  const std::string dir = test::make_temp_dir("run_stale");
  std::ofstream(dir + "/xf-train.lock") << dead_pid() << " " << host() << "\n";
  std::ostringstream log;
  RunDirectory taken(dir, true, false, log);
  EXPECT_EQ(read_file(dir + "/xf-train.lock"), std::to_string(::getpid()) + " " + host() + "\n");
}

TEST(DataRunDirectory, LeftoversOfDeadProcessesAreTidiedAndALiveOnesAreKept) {
  const std::string dir = test::make_temp_dir("run_leftovers");
  const std::string dead = std::to_string(dead_pid()), alive = std::to_string(::getpid());
  fs::create_directories(dir + "/.step-000009.tmp." + dead);
  std::ofstream(dir + "/.step-000009.tmp." + dead + "/parameters.bin") << std::string(1000, 'x');
  std::ofstream(dir + "/metrics.csv.tmp." + dead) << "half a table";
  // A checkpoint moved aside to be replaced, and no replacement in place: put back.
  fs::create_directories(dir + "/.best.old." + dead);
  std::ofstream(dir + "/.best.old." + dead + "/checkpoint.txt") << "the previous best";
  // Moved aside while its replacement is in place: removed.
  fs::create_directories(dir + "/step-000004");
  fs::create_directories(dir + "/.step-000004.old." + dead);
  // A live process's temporary (another tool writing here) is not ours to remove.
  fs::create_directories(dir + "/.step-000010.tmp." + alive);
  std::ostringstream log;
  { RunDirectory tidied(dir, /*resume=*/true, false, log); }
  EXPECT_FALSE(fs::exists(dir + "/.step-000009.tmp." + dead));
  EXPECT_FALSE(fs::exists(dir + "/metrics.csv.tmp." + dead));
  EXPECT_FALSE(fs::exists(dir + "/.best.old." + dead));
  EXPECT_EQ(read_file(dir + "/best/checkpoint.txt"), "the previous best");
  EXPECT_FALSE(fs::exists(dir + "/.step-000004.old." + dead));
  EXPECT_TRUE(fs::exists(dir + "/step-000004"));
  EXPECT_TRUE(fs::exists(dir + "/.step-000010.tmp." + alive));
  EXPECT_NE(log.str().find("removed " + dir + "/.step-000009.tmp." + dead), std::string::npos) << log.str();
}

// A new run into the directory of an earlier one (another --d-model here) is refused; with
// --overwrite the earlier run's files go first, so that nothing of it mixes in, and a file that
// is not xf-train's stays.
TEST(DataRunDirectory, ANewRunIntoAnEarlierOneIsRefusedUnlessOverwrite) {
  const std::string dir = test::make_temp_dir("run_mixed");
  const std::string train = write_reverse_corpus(dir, 40, 3);
  std::ostringstream log;
  run_training(train_options_from_map(tiny_run(train, dir + "/run", {{"max-steps", "3"}, {"save-every", "1"}, {"keep", "0"}})),
               log);
  ASSERT_EQ(list_checkpoints(dir + "/run").size(), 3u);
  std::ofstream(dir + "/run/notes.txt") << "the user's";

  auto second = tiny_run(train, dir + "/run", {{"d-model", "32"}, {"heads", "4"}, {"max-steps", "1"}});
  const std::string refused = error_of([&] { run_training(train_options_from_map(second), log); });
  EXPECT_EQ(refused.rfind(dir + "/run: holds an earlier run (", 0), 0u) << refused;
  EXPECT_NE(refused.find("continue it with --resume, replace it with --overwrite, or choose another --out"),
            std::string::npos) << refused;
  EXPECT_EQ(list_checkpoints(dir + "/run").size(), 3u);  // untouched

  second["overwrite"] = "1";
  const TrainSummary replaced = run_training(train_options_from_map(second), log);
  const auto checkpoints = list_checkpoints(dir + "/run");
  ASSERT_EQ(checkpoints.size(), 1u);
  EXPECT_EQ(read_checkpoint(checkpoints[0]).config.d_model, 32u);
  EXPECT_EQ(replaced.first_step, 0);
  EXPECT_EQ(read_file(dir + "/run/notes.txt"), "the user's");
  // The metrics hold the new run's single step only.
  std::ifstream csv(dir + "/run/metrics.csv");
  int train_rows = 0;
  for (std::string line; std::getline(csv, line);) train_rows += line.rfind("train,", 0) == 0;
  EXPECT_EQ(train_rows, 1);
}

TEST(DataRunDirectory, ResumeRefusesAChangedArchitectureOrVocabularyOption) {
  const std::string dir = test::make_temp_dir("run_resume");
  const std::string train = write_reverse_corpus(dir, 40, 4);
  std::ostringstream log;
  run_training(train_options_from_map(tiny_run(train, dir + "/run", {{"max-steps", "2"}})), log);

  const auto resume_with = [&](const std::string& name, const std::string& value) {
    return error_of([&] {
      resolve_train_options({{"out", dir + "/run"}, {"resume", "1"}, {"max-steps", "3"}, {name, value}});
    });
  };
  const std::string fixed = " (a run keeps the architecture and vocabulary it started with; start a new run in another --out)";
  EXPECT_EQ(resume_with("d-model", "64"), "--resume: --d-model 64 differs from the run's --d-model 16" + fixed);
  EXPECT_EQ(resume_with("layers", "2"), "--resume: --layers 2 differs from the run's --encoder-layers 1" + fixed);
  EXPECT_EQ(resume_with("decoder-layers", "3"),
            "--resume: --decoder-layers 3 differs from the run's --decoder-layers 1" + fixed);
  // The vocabulary the run has (a character model of this corpus has fewer pieces than asked).
  const std::string vocabulary = read_checkpoint(list_checkpoints(dir + "/run").back()).options.at("vocab-size");
  EXPECT_EQ(resume_with("vocab-size", "30"), "--resume: --vocab-size 30 differs from the run's --vocab-size " + vocabulary + fixed);
  EXPECT_EQ(resume_with("spm-type", "bpe"), "--resume: --spm-type bpe differs from the run's --spm-type char" + fixed);
  EXPECT_EQ(resume_with("norm", "pre"), "--resume: --norm pre differs from the run's --norm post" + fixed);
  // It is a command-line error (xf-train exits 2 on it).
  EXPECT_THROW(resolve_train_options({{"out", dir + "/run"}, {"resume", "1"}, {"d-model", "64"}}), OptionError);
  EXPECT_EQ(error_of([&] {
              resolve_train_options({{"out", dir + "/run"}, {"resume", "1"}, {"overwrite", "1"}});
            }),
            "--resume and --overwrite exclude each other");
  // The same values, and the options a resumed run may change, pass.
  const TrainOptions same = resolve_train_options(
      {{"out", dir + "/run"}, {"resume", "1"}, {"d-model", "16"}, {"layers", "1"}, {"max-steps", "3"}, {"lr-scale", "2"}});
  EXPECT_EQ(same.d_model, 16u);
  EXPECT_EQ(same.max_steps, 3);
  EXPECT_EQ(same.lr_scale, 2.0);
}

}  // namespace
}  // namespace xf::trainer
