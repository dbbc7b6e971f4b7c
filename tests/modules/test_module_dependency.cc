// The library that libxf_test_module_needs_dependency.so needs and does not find (it is built
// into a directory that is on no search path).
__attribute__((visibility("default"))) int xf_test_module_dependency_value() { return 42; }
