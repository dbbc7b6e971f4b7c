#include "xf/kernels_cuda/matmul.h"

#include <climits>
#include <string>
#include <utility>

#include "xf/error.h"
#include "xf/kernels_cuda/check.h"

namespace xf::cuda {
namespace {

void require_gemm_shape(int64_t m, int64_t n, int64_t k, const char* who) {
  if (m < 0 || n <= 0 || k <= 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
      n * k > INT64_MAX / 2)
    throw Error(std::string(who) + ": shape m=" + std::to_string(m) + " n=" + std::to_string(n) +
                " k=" + std::to_string(k) + " is empty or beyond cuBLAS's int dimensions");
}

// Row-major y[m, n] = x[m, k] W[n, k]^T is column-major y^T[n, m] = W^T... in cuBLAS's terms:
// W (row-major [n, k]) is column-major [k, n] with ld k, used transposed; x is column-major
// [k, m] with ld k; y is column-major [n, m] with ld n.
void gemm_ex(cublasHandle_t handle, const void* x, cudaDataType x_type, const void* w,
             cudaDataType w_type, void* y, cudaDataType y_type, int64_t m, int64_t n, int64_t k) {
  require_gemm_shape(m, n, k, "matmul");
  if (m == 0) return;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  XF_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                               static_cast<int>(m), static_cast<int>(k), &alpha, w, w_type,
                               static_cast<int>(k), x, x_type, static_cast<int>(k), &beta, y,
                               y_type, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

}  // namespace

size_t recommended_cublas_workspace_bytes(int device) {
  int major = 0;
  XF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20);
}

void bind_cublas_handle(cublasHandle_t handle, cudaStream_t stream, void* workspace,
                        size_t workspace_bytes) {
  XF_CUBLAS_CHECK(cublasSetStream(handle, stream));
  XF_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, workspace_bytes));
  // Default math: f32 products stay f32 (TF32 only with an explicit *_FAST_TF32 compute type).
  XF_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
}

void matmul(cublasHandle_t handle, const float* x, const float* w, float* y, int64_t m,
            int64_t n, int64_t k) {
  gemm_ex(handle, x, CUDA_R_32F, w, CUDA_R_32F, y, CUDA_R_32F, m, n, k);
}

void matmul(cublasHandle_t handle, const __half* x, const __half* w, __half* y, int64_t m,
            int64_t n, int64_t k) {
  gemm_ex(handle, x, CUDA_R_16F, w, CUDA_R_16F, y, CUDA_R_16F, m, n, k);
}

void matmul(cublasHandle_t handle, const __half* x, const __half* w, float* y, int64_t m,
            int64_t n, int64_t k) {
  gemm_ex(handle, x, CUDA_R_16F, w, CUDA_R_16F, y, CUDA_R_32F, m, n, k);
}

}  // namespace xf::cuda
