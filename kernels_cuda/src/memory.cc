#include "xf/kernels_cuda/memory.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>
#include <utility>

#include "xf/error.h"
#include "xf/kernels_cuda/check.h"

namespace xf::cuda {
namespace {

std::atomic<uint64_t> g_device_mallocs{0};
std::atomic<uint64_t> g_device_frees{0};
std::atomic<uint64_t> g_pinned_host_mallocs{0};
std::atomic<uint64_t> g_pinned_host_frees{0};

}  // namespace

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  g_device_mallocs.fetch_add(1, std::memory_order_relaxed);
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory is not sticky; do not leave it for others
    throw Error("cudaMalloc of " + std::to_string(bytes) + " bytes failed: " +
                cudaGetErrorString(status));
  }
  return pointer;
}

void device_free(void* pointer) noexcept {
  if (pointer == nullptr) return;
  g_device_frees.fetch_add(1, std::memory_order_relaxed);
  (void)cudaFree(pointer);
}

void* pinned_host_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  g_pinned_host_mallocs.fetch_add(1, std::memory_order_relaxed);
  void* pointer = nullptr;
  const cudaError_t status = cudaMallocHost(&pointer, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("cudaMallocHost of " + std::to_string(bytes) + " bytes failed: " +
                cudaGetErrorString(status));
  }
  return pointer;
}

void pinned_host_free(void* pointer) noexcept {
  if (pointer == nullptr) return;
  g_pinned_host_frees.fetch_add(1, std::memory_order_relaxed);
  (void)cudaFreeHost(pointer);
}

AllocationCounts allocation_counts() {
  AllocationCounts counts;
  counts.device_mallocs = g_device_mallocs.load(std::memory_order_relaxed);
  counts.device_frees = g_device_frees.load(std::memory_order_relaxed);
  counts.pinned_host_mallocs = g_pinned_host_mallocs.load(std::memory_order_relaxed);
  counts.pinned_host_frees = g_pinned_host_frees.load(std::memory_order_relaxed);
  return counts;
}

DeviceArena::DeviceArena(size_t capacity_bytes)
    : base_(device_malloc(capacity_bytes)), capacity_(capacity_bytes) {}

DeviceArena::~DeviceArena() { device_free(base_); }

DeviceArena::DeviceArena(DeviceArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      used_(std::exchange(other.used_, 0)) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& other) noexcept {
  if (this != &other) {
    device_free(base_);
    base_ = std::exchange(other.base_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    used_ = std::exchange(other.used_, 0);
  }
  return *this;
}

void* DeviceArena::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kArenaAlignment)
    throw Error("DeviceArena: alignment " + std::to_string(alignment) +
                " is not a power of two <= " + std::to_string(kArenaAlignment));
  const size_t offset = align_up(used_, alignment);
  if (offset > capacity_ || bytes > capacity_ - offset)
    throw Error("DeviceArena: " + std::to_string(bytes) + " bytes do not fit (" +
                std::to_string(used_) + " of " + std::to_string(capacity_) + " bytes used)");
  used_ = offset + bytes;
  return static_cast<char*>(base_) + offset;
}

void* DeviceArena::at(size_t offset, size_t bytes) const {
  if (offset > capacity_ || bytes > capacity_ - offset)
    throw Error("DeviceArena: bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + bytes) + ") are outside the arena of " +
                std::to_string(capacity_) + " bytes");
  return static_cast<char*>(base_) + offset;
}

}  // namespace xf::cuda
