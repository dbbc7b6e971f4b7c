#include "tool_main.h"

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>

#include "xf/error.h"

namespace xf::cli {

namespace {

constexpr const char* kSharedHelp =
    "  -h, --help            print this help and exit\n"
    "  --version             print the version and exit\n";

}  // namespace

std::vector<int64_t> integer_list(const std::string& value, int64_t max, const std::string& error) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string field = value.substr(start, comma - start);
    // At most 18 digits: below int64_t's limit, so that the range check sees the number.
    if (field.empty() || field.size() > 18 || field.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(field) > max) {
      throw UsageError{error};
    }
    values.push_back(std::stoll(field));
    start = comma + 1;
  }
  return values;
}

std::string option_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw UsageError{std::string(argv[i]) + " needs a value"};
  return argv[++i];
}

UsageError unknown_option(const std::string& arg) {
  return UsageError{"unknown option '" + arg + "' (try --help)"};
}

void check_stdout() {
  // std::cout is synced with stdio: its writes went through stdout's FILE, flushed here.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (!flushed || std::ferror(stdout) || std::cout.fail())
    throw Error(std::string("output: write failed: ") + std::strerror(error ? error : EIO));
}

int tool_main(const char* tool, const std::string& help, int argc, char** argv,
              const std::function<int(int argc, char** argv)>& run) {
  std::signal(SIGPIPE, SIG_IGN);
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        std::fputs(help.c_str(), stdout);
        const bool blank_line_ends_help = help.size() >= 2 && help.compare(help.size() - 2, 2, "\n\n") == 0;
        if (!blank_line_ends_help) std::fputs("\n", stdout);
        std::fputs(kSharedHelp, stdout);
        check_stdout();
        return 0;
      }
      if (arg == "--version") {
        std::printf("%s (xf) %s\n", tool, XF_VERSION_STRING);
        check_stdout();
        return 0;
      }
    }
    const int status = run(argc, argv);
    check_stdout();
    return status;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.message.c_str());
    return kExitUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return kExitInputError;
  }
}

}  // namespace xf::cli
