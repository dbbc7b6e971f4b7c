#pragma once
// Helpers for the CUDA kernel tests: skipping without a GPU, device buffers, f16 conversions on
// the host and tolerance checks against double references.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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

// Device memory for one test, through the counted wrapper.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count)
      : count_(count), data_(static_cast<T*>(cuda::device_malloc(count * sizeof(T)))) {}
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cuda::device_free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), count_);
    XF_CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for all queued work first, so a kernel's failure surfaces here.
  std::vector<T> download() const {
    XF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    XF_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  T* data_;
};

inline std::vector<__half> to_half(const std::vector<float>& values) {
  std::vector<__half> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    __half_raw raw;
    raw.x = float_to_half(values[i]);
    out[i] = __half(raw);
  }
  return out;
}

inline std::vector<float> to_float(const std::vector<__half>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = half_to_float(static_cast<__half_raw>(values[i]).x);
  }
  return out;
}

// The values an f16 buffer made from `values` holds, as f32 (the references use these).
inline std::vector<float> round_to_half(const std::vector<float>& values) {
  return to_float(to_half(values));
}

// Every |actual[i] - expected[i]| <= tolerance * (|expected[i]| + scale[i]): relative error,
// with `scale` the magnitude below which relative error means nothing for that entry (for a
// dot product, sum |x_j w_j|). Reports the first few mismatches.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                         const std::vector<double>& scale, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  ASSERT_EQ(scale.size(), expected.size());
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double allowed = tolerance * (std::fabs(expected[i]) + scale[i]);
    const bool ok = std::fabs(static_cast<double>(actual[i]) - expected[i]) <= allowed;
    if (!ok && reported++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", expected " << expected[i]
                    << " (allowed error " << allowed << ")";
  }
  EXPECT_EQ(reported, 0) << "elements out of tolerance";
}

// Same, with one scale for every entry.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                         double scale, double tolerance) {
  expect_close(actual, expected, std::vector<double>(expected.size(), scale), tolerance);
}

inline constexpr double kF32Tolerance = 1e-5;
inline constexpr double kF16Tolerance = 1e-2;

}  // namespace xf::test
