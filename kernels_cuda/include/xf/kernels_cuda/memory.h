#pragma once
// Device and pinned host memory. Every cudaMalloc/cudaFree (and cudaMallocHost/cudaFreeHost)
// that xf makes goes through device_malloc/device_free (pinned_host_malloc/pinned_host_free),
// which count them, so a test can require zero calls while a Translator translates
// (DESIGN.md, "Allocation-free"). The runtime takes one DeviceArena when a Translator is built
// and hands out sub-buffers by offset from it.
#include <cstddef>
#include <cstdint>

namespace xf::cuda {

// cudaMalloc; throws xf::Error naming the size on failure. bytes == 0 returns nullptr uncounted.
void* device_malloc(size_t bytes);
// cudaFree; null is a no-op. Never throws (destructors call it): a failure here can only be an
// earlier sticky error, which the next checked call reports.
void device_free(void* pointer) noexcept;
// cudaMallocHost (page-locked, for asynchronous copies) and cudaFreeHost, counted likewise.
void* pinned_host_malloc(size_t bytes);
void pinned_host_free(void* pointer) noexcept;

// Process-wide totals since start, from all threads.
struct AllocationCounts {
  uint64_t device_mallocs = 0;
  uint64_t device_frees = 0;
  uint64_t pinned_host_mallocs = 0;
  uint64_t pinned_host_frees = 0;
};
AllocationCounts allocation_counts();

// Rounds bytes up to a multiple of alignment (a power of two).
constexpr size_t align_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

// Default sub-allocation alignment: what cuBLASLt's heuristics assume, and enough for any
// vectorized access.
inline constexpr size_t kArenaAlignment = 256;

// One device allocation made at construction, split into sub-buffers by offset. Sub-buffers are
// never freed one by one: reset() starts again from offset 0 (lifetime reuse is the caller's
// plan). A request that does not fit throws xf::Error; the arena never grows.
class DeviceArena {
 public:
  explicit DeviceArena(size_t capacity_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;

  // The next `bytes` at an offset aligned to `alignment` (a power of two <= kArenaAlignment).
  void* allocate(size_t bytes, size_t alignment = kArenaAlignment);
  template <typename T>
  T* allocate_array(size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T), alignof(T) > 16 ? alignof(T) : 16));
  }
  // The sub-buffer at a planned offset; throws unless [offset, offset + bytes) fits.
  void* at(size_t offset, size_t bytes) const;

  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace xf::cuda
