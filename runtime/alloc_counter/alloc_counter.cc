// The counting hook: replaces the malloc family and forwards to glibc's implementation
// (__libc_malloc and friends), so it needs no dlsym and works from the first allocation.
// Linked into test and benchmark executables only (the `xf_alloc_counter` object library);
// the executable's definitions interpose on every shared library's calls too (oneDNN's).
#include <malloc.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "xf/alloc_counter.h"
#include "xf/library_call.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* pointer, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* pointer);
}

namespace {

std::atomic<bool> counting{false};
std::atomic<uint64_t> xf_count{0};
std::atomic<uint64_t> backend_count{0};
std::atomic<uint64_t> xf_counting_thread_count{0};
std::atomic<pthread_t> counting_thread{};

inline void count_allocation() {
  if (!counting.load(std::memory_order_relaxed)) return;
  if (xf::inside_library_call()) {
    backend_count.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  xf_count.fetch_add(1, std::memory_order_relaxed);
  if (pthread_equal(pthread_self(), counting_thread.load(std::memory_order_relaxed)))
    xf_counting_thread_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

namespace xf::alloc_counter {

void start() {
  xf_count = 0;
  backend_count = 0;
  xf_counting_thread_count = 0;
  counting_thread = pthread_self();
  counting = true;
}

Counts stop() {
  counting = false;
  return {xf_count.load(), backend_count.load(), xf_counting_thread_count.load()};
}

}  // namespace xf::alloc_counter

extern "C" {

void* malloc(size_t size) {
  count_allocation();
  return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) {
  count_allocation();
  return __libc_calloc(count, size);
}

void* realloc(void* pointer, size_t size) {
  count_allocation();
  return __libc_realloc(pointer, size);
}

void free(void* pointer) { __libc_free(pointer); }

void* memalign(size_t alignment, size_t size) {
  count_allocation();
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
  count_allocation();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** pointer, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  count_allocation();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *pointer = p;
  return 0;
}

void* valloc(size_t size) {
  count_allocation();
  return __libc_memalign(4096, size);
}

}  // extern "C"
