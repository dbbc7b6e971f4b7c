#pragma once
// Progress of a long job on stderr: while stderr is a terminal, a line every few seconds
// ("xf-run: 1200 lines, 3.1 s, 8345 tokens/s"); at the end, always, one summary line
// ("xf-run: 6000 lines, 181234 tokens in 45.2 s, 4010 tokens/s, 0 warnings"). Output of the
// job itself (stdout) is never touched.
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace xf::cli {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kIntervalSeconds = 3.0;

  // Periodic lines when `out` is a terminal (the tools pass stderr).
  explicit Progress(const char* tool, std::FILE* out = stderr);
  // For tests: periodic lines or not, whatever `out` is.
  Progress(const char* tool, std::FILE* out, bool periodic);

  // `lines` more lines done, with `tokens` output tokens.
  void add(uint64_t lines, uint64_t tokens, Clock::time_point now = Clock::now());
  // The summary line.
  void finish(uint64_t warnings, Clock::time_point now = Clock::now()) const;

  uint64_t lines() const { return lines_; }
  uint64_t tokens() const { return tokens_; }

 private:
  const char* tool_;
  std::FILE* out_;
  bool periodic_;
  Clock::time_point start_, last_line_;
  uint64_t lines_ = 0, tokens_ = 0;
};

}  // namespace xf::cli
