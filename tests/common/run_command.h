#pragma once
// Running a tool as users do, for the tests of programs: through sh with its exit status, stdout
// and stderr, or started with pipes; and reading what it wrote.
#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace xf::test {

struct CommandRun {
  int status = -1;  // the exit status; -1 when it did not exit (a signal)
  std::string out;  // stdout
  std::string err;  // stderr
};

// How long a command or process a test starts may run: well under ctest's timeout, so that a
// hang fails its own test, in one line, instead of holding the suite.
constexpr int kCommandLimitSeconds = 180;

// Runs the shell command line `command` with stdin from /dev/null (a redirection inside the
// command wins) and its stdout and stderr captured in files in `dir`. Past `limit_seconds` it
// is killed, with status 124.
CommandRun run_command(const std::string& command, const std::string& dir,
                       int limit_seconds = kCommandLimitSeconds);

// The whole file, bytes as they are ("" when it cannot be read).
std::string read_file(const std::string& path);

// Starts `args` (args[0] a path) with the descriptors `in` and `out` as its stdin and stdout
// (-1: /dev/null) and its stderr into the file or terminal `err_path`, closing `close_in_child`
// (the parent's ends of pipes) in the child; its PID, or -1.
pid_t spawn(const std::vector<std::string>& args, int in, int out, const std::string& err_path,
            const std::vector<int>& close_in_child = {});

// Waits for `pid`: its exit status, or 128 + the signal that ended it; past `limit_seconds` a
// test failure, the process killed, and -1.
int wait_status(pid_t pid, double limit_seconds = kCommandLimitSeconds);

// Checks, in /proc, that the running process `pid` has no handler for SIGINT, SIGTERM, SIGHUP
// or SIGUSR1 and that every thread of it blocks them but one, waiting for them in sigwait()
// (which the kernel shows unblocked while it waits): tools/common/stop_signals.h. Its threads.
int expect_stop_signals_taken_by_one_thread(pid_t pid);

// Reads `fd` until it ends, nothing more comes for `quiet_ms`, or (when `one_line`) a newline
// has come; what was read.
std::string read_from(int fd, int quiet_ms, bool one_line);

// A refusal as every tool makes it: exit `status` and one line on stderr that holds `fragment`.
inline void expect_one_line_error(const CommandRun& run, int status, const std::string& fragment) {
  EXPECT_EQ(run.status, status) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
}

// The last line of `text` (its final newline kept), e.g. a tool's error after progress lines.
std::string last_line(const std::string& text);

}  // namespace xf::test
