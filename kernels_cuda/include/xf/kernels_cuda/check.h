#pragma once
// Every CUDA and cuBLAS call and every kernel launch in xf goes through one of these
// macros: a failure throws xf::Error naming the call, file:line and the library's own message.
// The call runs marked as a library call (xf/library_call.h), so that the allocation counter
// tells the CUDA libraries' host allocations from xf's.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "xf/library_call.h"

namespace xf::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
// "CUBLAS_STATUS_NOT_SUPPORTED" etc. (cublasGetStatusName only exists from cuBLAS 11.4.2 on).
const char* cublas_status_name(cublasStatus_t status);

}  // namespace xf::cuda

#define XF_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    const cudaError_t xf_cuda_status_ = [&] {                                 \
      const ::xf::LibraryCallScope xf_library_call_;                          \
      return (call);                                                          \
    }();                                                                      \
    if (xf_cuda_status_ != cudaSuccess)                                       \
      ::xf::cuda::throw_cuda_error(xf_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports a bad launch configuration (and clears it).
#define XF_CUDA_CHECK_LAUNCH(kernel_name)                                        \
  do {                                                                           \
    const cudaError_t xf_cuda_status_ = cudaGetLastError();                      \
    if (xf_cuda_status_ != cudaSuccess)                                          \
      ::xf::cuda::throw_cuda_error(xf_cuda_status_, "launch of " kernel_name, __FILE__, \
                                   __LINE__);                                    \
  } while (0)

// A cuBLAS call.
#define XF_CUBLAS_CHECK(call)                                                     \
  do {                                                                            \
    const cublasStatus_t xf_cublas_status_ = [&] {                                \
      const ::xf::LibraryCallScope xf_library_call_;                              \
      return (call);                                                              \
    }();                                                                          \
    if (xf_cublas_status_ != CUBLAS_STATUS_SUCCESS)                               \
      ::xf::cuda::throw_cublas_error(xf_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)
