// Modules for module_loader_test.cc, one per case, chosen by a definition:
// XF_TEST_MODULE_GOOD (interface(): an int holding 42), XF_TEST_MODULE_OTHER_BUILD (another
// ABI tag), XF_TEST_MODULE_NO_ENTRY (a shared library that is not a module), and
// XF_TEST_MODULE_NEEDS_DEPENDENCY (a good module linked against a library that is not found).
#include "xf/modules/module.h"

#if defined(XF_TEST_MODULE_NEEDS_DEPENDENCY)
int xf_test_module_dependency_value();
#endif

namespace {
const int kAnswer = 42;
}

#if defined(XF_TEST_MODULE_NO_ENTRY)
extern "C" __attribute__((visibility("default"))) int xf_test_not_a_module(void) { return kAnswer; }
#else
extern "C" __attribute__((visibility("default"))) const xf_module* xf_module_entry(void) {
#if defined(XF_TEST_MODULE_OTHER_BUILD)
  static const xf_module module = {"0.0.0 other", "test", [] { return static_cast<const void*>(&kAnswer); }};
#elif defined(XF_TEST_MODULE_NEEDS_DEPENDENCY)
  static const int value = xf_test_module_dependency_value();
  static const xf_module module = {XF_MODULE_ABI, "test", [] { return static_cast<const void*>(&value); }};
#else
  static const xf_module module = {XF_MODULE_ABI, "test", [] { return static_cast<const void*>(&kAnswer); }};
#endif
  return &module;
}
#endif
