#include "progress.h"

#include <unistd.h>

namespace xf::cli {

namespace {

double seconds_between(Progress::Clock::time_point from, Progress::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double per_second(uint64_t count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

}  // namespace

Progress::Progress(const char* tool, std::FILE* out) : Progress(tool, out, ::isatty(::fileno(out)) == 1) {}

Progress::Progress(const char* tool, std::FILE* out, bool periodic)
    : tool_(tool), out_(out), periodic_(periodic), start_(Clock::now()), last_line_(start_) {}

void Progress::add(uint64_t lines, uint64_t tokens, Clock::time_point now) {
  lines_ += lines;
  tokens_ += tokens;
  if (!periodic_ || seconds_between(last_line_, now) < kIntervalSeconds) return;
  last_line_ = now;
  const double seconds = seconds_between(start_, now);
  std::fprintf(out_, "%s: %llu lines, %.1f s, %.0f tokens/s\n", tool_,
               static_cast<unsigned long long>(lines_), seconds, per_second(tokens_, seconds));
  std::fflush(out_);
}

void Progress::finish(uint64_t warnings, Clock::time_point now) const {
  const double seconds = seconds_between(start_, now);
  std::fprintf(out_, "%s: %llu lines, %llu tokens in %.1f s, %.0f tokens/s, %llu warning%s\n", tool_,
               static_cast<unsigned long long>(lines_), static_cast<unsigned long long>(tokens_), seconds,
               per_second(tokens_, seconds), static_cast<unsigned long long>(warnings), warnings == 1 ? "" : "s");
  std::fflush(out_);
}

}  // namespace xf::cli
