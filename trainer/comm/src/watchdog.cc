#include "watchdog.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace xf::trainer {

ExchangeWatchdog::ExchangeWatchdog(std::string who)
    : who_(std::move(who)), thread_([this] { run(); }) {}

ExchangeWatchdog::~ExchangeWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ExchangeWatchdog::set_timeout(double seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_seconds_ = seconds;
  }
  changed_.notify_all();
}

ExchangeWatchdog::Watch::Watch(ExchangeWatchdog& dog, const char* what) : dog_(dog) {
  {
    std::lock_guard<std::mutex> lock(dog_.mutex_);
    dog_.watching_ = true;
    dog_.what_ = what;
    dog_.started_ = Clock::now();
  }
  dog_.changed_.notify_all();
}

ExchangeWatchdog::Watch::~Watch() {
  std::lock_guard<std::mutex> lock(dog_.mutex_);
  dog_.watching_ = false;
}

void ExchangeWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!watching_ || timeout_seconds_ <= 0) {
      changed_.wait(lock);
      continue;
    }
    const auto started = started_;
    const auto deadline =
        started + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(timeout_seconds_));
    changed_.wait_until(lock, deadline);
    if (stopping_ || !watching_ || started_ != started || Clock::now() < deadline) continue;
    // The main thread is stuck inside the library call: say so and end the process from here.
    char line[512];
    int length = std::snprintf(line, sizeof(line),
                               "%s: %s: no answer from the other ranks for %g s (%s): a rank "
                               "died, hangs or cannot be reached\n",
                               program_invocation_short_name, who_.c_str(), timeout_seconds_, what_);
    if (length > 0) {
      ssize_t ignored = write(STDERR_FILENO, line, static_cast<size_t>(length));
      (void)ignored;
    }
    _exit(1);
  }
}

}  // namespace xf::trainer
