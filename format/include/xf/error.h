#pragma once
// The one exception type xf's C++ libraries throw. Its message names the file, tensor, line or
// option at fault, in one line.
#include <stdexcept>
#include <string>

namespace xf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace xf
