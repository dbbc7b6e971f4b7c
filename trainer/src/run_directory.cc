// The run directory's lock, its tidying at start and the refusal to mix runs.
#include "xf/trainer/run_directory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "xf/error.h"

namespace xf::trainer {
namespace {
namespace fs = std::filesystem;

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// True unless `pid` is certainly gone (another user's live process counts as alive).
bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// The "PID HOST" a holder wrote into its lock file; empty until it has written it.
std::string read_holder(int fd) {
  char buffer[320] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

[[noreturn]] void refuse(const std::string& path, const std::string& lock_path, const std::string& holder) {
  const size_t space = holder.find(' ');
  const std::string pid = holder.substr(0, space);
  const std::string host = space == std::string::npos ? "" : holder.substr(space + 1);
  throw Error(path + ": in use by xf-train process " + (pid.empty() ? "(unknown)" : pid) +
              (host.empty() || host == host_name() ? "" : " on " + host) + " (lock file " + lock_path + ")");
}

// What xf-train writes into a run directory (--overwrite deletes these).
bool written_by_xf_train(const std::string& name) {
  static const std::regex run_file(
      R"((step-[0-9]+|best|metrics\.csv|events\.out\.tfevents\..+|sentencepiece\.model|corpus-[0-9a-f]+\.bin))");
  return std::regex_match(name, run_file);
}

}  // namespace

RunDirectory::RunDirectory(const std::string& path, bool resume, bool overwrite, std::ostream& log)
    : path_(path), lock_path_((fs::path(path) / kLockFile).string()) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw Error(path + ": cannot create the run directory: " + ec.message());

  // The lock: flock() on the lock file, kept for the run's life; the file names the holder.
  // After locking, the file must still be the one at the path (a holder that finished removes
  // it: whoever locked the removed file starts again on a new one).
  for (;;) {
    lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) throw Error(lock_path_ + ": cannot open the lock file: " + std::strerror(errno));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      std::string holder;
      if (error == EWOULDBLOCK) {
        // The holder writes its PID right after locking: give it a moment.
        for (int tries = 0; tries < 20 && (holder = read_holder(lock_fd_)).empty(); ++tries)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ::close(lock_fd_);
        lock_fd_ = -1;
        refuse(path, lock_path_, holder);
      }
      // A filesystem without flock (some network ones): the PID in the file decides.
      holder = read_holder(lock_fd_);
      const long pid = std::atol(holder.c_str());
      const size_t space = holder.find(' ');
      const bool here = space != std::string::npos && holder.substr(space + 1) == host_name();
      if (!holder.empty() && pid != ::getpid() && (!here || process_alive(pid))) {
        ::close(lock_fd_);
        lock_fd_ = -1;
        refuse(path, lock_path_, holder);
      }
    }
    struct stat held {}, named {};
    if (::fstat(lock_fd_, &held) == 0 && ::stat(lock_path_.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      break;
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  const std::string holder = std::to_string(::getpid()) + " " + host_name() + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, holder.data(), holder.size(), 0) !=
                                           static_cast<ssize_t>(holder.size())) {
    const std::string why = std::strerror(errno);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error(lock_path_ + ": cannot write the lock file: " + why);
  }

  try {
    tidy(resume, overwrite, log);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

void RunDirectory::tidy(bool resume, bool overwrite, std::ostream& log) {
  const std::string& path = path_;
  std::error_code ec;
  // What dead processes left while saving: NAME.tmp.PID and .NAME.old.PID (checkpoint.cc and
  // write_file_atomically name their temporaries so).
  static const std::regex leftover(R"((\.?)(.+)\.(tmp|old)\.([0-9]{1,9}))");
  std::vector<std::string> names;  // listed first, changed after
  for (const auto& entry : fs::directory_iterator(path, ec)) names.push_back(entry.path().filename().string());
  if (ec) throw Error(path + ": cannot list the run directory: " + ec.message());
  std::vector<std::string> others;
  for (const std::string& name : names) {
    std::smatch m;
    if (name == kLockFile) continue;
    if (!std::regex_match(name, m, leftover) || process_alive(std::stol(m[4].str()))) {
      others.push_back(name);
      continue;
    }
    const fs::path found = fs::path(path) / name, original = fs::path(path) / m[2].str();
    std::error_code ignored;
    if (m[3] == "old" && m[1] == "." && !fs::exists(original, ignored)) {
      fs::rename(found, original, ignored);
      log << "restored " << original.string() << " from " << name << ", left by a process that died while saving\n";
    } else {
      fs::remove_all(found, ignored);
      log << "removed " << found.string() << ", left by a process that died while saving\n";
    }
  }
  if (resume || others.empty()) return;
  std::sort(others.begin(), others.end());
  if (!overwrite) {
    throw Error(path + ": holds an earlier run (" + others.front() +
                (others.size() > 1 ? ", ..." : "") +
                "); continue it with --resume, replace it with --overwrite, or choose another --out");
  }
  size_t removed = 0;
  for (const std::string& name : others) {
    if (!written_by_xf_train(name)) continue;
    fs::remove_all(fs::path(path) / name, ec);
    if (ec) throw Error(path + "/" + name + ": cannot remove it for --overwrite: " + ec.message());
    ++removed;
  }
  log << "--overwrite: removed " << removed << " files and folders of the earlier run in " << path << "\n";
}

RunDirectory::~RunDirectory() { release(); }

void RunDirectory::release() {
  if (lock_fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still locked: whoever opened it meanwhile starts again
  ::close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace xf::trainer
