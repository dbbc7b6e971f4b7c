#pragma once
// The message of the xf::Error an action throws, for tests of error messages: "no error" when
// it throws none, so that a missing error shows in the failed expectation. Any other exception
// escapes and fails the test.
#include <functional>
#include <string>

#include "xf/error.h"

namespace xf::test {

inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace xf::test
