// The command line every tool shares (tools/common/tool_main.h): -h/--help and --version on
// stdout with exit 0, an unknown option in one line with exit 2, and output that cannot be
// written (a full device) in one line with exit 1; then each tool's own output into a full
// device, and xf-run's progress summary.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "progress.h"
#include "run_command.h"
#include "tiny_model.h"
#include "xf/xf.h"

namespace {

using ToolRun = xf::test::CommandRun;
using xf::test::read_file;

const std::string& work_dir() {
  static const std::string dir = xf::test::make_temp_dir("tool_cli");
  return dir;
}

// Runs `command` (a shell command line) with stdout into `out_path` (default: captured).
ToolRun shell(const std::string& command, const std::string& out_path = "") {
  return xf::test::run_command(out_path.empty() ? command : command + " > " + out_path, work_dir());
}

// A node like /dev/full in the test's folder; empty (the test skips) where mknod is refused.
std::string full_device() {
  static const std::string path = [] {
    const std::string p = work_dir() + "/full";
    return ::mknod(p.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0 ? p : std::string();
  }();
  return path;
}

const std::vector<std::string> kTools = {"xf-train", "xf-convert", "xf-inspect", "xf-eval", "xf-bench", "xf-run",
                                         "xf-join", "xf-distill", "xf-shortlist"};

std::string tool(const std::string& name) { return std::string(XF_BINARY_DIR) + "/bin/" + name; }

class EveryTool : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryTool, HelpOnStdoutWithBothSpellingsAndExitZero) {
  const ToolRun help = shell(tool(GetParam()) + " --help");
  EXPECT_EQ(help.status, 0) << help.err;
  EXPECT_EQ(help.err, "");
  EXPECT_EQ(help.out.rfind("usage: " + GetParam() + " ", 0), 0u) << help.out;
  EXPECT_NE(help.out.find("\n  -h, --help            print this help and exit\n"
                          "  --version             print the version and exit\n"),
            std::string::npos) << help.out;
  const ToolRun h = shell(tool(GetParam()) + " -h");
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(h.out, help.out);
}

TEST_P(EveryTool, VersionIsTheLibrarysRelease) {
  const ToolRun version = shell(tool(GetParam()) + " --version");
  EXPECT_EQ(version.status, 0) << version.err;
  EXPECT_EQ(version.out, GetParam() + " (xf) " + std::to_string(XF_VERSION_MAJOR) + "." +
                             std::to_string(XF_VERSION_MINOR) + "." + std::to_string(XF_VERSION_PATCH) + "\n");
}

TEST_P(EveryTool, AnUnknownOptionIsOneLineAndExitTwo) {
  const ToolRun r = shell(tool(GetParam()) + " --frobnicate 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, GetParam() + ": unknown option '--frobnicate' (try --help)\n");
}

TEST_P(EveryTool, HelpIntoAFullDeviceIsOneLineAndExitOne) {
  if (full_device().empty()) GTEST_SKIP() << "cannot make a device node: " << std::strerror(errno);
  const ToolRun r = shell(tool(GetParam()) + " --help", full_device());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, GetParam() + ": output: write failed: No space left on device\n");
}

INSTANTIATE_TEST_SUITE_P(Tools, EveryTool, ::testing::ValuesIn(kTools), [](const auto& info) {
  std::string name = info.param.substr(3);  // "train", "convert", ...
  name[0] = static_cast<char>(name[0] - 'a' + 'A');
  return name;
});

// Each tool's own results into a full device (xf-run's and xf-convert's: tools/output_test.cc).
class ToolResults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = work_dir() + "/tiny.xfm";
    xf::test::write_tiny_model(model_);
    input_ = work_dir() + "/input.txt";
    std::ofstream in(input_);
    for (const auto& line : xf::test::sample_sentences(40, 3)) in << line << "\n";
  }
  static std::string model_, input_;
};
std::string ToolResults::model_, ToolResults::input_;

TEST_F(ToolResults, XfInspectIntoAFullDeviceFails) {
  if (full_device().empty()) GTEST_SKIP() << "cannot make a device node";
  const ToolRun r = shell(tool("xf-inspect") + " " + model_, full_device());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "xf-inspect: output: write failed: No space left on device\n");
}

TEST_F(ToolResults, XfEvalIntoAFullDeviceFailsInEveryMode) {
  if (full_device().empty()) GTEST_SKIP() << "cannot make a device node";
  const std::string tsv = work_dir() + "/refs.tsv";
  {
    std::ofstream out(tsv);
    for (const auto& line : xf::test::sample_sentences(5, 4)) out << line << "\t" << line << "\n";
  }
  const std::string hyp = work_dir() + "/hyp.txt";
  {
    std::ofstream out(hyp);
    for (const auto& line : xf::test::sample_sentences(5, 4)) out << line << "\n";
  }
  for (const std::string& arguments : {"--hyp " + hyp + " --ref-tsv " + tsv, "--hyp " + hyp + " --ref-tsv " + tsv + " --json",
                                       "--ref-tsv " + tsv + " --print-sources"}) {
    const ToolRun r = shell(tool("xf-eval") + " " + arguments, full_device());
    EXPECT_EQ(r.status, 1) << arguments;
    EXPECT_EQ(r.err, "xf-eval: output: write failed: No space left on device\n") << arguments;
  }
}

TEST_F(ToolResults, XfBenchIntoAFullDeviceFails) {
  if (full_device().empty()) GTEST_SKIP() << "cannot make a device node";
  for (const std::string json : {"", " --json"}) {
    const ToolRun r = shell(tool("xf-bench") + " --model " + model_ + " --input " + input_ + json, full_device());
    EXPECT_EQ(r.status, 1);
    const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
    EXPECT_EQ(last, "xf-bench: output: write failed: No space left on device\n") << r.err;
  }
}

