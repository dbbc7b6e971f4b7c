#pragma once
// Device modules: shared libraries (libxf_cuda_runtime.so, libxf_cuda_trainer.so) that the
// runtime and the trainer load with dlopen the first time a device other than the CPU is asked
// for, so that a process that only uses the CPU never maps a device library.
//
// A module exports one C function, xf_module_entry, returning the table below. The table's
// interface() is an object of the C++ interface agreed for the module's kind (the runtime's
// runtime::BackendFactory, the trainer's trainer::DeviceTraining); a module serves only the
// build that made it (abi). The module holds its own hidden copy of the code it needs (format,
// kernels); the host calls its objects through adapters that turn any exception into the host's
// own xf::Error, so no type's identity has to match across the boundary.
#include <string>

extern "C" {

typedef struct xf_module {
  const char* abi;                // XF_MODULE_ABI of the build that made the module
  const char* device;             // what it serves, e.g. "cuda"
  const void* (*interface)(void);  // the kind's C++ interface object, alive until exit
} xf_module;

// The one symbol a module exports.
typedef const xf_module* (*xf_module_entry_function)(void);
#define XF_MODULE_ENTRY "xf_module_entry"

}  // extern "C"

namespace xf::modules {

// Loads lib<name>.so once per process and returns its table. Looks in the directories of
// XF_MODULE_PATH (colon-separated) when it is set, else beside the library or executable that
// holds this code and in its ../lib. Throws a one-line xf::Error that starts with `who` (e.g.
// "device cuda") and names what is missing: the module file, a library it needs (dlopen's
// message), its entry, or a matching build.
const xf_module& load_module(const std::string& name, const std::string& who);

// Runs `call`; any exception it throws becomes an xf::Error of this copy of xf with the same
// message (an adapter's every call into a module goes through this).
template <typename Call>
auto call_module(Call&& call) -> decltype(call());
[[noreturn]] void rethrow_as_error();

template <typename Call>
auto call_module(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (...) {
    rethrow_as_error();
  }
}

}  // namespace xf::modules
