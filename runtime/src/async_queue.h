#pragma once
// One worker thread that runs queued jobs in the order they came. Translator::translate_async's
// calls share it: they would run one at a time on the Translator's lock anyway, so a thousand
// calls cost one thread, not a thousand waiting ones, and finish in the order they were made.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace xf::runtime {

class AsyncQueue {
 public:
  AsyncQueue() : worker_([this] { run(); }) {}
  // Runs what is still queued, then joins: a future handed out is always fulfilled.
  ~AsyncQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    worker_.join();
  }
  AsyncQueue(const AsyncQueue&) = delete;
  AsyncQueue& operator=(const AsyncQueue&) = delete;

  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();  // a packaged task: its exceptions go to its future
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once the members it reads exist
};

}  // namespace xf::runtime