// xf-train writes its checkpoints, its vocabulary and its metrics: a disk that fills up is one
// line and exit 1, not a run that ends well with half its files.
TEST_F(ToolResults, XfTrainOntoAFullDiskFails) {
  const std::string train = work_dir() + "/pairs.tsv";
  {
    std::ofstream out(train);
    for (const auto& line : xf::test::sample_sentences(200, 5)) out << line << "\t" << line << "\n";
  }
  const std::string out = work_dir() + "/run";
  const ToolRun r = shell("sh -c \"trap '' XFSZ; ulimit -f 8; exec " + tool("xf-train") + " --train " + train +
                      " --out " + out +
                      " --spm-type char --vocab-size 40 --layers 1 --d-model 16 --heads 2 --d-ff 32"
                      " --max-steps 2 --threads 1\"");
  EXPECT_EQ(r.status, 1) << r.err;
  const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  EXPECT_EQ(last.rfind("xf-train: ", 0), 0u) << r.err;
  EXPECT_NE(last.find("File too large"), std::string::npos) << r.err;
}

// Always a summary line at the end on stderr: lines, tokens, tokens/s, warnings.
TEST_F(ToolResults, XfRunEndsWithASummaryLine) {
  const ToolRun r = shell(tool("xf-run") + " --model " + model_ + " --max-source-len 6 --input " + input_);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines;
  std::stringstream s(r.err);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  ASSERT_FALSE(lines.empty());
  const std::string& summary = lines.back();
  EXPECT_EQ(summary.rfind("xf-run: 40 lines, ", 0), 0u) << r.err;
  EXPECT_NE(summary.find(" tokens/s, "), std::string::npos) << summary;
  size_t warnings = 0;
  for (const auto& line : lines) warnings += line.find("warning: line ") != std::string::npos;
  EXPECT_GT(warnings, 0u) << "--max-source-len 6 truncates some lines";
  const std::string tail = std::to_string(warnings) + (warnings == 1 ? " warning" : " warnings");
  EXPECT_EQ(summary.substr(summary.size() - tail.size()), tail) << summary;
}

// With stderr a terminal, xf-run prints a progress line when more than a few seconds have passed
// since the last one: here a line, a pause of 3.5 s, another line; then the summary.
TEST_F(ToolResults, XfRunPrintsProgressLinesWhenStderrIsATerminal) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string terminal = ::ptsname(master);
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = xf::test::spawn({tool("xf-run"), "--model", model_}, to_child[0], from_child[1], terminal,
                                    {to_child[1], from_child[0], master});
  ::close(to_child[0]);
  ::close(from_child[1]);
  ASSERT_GT(pid, 0);
  const auto sentences = xf::test::sample_sentences(2, 6);
  const auto translate = [&](const std::string& sentence) {
    const std::string line = sentence + "\n";
    EXPECT_EQ(::write(to_child[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
    EXPECT_NE(xf::test::read_from(from_child[0], 60000, true).find('\n'), std::string::npos);
  };
  translate(sentences[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  translate(sentences[1]);
  ::close(to_child[1]);
  xf::test::read_from(from_child[0], 60000, true);  // the end of the output
  ::close(from_child[0]);
  EXPECT_EQ(xf::test::wait_status(pid), 0);
  const std::string on_terminal = xf::test::read_from(master, 200, false);  // what the terminal holds
  ::close(master);
  // The progress line after the pause, then the summary (however loaded the machine).
  EXPECT_TRUE(std::regex_search(on_terminal, std::regex("xf-run: 2 lines, [0-9]+\\.[0-9] s, [0-9]+ tokens/s\r?\n")))
      << on_terminal;
  EXPECT_TRUE(std::regex_search(on_terminal, std::regex("xf-run: 2 lines, [0-9]+ tokens in [0-9.]+ s, [0-9]+ tokens/s, "
                                                        "0 warnings\r?\n")))
      << on_terminal;
}

// Periodic lines (a terminal) every few seconds of progress, and the summary's figures.
TEST(Progress, PeriodicLinesEveryFewSecondsAndASummary) {
  const std::string path = work_dir() + "/progress.txt";
  std::FILE* out = std::fopen(path.c_str(), "w");
  ASSERT_NE(out, nullptr);
  using Clock = xf::cli::Progress::Clock;
  const Clock::time_point start = Clock::now();
  xf::cli::Progress periodic("xf-x", out, /*periodic=*/true);
  periodic.add(10, 100, start + std::chrono::seconds(1));   // too soon: no line
  periodic.add(10, 100, start + std::chrono::milliseconds(3500));  // a line
  periodic.add(10, 100, start + std::chrono::seconds(4));   // too soon after it
  periodic.add(10, 100, start + std::chrono::seconds(7));   // a line
  periodic.finish(2, start + std::chrono::seconds(8));
  xf::cli::Progress quiet("xf-y", out, /*periodic=*/false);  // not a terminal: the summary only
  quiet.add(5, 50, start + std::chrono::seconds(10));
  quiet.finish(1, start + std::chrono::seconds(10));
  std::fclose(out);
  std::vector<std::string> lines;
  std::stringstream s(read_file(path));
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << read_file(path);
  EXPECT_EQ(lines[0].rfind("xf-x: 20 lines, 3.", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("xf-x: 40 lines, 7.", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("xf-x: 40 lines, 400 tokens in 8.", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(" tokens/s, 2 warnings"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].rfind("xf-y: 5 lines, 50 tokens in ", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find(", 1 warning"), std::string::npos) << lines[3];
}

}  // namespace
