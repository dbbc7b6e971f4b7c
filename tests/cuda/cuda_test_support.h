#pragma once
// Skipping a CUDA test, saying why, where no GPU is usable. (The kernel tests' device buffers and
// tolerance checks are in tests/kernels/kernel_device*.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

// What the tests including this had from it before (errors, XF_CUDA_CHECK, the counted
// allocations, f16 conversions).
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/kernels_cuda/check.h"
#include "xf/kernels_cuda/memory.h"

namespace xf::test {

// Empty when a CUDA device is usable, else why not (asked once per process).
inline const std::string& gpu_unavailable_reason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("no usable CUDA device (cudaGetDeviceCount: ") +
             cudaGetErrorString(status) + ")";
    }
    if (count == 0) return std::string("no CUDA device visible");
    return std::string();
  }();
  return reason;
}

#define XF_SKIP_WITHOUT_GPU()                                              \
  do {                                                                     \
    if (!::xf::test::gpu_unavailable_reason().empty())                     \
      GTEST_SKIP() << "skipped: " << ::xf::test::gpu_unavailable_reason(); \
  } while (0)

}  // namespace xf::test
