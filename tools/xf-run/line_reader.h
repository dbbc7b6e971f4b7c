#pragma once
// Lines from a file descriptor with a cap on what a line may hold, shared by xf-run and xf-bench:
// the bytes of a line past the cap are read and dropped as they arrive, so one huge line (a file
// without newlines, a binary by mistake) costs no more memory than the cap. Header-only.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <string>

#include "xf/error.h"

namespace xf::cli {

class LineReader {
 public:
  enum class Status { line, paused, end };
  // max_line_bytes: the most bytes of a line that next() hands out (at least 1).
  LineReader(int fd, size_t max_line_bytes) : fd_(fd), max_line_bytes_(max_line_bytes ? max_line_bytes : 1) {}

  // A complete line (without "\n" and a trailing "\r"), at most max_line_bytes bytes of it; cut()
  // then tells whether the line was longer. With wait false, `paused` when no complete line is
  // buffered and nothing more can be read at once (the caller can translate what it has while
  // an interactive writer waits for answers). A last line without "\n" counts as a line.
  Status next(std::string& line, bool wait) {
    for (;;) {
      const size_t newline = buffer_.find('\n', scanned_);
      if (newline != std::string::npos) return take(line, newline, newline + 1);
      scanned_ = buffer_.size();
      if (!dropping_ && buffer_.size() - start_ > max_line_bytes_) {
        // The line is longer than the cap: keep its head, drop the rest as it comes.
        head_.assign(buffer_, start_, max_line_bytes_);
        dropping_ = true;
      }
      if (dropping_) start_ = scanned_ = buffer_.size();
      if (end_) {
        if (start_ == buffer_.size() && !dropping_) return Status::end;
        return take(line, buffer_.size(), buffer_.size());
      }
      if (!wait) {
        pollfd p{fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, 0);
        if (ready == 0) return Status::paused;
        if (ready < 0 && errno != EINTR) throw Error(std::string("input: poll failed: ") + std::strerror(errno));
      }
      fill();
    }
  }

  // Whether the line next() returned last was longer than max_line_bytes (and cut to it).
  bool cut() const { return cut_; }

 private:
  Status take(std::string& line, size_t end, size_t next_start) {
    if (dropping_) {
      line.swap(head_);
      head_.clear();
      dropping_ = false;
      cut_ = true;
    } else {
      cut_ = end - start_ > max_line_bytes_;
      if (!cut_ && end > start_ && buffer_[end - 1] == '\r') --end;
      line.assign(buffer_, start_, std::min(end - start_, max_line_bytes_));
    }
    start_ = scanned_ = next_start;
    return Status::line;
  }

  void fill() {
    if (start_ > 0) {  // drop the lines already handed out
      buffer_.erase(0, start_);
      scanned_ -= start_;
      start_ = 0;
    }
    char chunk[1 << 16];
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return;
      throw Error(std::string("input: read failed: ") + std::strerror(errno));
    }
    if (n == 0) end_ = true;
    buffer_.append(chunk, static_cast<size_t>(n));
  }

  int fd_;
  size_t max_line_bytes_;
  std::string buffer_;
  size_t start_ = 0;    // where the next line starts in buffer_
  size_t scanned_ = 0;  // buffer_ holds no newline between start_ and here
  bool end_ = false;
  bool dropping_ = false;  // inside a line longer than the cap, whose head_ is kept
  std::string head_;
  bool cut_ = false;
};

}  // namespace xf::cli
