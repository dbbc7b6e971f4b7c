#pragma once
// Calls into other libraries are marked while they run, so that the heap-allocation counter of
// the tests and xf-bench (runtime/alloc_counter) can tell the libraries' allocations from xf's
// own (xf's own code allocates nothing while it translates; the libraries may).
// - LibraryCallScope, this thread's mark: the CUDA runtime and cuBLAS calls (XF_CUDA_CHECK,
//   XF_CUBLAS_CHECK in xf/kernels_cuda/check.h), made on the decoding thread while other
//   threads may be decoding too.
// - ProcessLibraryCallScope, a process-wide mark: oneDNN's primitives, whose OpenMP workers
//   allocate on threads of their own that a thread's mark would not cover.
namespace xf {

class LibraryCallScope {
 public:
  LibraryCallScope();
  ~LibraryCallScope();
  LibraryCallScope(const LibraryCallScope&) = delete;
  LibraryCallScope& operator=(const LibraryCallScope&) = delete;
};

class ProcessLibraryCallScope {
 public:
  ProcessLibraryCallScope();
  ~ProcessLibraryCallScope();
  ProcessLibraryCallScope(const ProcessLibraryCallScope&) = delete;
  ProcessLibraryCallScope& operator=(const ProcessLibraryCallScope&) = delete;
};

// True while this thread is inside a LibraryCallScope or any thread inside a
// ProcessLibraryCallScope.
bool inside_library_call();

}  // namespace xf
