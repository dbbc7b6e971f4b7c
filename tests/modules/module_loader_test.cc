// xf::modules::load_module on the test modules (test_modules.cc): each failure is one line that
// starts with who asked and names what is missing. Each TEST runs in its own process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "xf/error.h"
#include "xf/modules/module.h"

namespace xf {
namespace {

std::string load_error(const std::string& name) {
  try {
    modules::load_module(name, "device test");
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("device test: ", 0), 0u) << message;
    return message;
  }
  ADD_FAILURE() << name << " loaded";
  return {};
}

bool is_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(ModuleLoader, LoadsAModuleOnFirstUseAndOnlyOnce) {
  setenv("XF_MODULE_PATH", "/nonexistent-xf-dir:" XF_TEST_MODULE_DIR, 1);
  EXPECT_FALSE(is_mapped("libxf_test_module_good.so"));
  const xf_module& module = modules::load_module("xf_test_module_good", "device test");
  EXPECT_TRUE(is_mapped("libxf_test_module_good.so"));
  EXPECT_STREQ(module.device, "test");
  EXPECT_EQ(*static_cast<const int*>(module.interface()), 42);
  EXPECT_EQ(&modules::load_module("xf_test_module_good", "device test"), &module);
}

TEST(ModuleLoader, AMissingModuleNamesTheFileAndWhereItLooked) {
  setenv("XF_MODULE_PATH", "/nonexistent-a:/nonexistent-b", 1);
  EXPECT_EQ(load_error("xf_test_module_good"),
            "device test: module libxf_test_module_good.so not found in /nonexistent-a, /nonexistent-b "
            "(XF_MODULE_PATH sets where to look)");
}

TEST(ModuleLoader, AMissingLibraryOfTheModuleIsNamed) {
  setenv("XF_MODULE_PATH", XF_TEST_MODULE_DIR, 1);
  const std::string message = load_error("xf_test_module_needs_dependency");
  EXPECT_NE(message.find("cannot load " XF_TEST_MODULE_DIR "/libxf_test_module_needs_dependency.so: "
                         "libxf_test_module_dependency.so: cannot open shared object file"),
            std::string::npos)
      << message;
}

TEST(ModuleLoader, ALibraryWithoutTheEntryIsRefused) {
  setenv("XF_MODULE_PATH", XF_TEST_MODULE_DIR, 1);
  EXPECT_EQ(load_error("xf_test_module_no_entry"),
            "device test: " XF_TEST_MODULE_DIR "/libxf_test_module_no_entry.so is not an xf module (no xf_module_entry)");
}

TEST(ModuleLoader, AModuleOfAnotherBuildIsRefused) {
  setenv("XF_MODULE_PATH", XF_TEST_MODULE_DIR, 1);
  EXPECT_EQ(load_error("xf_test_module_other_build"),
            "device test: " XF_TEST_MODULE_DIR "/libxf_test_module_other_build.so was built for xf 0.0.0 other, "
            "this is xf " XF_MODULE_ABI " (use the module of the same build)");
}

TEST(ModuleLoader, CallModuleTurnsAnyExceptionIntoAnError) {
  try {
    modules::call_module([]() -> int { throw std::out_of_range("index 7 out of range"); });
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "index 7 out of range");
  }
  try {
    modules::call_module([] { throw 3; });
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown error in a device module");
  }
  EXPECT_EQ(modules::call_module([] { return 5; }), 5);
}

}  // namespace
}  // namespace xf
