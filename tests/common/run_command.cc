#include "run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace xf::test {

namespace {

// `text` as one single-quoted shell word.
std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

CommandRun run_command(const std::string& command, const std::string& dir, int limit_seconds) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  // A group, so that the redirections apply to a whole pipeline and come after the command's own.
  const std::string group = "{ " + command + "\n} < /dev/null > '" + out + "' 2> '" + err + "'";
  // timeout(1) ends the whole group past the bound (its own process group): status 124.
  const int status = std::system(("timeout -k 5 " + std::to_string(limit_seconds) + " sh -c " +
                                  shell_quoted(group)).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

pid_t spawn(const std::vector<std::string>& args, int in, int out, const std::string& err_path,
            const std::vector<int>& close_in_child) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in >= 0) posix_spawn_file_actions_adddup2(&actions, in, STDIN_FILENO);
  else posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (out >= 0) posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
  else posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY, 0644);
  for (int fd : close_in_child) posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

int wait_status(pid_t pid, double limit_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_seconds);
  int status = 0;
  for (;;) {
    const pid_t ended = ::waitpid(pid, &status, WNOHANG);
    if (ended == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (ended < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "process " << pid << " still running after " << limit_seconds << " s: killed";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace {

// The bits of /proc's "Sig...:" field `name` (SigBlk: blocked, SigCgt: with a handler) in the
// status file `path`.
uint64_t signal_mask(const std::string& path, const std::string& name) {
  const std::string text = read_file(path);
  const size_t at = text.find("\n" + name + ":");
  if (at == std::string::npos) return 0;
  return std::stoull(text.substr(at + name.size() + 2), nullptr, 16);
}

constexpr uint64_t bit(int signal) { return uint64_t{1} << (signal - 1); }

}  // namespace

namespace {

// One look at the threads of `pid` in /proc.
struct StopSignalThreads {
  bool handler = false;              // a stop signal has a handler
  int threads = 0;                   // all threads
  int waiting = 0;                   // those that take the stop signals, inside sigwait
  std::vector<std::string> outside;  // those that take them elsewhere: "thread TID in syscall ..."
  bool as_wanted() const { return !handler && outside.empty() && waiting == 1; }
};

StopSignalThreads look_at_stop_signals(pid_t pid) {
  const uint64_t stop_signals = bit(SIGINT) | bit(SIGTERM) | bit(SIGHUP) | bit(SIGUSR1);
  const std::string proc = "/proc/" + std::to_string(pid);
  StopSignalThreads seen;
  seen.handler = (signal_mask(proc + "/status", "SigCgt") & stop_signals) != 0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(proc + "/task", error)) {
    const std::string path = task.path().string();
    ++seen.threads;
    if ((signal_mask(path + "/status", "SigBlk") & stop_signals) == stop_signals) continue;
    const std::string call = read_file(path + "/syscall");  // "NUMBER args..."
    if (std::atol(call.c_str()) == SYS_rt_sigtimedwait)
      ++seen.waiting;
    else
      seen.outside.push_back("thread " + task.path().filename().string() + " in syscall " + call);
  }
  return seen;
}

}  // namespace

int expect_stop_signals_taken_by_one_thread(pid_t pid) {
  // The signal thread shows the signals unblocked only while it waits in sigwait: in a process
  // just started, or on a busy machine that has not yet run it, it is looked at again, until the
  // command bound (issue 41: on a loaded machine, one look found no thread waiting).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kCommandLimitSeconds);
  StopSignalThreads seen = look_at_stop_signals(pid);
  while (!seen.as_wanted() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = look_at_stop_signals(pid);
  }
  EXPECT_FALSE(seen.handler) << "a stop signal has a handler";
  for (const std::string& thread : seen.outside) ADD_FAILURE() << thread << " takes stop signals outside sigwait";
  EXPECT_EQ(seen.waiting, 1) << "threads waiting for the stop signals in sigwait";
  return seen.threads;
}

std::string read_from(int fd, int quiet_ms, bool one_line) {
  std::string text;
  while (!(one_line && text.find('\n') != std::string::npos)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, quiet_ms) <= 0) break;
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;  // the end (EIO for a terminal whose other side is closed)
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

std::string last_line(const std::string& text) {
  const size_t start = text.size() >= 2 ? text.rfind('\n', text.size() - 2) : std::string::npos;
  return start == std::string::npos ? text : text.substr(start + 1);
}

}  // namespace xf::test
