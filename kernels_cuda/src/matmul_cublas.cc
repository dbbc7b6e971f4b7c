// y = x W^T for the runtime and the trainer's general products, through cublasGemmEx.
#include "xf/kernels/matmul.h"

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

void require_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw Error(std::string("gemm: ") + what + " = " + std::to_string(value) +
                " is negative or beyond cuBLAS's int dimensions");
}

// Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T op(A)^T, and a row-major
// matrix with row stride ld is its own transpose column-major with the same ld: so cuBLAS gets
// B first, A second, with the same transpose flags, and the dimensions n, m.
void gemm_ex(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
             int64_t k, float alpha, const void* a, int64_t lda, const void* b, int64_t ldb,
             cudaDataType input_type, float beta, float* c, int64_t ldc) {
  for (auto [value, what] : {std::pair<int64_t, const char*>{m, "m"}, {n, "n"}, {k, "k"},
                             {lda, "lda"}, {ldb, "ldb"}, {ldc, "ldc"}})
    require_int(value, what);
  if (m == 0 || n == 0) return;
  if (ldc < n || lda < (transpose_a ? m : k) || ldb < (transpose_b ? k : n))
    throw Error("gemm: a leading dimension is smaller than its row (lda " + std::to_string(lda) +
                ", ldb " + std::to_string(ldb) + ", ldc " + std::to_string(ldc) + ")");
  XF_CUBLAS_CHECK(cublasGemmEx(
      handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, input_type,
      static_cast<int>(ldb), a, input_type, static_cast<int>(lda), &beta, c, CUDA_R_32F,
      static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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

void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  gemm_ex(handle, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, CUDA_R_32F, beta, c,
          ldc);
}

void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
          int64_t k, float alpha, const __half* a, int64_t lda, const __half* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  gemm_ex(handle, transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, CUDA_R_16F, beta, c,
          ldc);
}

}  // namespace xf::cuda
