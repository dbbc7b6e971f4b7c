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

struct LtMatmul::Impl {
  cublasLtHandle_t handle = nullptr;
  int64_t m = 0, n = 0, k = 0;
  MatmulEpilogue epilogue = MatmulEpilogue::none;
  size_t workspace_bytes = 0;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr;  // column-major [k, n], ld k, used transposed
  cublasLtMatrixLayout_t x_layout = nullptr;  // column-major [k, m], ld k
  cublasLtMatrixLayout_t y_layout = nullptr;  // column-major [n, m], ld n
  cublasLtMatmulAlgo_t algorithm{};

  ~Impl() {
    // Destroy calls only fail on a null descriptor; nothing to report from a destructor.
    if (y_layout != nullptr) (void)cublasLtMatrixLayoutDestroy(y_layout);
    if (x_layout != nullptr) (void)cublasLtMatrixLayoutDestroy(x_layout);
    if (w_layout != nullptr) (void)cublasLtMatrixLayoutDestroy(w_layout);
    if (operation != nullptr) (void)cublasLtMatmulDescDestroy(operation);
  }
};

namespace {

// Owns a heuristic preference only while the constructor needs it.
struct PreferenceGuard {
  cublasLtMatmulPreference_t preference = nullptr;
  ~PreferenceGuard() {
    if (preference != nullptr) (void)cublasLtMatmulPreferenceDestroy(preference);
  }
};

}  // namespace

LtMatmul::LtMatmul(cublasLtHandle_t handle, MatmulType type, int64_t m, int64_t n, int64_t k,
                   MatmulEpilogue epilogue, size_t workspace_bytes)
    : impl_(std::make_unique<Impl>()) {
  require_gemm_shape(m, n, k, "LtMatmul");
  if (m == 0) throw Error("LtMatmul: m must be positive");
  Impl& p = *impl_;
  p.handle = handle;
  p.m = m;
  p.n = n;
  p.k = k;
  p.epilogue = epilogue;
  p.workspace_bytes = workspace_bytes;
  const cudaDataType data_type = type == MatmulType::f32 ? CUDA_R_32F : CUDA_R_16F;

  XF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  XF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                 &transpose, sizeof(transpose)));
  XF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                 &no_transpose, sizeof(no_transpose)));
  const cublasLtEpilogue_t lt_epilogue = epilogue == MatmulEpilogue::bias ? CUBLASLT_EPILOGUE_BIAS
                                         : epilogue == MatmulEpilogue::bias_relu
                                             ? CUBLASLT_EPILOGUE_RELU_BIAS
                                             : CUBLASLT_EPILOGUE_DEFAULT;
  XF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                 &lt_epilogue, sizeof(lt_epilogue)));

  XF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.w_layout, data_type, k, n, k));
  XF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.x_layout, data_type, k, m, k));
  XF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.y_layout, data_type, n, m, n));

  PreferenceGuard guard;
  XF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&guard.preference));
  const uint64_t max_workspace = workspace_bytes;
  XF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.preference,
                                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &max_workspace, sizeof(max_workspace)));
  // Sub-buffers of the arena are 256-byte aligned, but slices of them (a layer's rows) need only
  // be 16-byte aligned: choose only algorithms that accept that.
  const uint32_t alignment = 16;
  for (const cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    XF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(guard.preference, attribute, &alignment,
                                                         sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  XF_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, p.operation, p.w_layout, p.x_layout,
                                                 p.y_layout, p.y_layout, guard.preference, 1,
                                                 &result, &returned));
  if (returned == 0)
    throw Error("LtMatmul: cuBLASLt has no algorithm for m=" + std::to_string(m) +
                " n=" + std::to_string(n) + " k=" + std::to_string(k) + " within " +
                std::to_string(workspace_bytes) + " workspace bytes");
  p.algorithm = result.algo;
}

LtMatmul::~LtMatmul() = default;
LtMatmul::LtMatmul(LtMatmul&&) noexcept = default;
LtMatmul& LtMatmul::operator=(LtMatmul&&) noexcept = default;

int64_t LtMatmul::m() const { return impl_->m; }
int64_t LtMatmul::n() const { return impl_->n; }
int64_t LtMatmul::k() const { return impl_->k; }

void LtMatmul::run(const void* x, const void* w, const void* bias, void* y, void* workspace,
                   cudaStream_t stream) const {
  const Impl& p = *impl_;
  if (p.epilogue != MatmulEpilogue::none) {
    if (bias == nullptr) throw Error("LtMatmul::run: this matmul adds a bias, but bias is null");
    // The bias pointer is a descriptor attribute: set per call (host-side, no allocation), so
    // one LtMatmul runs one call at a time.
    XF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof(bias)));
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  XF_CUBLAS_CHECK(cublasLtMatmul(p.handle, p.operation, &alpha, w, p.w_layout, x, p.x_layout,
                                 &beta, y, p.y_layout, y, p.y_layout, &p.algorithm, workspace,
                                 p.workspace_bytes, stream));
}

}  // namespace xf::cuda
