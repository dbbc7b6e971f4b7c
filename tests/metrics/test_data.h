#pragma once
// Shared by the metrics tests: the committed sample under tests/metrics/data/ and the figures
// sacreBLEU computed for it (data/make_expected.py wrote data/expected.txt).
#include <map>
#include <string>
#include <vector>

namespace xf::metrics::testing {

// Path of a file in tests/metrics/data/.
std::string data_path(const std::string& name);
// expected.txt as key -> the rest of its line.
const std::map<std::string, std::string>& expected();
// The value of `key` split on spaces, parsed as doubles (throws when the key is missing).
std::vector<double> expected_numbers(const std::string& key);
double expected_number(const std::string& key);
// Writes `contents` to a fresh file in the test's temporary folder and returns its path.
std::string write_temp_file(const std::string& name, const std::string& contents);

}  // namespace xf::metrics::testing
