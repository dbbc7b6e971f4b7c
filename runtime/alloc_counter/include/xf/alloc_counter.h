#pragma once
// Heap allocation counting for tests and xf-bench. The counting hook replaces malloc, calloc,
// realloc and the aligned allocators (operator new reaches malloc) for the whole process; it is
// compiled into the executables that link the `xf_alloc_counter` object library, never into
// xf's libraries. While counting, an allocation made inside a call into another library
// (xf::inside_library_call(), xf/library_call.h: oneDNN's primitives, the CUDA runtime and
// cuBLAS) counts as the backend's, any other as xf's, and xf's are also counted apart on the
// thread that started counting (the decoding thread, beside the libraries' own threads and xf's
// workers). The marks are seen within one binary: a library call made inside a loaded module
// (modules/) is not seen by the hook of the executable that loaded it.
#include <cstdint>

namespace xf::alloc_counter {

struct Counts {
  uint64_t xf = 0;       // allocations by xf's own code (and anything else outside the backend)
  uint64_t backend = 0;  // allocations inside calls into other libraries (oneDNN, CUDA, cuBLAS)
  uint64_t xf_counting_thread = 0;  // of `xf`, those on the thread that called start()
};

// Resets the counts and starts counting, on every thread.
void start();
// Stops counting and returns what was counted since start().
Counts stop();

// Counts while alive: `Scope scope; ... Counts c = scope.stop();`
class Scope {
 public:
  Scope() { start(); }
  ~Scope() {
    if (!stopped_) stop();
  }
  Counts stop() {
    stopped_ = true;
    return alloc_counter::stop();
  }

 private:
  bool stopped_ = false;
};

}  // namespace xf::alloc_counter
