// y = x W^T through cuBLAS against a double reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_support.h"
#include "random_inputs.h"
#include "xf/kernels/matmul.h"

namespace xf::test {
namespace {

struct Shape {
  int64_t m, n, k;
};
// Odd sizes (no multiple of a tile), a single decode row, and a square layer-sized product.
const Shape kShapes[] = {{1, 64, 32}, {7, 33, 65}, {32, 512, 512}};

struct Reference {
  std::vector<double> y;          // [m, n]
  std::vector<double> magnitude;  // [m, n]: sum_l |x w|, the scale of y's rounding error
};

// y[i, j] = sum_l x[i, l] w[j, l].
Reference reference_matmul(const std::vector<float>& x, const std::vector<float>& w, const Shape& s) {
  Reference ref{std::vector<double>(s.m * s.n), std::vector<double>(s.m * s.n)};
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0;
      double magnitude = 0.0;
      for (int64_t l = 0; l < s.k; ++l) {
        sum += static_cast<double>(x[i * s.k + l]) * w[j * s.k + l];
        magnitude += std::fabs(static_cast<double>(x[i * s.k + l]) * w[j * s.k + l]);
      }
      ref.y[i * s.n + j] = sum;
      ref.magnitude[i * s.n + j] = magnitude;
    }
  }
  return ref;
}

// A cuBLAS handle on the default stream with a fixed workspace, as a Translator would hold.
class CublasFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    XF_SKIP_WITHOUT_GPU();
    XF_CUBLAS_CHECK(cublasCreate(&handle_));
    workspace_bytes_ = cuda::recommended_cublas_workspace_bytes(0);
    workspace_ = cuda::device_malloc(workspace_bytes_);
    cuda::bind_cublas_handle(handle_, nullptr, workspace_, workspace_bytes_);
  }
  void TearDown() override {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    cuda::device_free(workspace_);
  }

  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

using cuda_matmul = CublasFixture;

TEST_F(cuda_matmul, F32MatchesDoubleReference) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
    const std::vector<float> x = random.uniform(s.m * s.k, -1.0f, 1.0f);
    const std::vector<float> w = random.uniform(s.n * s.k, -1.0f, 1.0f);
    DeviceBuffer<float> x_device(x), w_device(w), y_device(s.m * s.n);
    cuda::matmul(handle_, x_device.get(), w_device.get(), y_device.get(), s.m, s.n, s.k);
    const Reference ref = reference_matmul(x, w, s);
    expect_close(y_device.download(), ref.y, ref.magnitude, kF32Tolerance);
  }
}

TEST_F(cuda_matmul, F16InputsWithF16AndF32Outputs) {
  RandomInputs random;
  SCOPED_TRACE(random.describe());
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
    // The reference multiplies the values the f16 buffers actually hold.
    const std::vector<float> x = round_to_half(random.uniform(s.m * s.k, -1.0f, 1.0f));
    const std::vector<float> w = round_to_half(random.uniform(s.n * s.k, -1.0f, 1.0f));
    DeviceBuffer<__half> x_device(to_half(x)), w_device(to_half(w)), y_half(s.m * s.n);
    DeviceBuffer<float> y_float(s.m * s.n);
    cuda::matmul(handle_, x_device.get(), w_device.get(), y_half.get(), s.m, s.n, s.k);
    cuda::matmul(handle_, x_device.get(), w_device.get(), y_float.get(), s.m, s.n, s.k);
    const Reference ref = reference_matmul(x, w, s);
    expect_close(to_float(y_half.download()), ref.y, ref.magnitude, kF16Tolerance);
    // f32 output of f32 accumulation: only the accumulation's rounding is left.
    expect_close(y_float.download(), ref.y, ref.magnitude, 1e-4);
  }
}

}  // namespace
}  // namespace xf::test
