// Where the tools' output goes wrong: a full device, a file that cannot grow (a full
// filesystem), a closed pipe, a FIFO; and xf-run used interactively through pipes. Device nodes
// and FIFOs are made in the test's own temporary folder, never /dev's: the bug this guards
// against replaced the node by a regular file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"
#include "tiny_model.h"
#include "xf/format/parameters.h"
#include "xf/trainer/checkpoint.h"
#include "xf/trainer/data.h"
#include "xf/translator.h"

namespace {
using xf::test::CommandRun;
using xf::test::last_line;
using xf::test::read_file;
using xf::test::spawn;
using xf::test::wait_status;
using xf::test::TempDir;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A character device node like /dev/full (1, 7) or /dev/null (1, 3) at `path`. False (the test
// then skips) where making device nodes is not permitted (not root, or a restricted container).
bool make_char_device(const std::string& path, unsigned minor, std::string& why) {
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, minor)) == 0) return true;
  why = "cannot make a device node in the test folder (mknod: " + std::string(std::strerror(errno)) + ")";
  return false;
}

bool is_char_device(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

CommandRun shell(const std::string& command, const TempDir& dir) { return xf::test::run_command(command, dir.path()); }

class ToolOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("tiny.xfm");
    xf::test::write_tiny_model(model_);
    input_ = dir_.file("input.txt");
    std::string text;
    for (const auto& line : xf::test::sample_sentences(200, 7)) text += line + "\n";
    write_file(input_, text);
  }
  std::string xf_run() const { return std::string(XF_RUN) + " --model " + model_ + " --max-batch 8"; }

  TempDir dir_{"tools_output"};
  std::string model_, input_;
};

TEST_F(ToolOutput, XfRunIntoAFullDeviceFailsWithOneLine) {
  const std::string full = dir_.file("full");
  std::string why;
  if (!make_char_device(full, 7, why)) GTEST_SKIP() << why;
  const CommandRun r = shell(xf_run() + " < " + input_ + " > " + full, dir_);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "xf-run: output: write failed: No space left on device\n");
  EXPECT_TRUE(is_char_device(full));
}

// A file that cannot grow past one block fails a write as a full filesystem does (EFBIG for
// the size limit, ENOSPC for the disk: the same path through write()).
TEST_F(ToolOutput, XfRunIntoAFileThatCannotGrowFailsWithOneLine) {
  const std::string out = dir_.file("out.txt");
  const CommandRun r = shell("sh -c \"trap '' XFSZ; ulimit -f 1; exec " + xf_run() + " < " + input_ + " > " + out + "\"", dir_);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err, "xf-run: output: write failed: File too large\n");
}

TEST_F(ToolOutput, XfRunIntoAClosedPipeFailsWithOneLine) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);  // no reader: every write gets EPIPE
  const int in = ::open(input_.c_str(), O_RDONLY);
  const pid_t pid = spawn({XF_RUN, "--model", model_}, in, fds[1], dir_.file("stderr"));
  ::close(in);
  ::close(fds[1]);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_status(pid), 1);
  EXPECT_EQ(read_file(dir_.file("stderr")), "xf-run: output: write failed: Broken pipe\n");
}

