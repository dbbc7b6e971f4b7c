// The trainer's general row-major GEMM through cublasGemmEx: f32 or f16 inputs, f32 output and
// accumulation (forward products, and the transposed products of the backward pass).
#include <climits>
#include <string>
#include <utility>

#include "xf/error.h"
#include "xf/kernels_cuda/backward.h"
#include "xf/kernels_cuda/check.h"

namespace xf::cuda {
namespace {

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
