#pragma once
// The one exception type xf's C++ libraries throw. Its message names the file, tensor, line or
// option at fault, in one line.
#include <stdexcept>
#include <string>

#include "xf/export.h"

namespace xf {

// Exported (its type_info is one across libxf and the app), so that an app catches it.
class XF_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace xf
