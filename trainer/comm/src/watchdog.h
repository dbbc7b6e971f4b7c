#pragma once
// Bounds the time a rank waits in an exchange with the others. A blocking MPI call cannot be
// interrupted, so a peer that died without the launcher noticing, or that cannot be reached,
// would hang this rank for ever: a thread watches each exchange and, past the timeout, ends the
// process with one line on stderr and exit status 1 (mpirun then ends the other ranks).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace xf::trainer {

class ExchangeWatchdog {
 public:
  explicit ExchangeWatchdog(std::string who);  // "rank 1 of 2", for the message
  ~ExchangeWatchdog();
  ExchangeWatchdog(const ExchangeWatchdog&) = delete;
  ExchangeWatchdog& operator=(const ExchangeWatchdog&) = delete;

  void set_timeout(double seconds);  // 0: no limit

  // Watches one exchange for as long as it lives.
  class Watch {
   public:
    Watch(ExchangeWatchdog& dog, const char* what);
    ~Watch();

   private:
    ExchangeWatchdog& dog_;
  };

 private:
  void run();

  using Clock = std::chrono::steady_clock;
  const std::string who_;
  std::mutex mutex_;
  std::condition_variable changed_;
  double timeout_seconds_ = 0;
  bool watching_ = false, stopping_ = false;
  const char* what_ = "";
  Clock::time_point started_;
  std::thread thread_;
};

}  // namespace xf::trainer
