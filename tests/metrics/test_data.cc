#include "test_data.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include "xf/metrics.h"

namespace xf::metrics::testing {

std::string data_path(const std::string& name) { return std::string(XF_SOURCE_DIR) + "/tests/metrics/data/" + name; }

const std::map<std::string, std::string>& expected() {
  static const std::map<std::string, std::string> table = [] {
    std::map<std::string, std::string> entries;
    for (const std::string& line : read_text_lines(data_path("expected.txt"))) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.find(' ');
      const std::string key = line.substr(0, space);
      const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
      // text.* keys repeat (BLEU line, then chrF line): keep them as lines of one value.
      auto [entry, is_new] = entries.emplace(key, value);
      if (!is_new) entry->second += "\n" + value;
    }
    return entries;
  }();
  return table;
}

std::vector<double> expected_numbers(const std::string& key) {
  const auto found = expected().find(key);
  if (found == expected().end()) throw std::runtime_error("expected.txt has no key " + key);
  std::istringstream fields(found->second);
  std::vector<double> numbers;
  for (double x; fields >> x;) numbers.push_back(x);
  return numbers;
}

double expected_number(const std::string& key) { return expected_numbers(key).at(0); }

std::string write_temp_file(const std::string& name, const std::string& contents) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  static const std::string dir = xf::test::make_temp_dir("metrics");  // removed at exit
  const std::string path = dir + "/" + test->name() + "_" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

}  // namespace xf::metrics::testing