// xf-run's stop signals, as xf-train's, are taken by one thread, never by a handler on a thread
// that computes (with --threads 2: OpenMP's worker too); SIGTERM ends it as by default.
TEST_F(ToolOutput, XfRunTakesStopSignalsInOneThreadAndEndsByThem) {
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = spawn({XF_RUN, "--model", model_, "--threads", "2"}, to_child[0], from_child[1],
                          dir_.file("stderr"), {to_child[1], from_child[0]});
  ::close(to_child[0]);
  ::close(from_child[1]);
  ASSERT_GT(pid, 0);
  xf::test::expect_stop_signals_taken_by_one_thread(pid);  // from its start, before any input
  const std::string line = xf::test::sample_sentences(1, 10)[0] + "\n";
  ASSERT_EQ(::write(to_child[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
  EXPECT_NE(xf::test::read_from(from_child[0], 120000, true), "");  // translated: OpenMP has run
  EXPECT_GE(xf::test::expect_stop_signals_taken_by_one_thread(pid), 3);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(wait_status(pid), 128 + SIGTERM) << read_file(dir_.file("stderr"));
  ::close(to_child[1]);
  ::close(from_child[0]);
}

// An app writes one line into xf-run's stdin, keeps the pipe open, and reads the translation.
TEST_F(ToolOutput, XfRunAnswersALineBeforeTheInputEnds) {
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t pid = spawn({XF_RUN, "--model", model_}, to_child[0], from_child[1], dir_.file("stderr"),
                          {to_child[1], from_child[0]});
  ::close(to_child[0]);
  ::close(from_child[1]);
  ASSERT_GT(pid, 0);
  const std::string sentence = xf::test::sample_sentences(1, 9)[0];
  const std::string line = sentence + "\n";
  ASSERT_EQ(::write(to_child[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));

  const std::string answer = xf::test::read_from(from_child[0], 120000, true);
  ::close(to_child[1]);  // only now does the input end
  std::string rest;
  char buffer[4096];
  for (ssize_t n; (n = ::read(from_child[0], buffer, sizeof buffer)) > 0;) rest.append(buffer, static_cast<size_t>(n));
  ::close(from_child[0]);
  EXPECT_EQ(wait_status(pid), 0) << read_file(dir_.file("stderr"));
  EXPECT_EQ(rest, "");

  xf::Translator translator(xf::Model::open(model_));
  EXPECT_EQ(answer, translator.translate({sentence})[0].hypotheses[0].text + "\n");
}

// A random checkpoint of a tiny model, for xf-convert (which checks its tokenizer).
std::string write_checkpoint(const TempDir& dir) {
  xf::trainer::Checkpoint c;
  c.tokenizer_model = xf::test::tiny_sentencepiece_model();
  c.config.source_vocab_size = c.config.target_vocab_size = static_cast<uint32_t>(
      xf::trainer::Tokenizer::from_model_proto(c.tokenizer_model, "tiny").vocab_size());
  c.config.d_model = 8;
  c.config.num_heads = 2;
  c.config.d_ff = 16;
  c.config.encoder_layers = c.config.decoder_layers = 1;
  c.config.max_positions = 32;
  const size_t count = xf::transformer_parameter_count(c.config);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (auto* v : {&c.parameters, &c.adam.first_moment, &c.adam.second_moment}) {
    v->resize(count);
    for (float& x : *v) x = normal(rng);
  }
  const std::string path = dir.file("step-000001");
  xf::trainer::write_checkpoint(path, c);
  return path;
}

TEST_F(ToolOutput, XfConvertWritesDevicesInPlace) {
  const std::string checkpoint = write_checkpoint(dir_);
  const std::string convert = std::string(XF_CONVERT) + " " + checkpoint + " -o ";
  std::string why;
  const std::string full = dir_.file("full"), null = dir_.file("null");
  if (!make_char_device(full, 7, why) || !make_char_device(null, 3, why)) GTEST_SKIP() << why;

  const CommandRun to_full = shell(convert + full, dir_);
  EXPECT_EQ(to_full.status, 1);
  EXPECT_EQ(last_line(to_full.err), "xf-convert: " + full + ": write failed: No space left on device\n");
  EXPECT_TRUE(is_char_device(full));

  const CommandRun to_null = shell(convert + null, dir_);
  EXPECT_EQ(to_null.status, 0) << to_null.err;
  EXPECT_TRUE(is_char_device(null));
  EXPECT_EQ(std::vector<std::string>({"full", "input.txt", "null", "stderr", "stdout", "step-000001", "tiny.xfm"}),
            dir_.entries())
      << "no temporary file left beside the devices";
}

TEST_F(ToolOutput, XfConvertWritesAFifoInPlaceAndFailsOnAFileThatCannotGrow) {
  const std::string checkpoint = write_checkpoint(dir_);
  const std::string regular = dir_.file("model.xfm");
  ASSERT_EQ(shell(std::string(XF_CONVERT) + " " + checkpoint + " -o " + regular, dir_).status, 0);

  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string through_fifo;
  std::thread reader([&] { through_fifo = read_file(fifo); });
  const CommandRun r = shell(std::string(XF_CONVERT) + " " + checkpoint + " -o " + fifo, dir_);
  reader.join();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(through_fifo, read_file(regular));
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  // A full filesystem: the write fails, the old file stays, no temporary is left.
  const std::string before = read_file(regular);
  const CommandRun full = shell("sh -c \"trap '' XFSZ; ulimit -f 1; exec " + std::string(XF_CONVERT) + " " +
                              checkpoint + " --dtype f32 -o " + regular + "\"", dir_);
  EXPECT_EQ(full.status, 1);
  EXPECT_EQ(last_line(full.err), "xf-convert: " + regular + ": write failed: File too large\n");
  EXPECT_EQ(read_file(regular), before);
}

}  // namespace
