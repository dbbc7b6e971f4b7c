// The library-call marks (xf/library_call.h): a thread-local depth and a process-wide one. Neither
// allocates, so the allocation hook may read them from inside malloc.
#include "xf/library_call.h"

#include <atomic>

namespace xf {
namespace {

thread_local int t_library_depth = 0;
std::atomic<int> g_process_library_depth{0};

}  // namespace

LibraryCallScope::LibraryCallScope() { ++t_library_depth; }
LibraryCallScope::~LibraryCallScope() { --t_library_depth; }

ProcessLibraryCallScope::ProcessLibraryCallScope() { g_process_library_depth.fetch_add(1, std::memory_order_relaxed); }
ProcessLibraryCallScope::~ProcessLibraryCallScope() {
  g_process_library_depth.fetch_sub(1, std::memory_order_relaxed);
}

bool inside_library_call() {
  return t_library_depth > 0 || g_process_library_depth.load(std::memory_order_relaxed) > 0;
}

}  // namespace xf
