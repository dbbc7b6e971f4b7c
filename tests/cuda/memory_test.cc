// The check macros, argument validation before launch (both host-only: they run everywhere),
// the counted allocation wrapper and the device arena (GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuda_test_support.h"
#include "error_of.h"
#include "xf/error.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels/activation.h"
#include "xf/kernels/attention.h"
#include "xf/kernels/convert.h"
#include "xf/kernels/embedding.h"
#include "xf/kernels/gather.h"
#include "xf/kernels/layer_norm.h"
#include "xf/kernels/softmax.h"
#include "xf/kernels_cuda/memory.h"

namespace xf::test {
namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(cuda_host, CudaCheckNamesCallFileLineAndCudaMessage) {
  const std::string message = error_of([] { XF_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_CONTAINS(message, "memory_test.cc:");
  EXPECT_CONTAINS(message, "cudaErrorInvalidValue");
  EXPECT_CONTAINS(message, cudaGetErrorString(cudaErrorInvalidValue));
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
}

TEST(cuda_host, CublasCheckNamesStatus) {
  const std::string message = error_of([] { XF_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); });
  EXPECT_CONTAINS(message, "memory_test.cc:");
  EXPECT_CONTAINS(message, "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST(cuda_host, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(XF_CUDA_CHECK(cudaSuccess));
  EXPECT_NO_THROW(XF_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

// Bad sizes are refused on the host, before anything touches a device.
TEST(cuda_host, BadArgumentsThrowBeforeLaunch) {
  const std::string top_k = error_of([] {
    cuda::log_softmax_top_k(static_cast<const float*>(nullptr), nullptr, 1, 100, 17, nullptr,
                            nullptr, nullptr);
  });
  EXPECT_CONTAINS(top_k, "k 17");
  const std::string cached = error_of([] {
    cuda::cached_attention(static_cast<const float*>(nullptr), 512, nullptr, nullptr,
                           cuda::contiguous_head_strides(8, 40, 64), 1, 8, 64, 40, 40, nullptr,
                           512, nullptr, nullptr);
  });
  EXPECT_CONTAINS(cached, "step 40 is outside the cache of 40 positions");
  const std::string attention = error_of([] {
    const cuda::AttentionShape shape{1, 1, 1, cuda::max_attention_key_len() + 1, 64};
    cuda::attention(static_cast<const float*>(nullptr), {}, nullptr, {}, nullptr, {}, nullptr, {},
                    shape, nullptr, -1, nullptr, nullptr);
  });
  EXPECT_CONTAINS(attention, "key_len");
  const std::string layer_norm = error_of([] {
    cuda::add_bias_residual_layer_norm(static_cast<const float*>(nullptr), nullptr, nullptr,
                                       nullptr, nullptr, 1e-6f, 4, 0, nullptr, nullptr, nullptr,
                                       nullptr);
  });
  EXPECT_CONTAINS(layer_norm, "dim 0");
}

TEST(cuda_memory, DeviceMallocAndFreeAreCounted) {
  XF_SKIP_WITHOUT_GPU();
  const cuda::AllocationCounts before = cuda::allocation_counts();
  void* pointer = cuda::device_malloc(1000);
  ASSERT_NE(pointer, nullptr);
  EXPECT_EQ(cuda::allocation_counts().device_mallocs, before.device_mallocs + 1);
  cuda::device_free(pointer);
  EXPECT_EQ(cuda::allocation_counts().device_frees, before.device_frees + 1);
  void* host = cuda::pinned_host_malloc(64);
  cuda::pinned_host_free(host);
  const cuda::AllocationCounts after = cuda::allocation_counts();
  EXPECT_EQ(after.pinned_host_mallocs, before.pinned_host_mallocs + 1);
  EXPECT_EQ(after.pinned_host_frees, before.pinned_host_frees + 1);
  EXPECT_EQ(cuda::device_malloc(0), nullptr);
  EXPECT_EQ(cuda::allocation_counts().device_mallocs, before.device_mallocs + 1);
}

TEST(cuda_memory, ArenaIsOneAllocationSplitByAlignedOffsets) {
  XF_SKIP_WITHOUT_GPU();
  const cuda::AllocationCounts before = cuda::allocation_counts();
  {
    cuda::DeviceArena arena(4096);
    EXPECT_EQ(cuda::allocation_counts().device_mallocs, before.device_mallocs + 1);
    char* base = static_cast<char*>(arena.base());
    char* first = static_cast<char*>(arena.allocate(100));
    char* second = static_cast<char*>(arena.allocate(10));
    EXPECT_EQ(first, base);
    EXPECT_EQ(second - base, 256) << "sub-buffers start at 256-byte offsets";
    EXPECT_EQ(arena.used(), 266u);
    float* floats = arena.allocate_array<float>(3);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(floats) % 16, 0u);
    EXPECT_THROW(arena.allocate(4096), Error) << "beyond the capacity";
    EXPECT_THROW(arena.at(4000, 200), Error);
    EXPECT_EQ(arena.at(4000, 96), base + 4000);
    // Sub-buffers are usable device memory.
    XF_CUDA_CHECK(cudaMemset(second, 7, 10));
    char copy[10];
    XF_CUDA_CHECK(cudaMemcpy(copy, second, 10, cudaMemcpyDeviceToHost));
    EXPECT_EQ(copy[9], 7);
    arena.reset();
    EXPECT_EQ(arena.allocate(4096), base) << "reset starts again from offset 0";
    EXPECT_EQ(cuda::allocation_counts().device_mallocs, before.device_mallocs + 1)
        << "sub-allocations never call cudaMalloc";
  }
  EXPECT_EQ(cuda::allocation_counts().device_frees, before.device_frees + 1);
}

}  // namespace
}  // namespace xf::test
