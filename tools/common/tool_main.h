#pragma once
// The command-line skeleton every xf tool shares:
//   int main(int argc, char** argv) { return xf::cli::tool_main("xf-x", kHelp, argc, argv, run); }
// -h or --help anywhere prints `help` and the shared lines below it to stdout; --version prints
// "xf-x (xf) 0.1.0". Otherwise run(argc, argv) gives the exit status. Errors are one line
// "xf-x: <message>" on stderr: a UsageError (bad command line) exits 2, any other exception 1.
// stdout is checked at the end: a write that failed at any point (full disk, closed pipe) is
// such an error and exit 1. SIGPIPE is ignored, so that a closed pipe is an error, not a
// silent death.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace xf::cli {

constexpr int kExitInputError = 1;  // bad input (files, data), or output that cannot be written
constexpr int kExitUsageError = 2;  // bad command line

// A bad command line: an unknown option, a missing or malformed value, a missing argument.
struct UsageError {
  std::string message;
};

int tool_main(const char* tool, const std::string& help, int argc, char** argv,
              const std::function<int(int argc, char** argv)>& run);

// argv[i]'s value (argv[i + 1]), advancing i; UsageError "--x needs a value" when there is none.
std::string option_value(int argc, char** argv, int& i);
// The UsageError for an option the tool does not know.
UsageError unknown_option(const std::string& arg);
// "0,1,3" -> {0, 1, 3}: decimal integers from 0 to `max` separated by commas; UsageError
// `error` when a field is empty, not digits alone, or above `max`.
std::vector<int64_t> integer_list(const std::string& value, int64_t max, const std::string& error);

// Flushes stdout; a write that failed at any point is an xf::Error ("output: write failed: ...").
void check_stdout();

}  // namespace xf::cli
