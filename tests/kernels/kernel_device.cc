// The device list, the tolerance checks and what every device shares (kernel_device.h).
#include "kernel_device.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "xf/format/dtype_convert.h"

namespace xf::test {

Floats KernelDevice::representable(Floats values) const {
  if (precision() == Precision::f16)
    for (float& v : values) v = half_to_float(float_to_half(v));
  return values;
}

// The CUDA-only kernels: a suite over devices_with() their feature never calls these.
namespace {
[[noreturn]] void lacks(const KernelDevice& device, const char* op) {
  throw std::logic_error(device.name() + " has no " + op);
}
}  // namespace
void KernelDevice::add_bias_split_heads(const Floats&, int64_t, int64_t, const Floats&, int64_t,
                                        int, int64_t, int64_t, int64_t, int64_t, Floats*,
                                        const HeadStrides*, int64_t) {
  lacks(*this, "add_bias_split_heads");
}
void KernelDevice::convert(const Floats&, std::vector<uint16_t>&, Floats&) { lacks(*this, "convert"); }
Ints KernelDevice::gather_rows_int32(const Ints&, int64_t, const Ints&, int64_t, Ints, int64_t) {
  lacks(*this, "int32 gather_rows");
}
Floats KernelDevice::attention_dropout_values(const AttentionBackwardCall&) {
  lacks(*this, "attention_dropout_values");
}

const KernelDevice& cpu_device() {
  static const KernelDevice device;
  return device;
}

std::vector<const KernelDevice*> all_devices() {
  std::vector<const KernelDevice*> devices{&cpu_device()};
#ifdef XF_TEST_CUDA_DEVICES
  devices.push_back(&cuda_device(Precision::f32));
  devices.push_back(&cuda_device(Precision::f16));
#endif
  return devices;
}

std::vector<const KernelDevice*> devices_with(Feature feature) {
  std::vector<const KernelDevice*> devices;
  for (const KernelDevice* device : all_devices())
    if (device->has(feature)) devices.push_back(device);
  return devices;
}

std::vector<const KernelDevice*> devices_of(Precision precision) {
  std::vector<const KernelDevice*> devices;
  for (const KernelDevice* device : all_devices())
    if (device->precision() == precision) devices.push_back(device);
  return devices;
}

std::string device_name(const ::testing::TestParamInfo<const KernelDevice*>& info) {
  return info.param->name();
}

void expect_within(const Floats& actual, const std::vector<double>& expected,
                   const std::function<double(size_t)>& allowed) {
  ASSERT_EQ(actual.size(), expected.size());
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double bound = allowed(i);
    // Written so that a NaN result fails.
    if (!(std::fabs(static_cast<double>(actual[i]) - expected[i]) <= bound) && reported++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", expected " << expected[i]
                    << " (allowed error " << bound << ")";
  }
  EXPECT_EQ(reported, 0) << "elements out of tolerance";
}

void expect_close(const Floats& actual, const std::vector<double>& expected,
                  double scale, double tolerance) {
  expect_within(actual, expected,
                [&](size_t i) { return tolerance * (std::fabs(expected[i]) + scale); });
}

void expect_close_to_largest(const Floats& actual, const std::vector<double>& expected,
                             double tolerance) {
  double largest = 0;
  for (double v : expected) largest = std::max(largest, std::fabs(v));
  expect_close(actual, expected, largest, tolerance);
}

double decode_binary_float(uint32_t bits, int exponent_bits, int mantissa_bits) {
  const uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
  const uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
  const bool negative = (bits >> (mantissa_bits + exponent_bits)) & 1u;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  double value;
  if (exponent == (1u << exponent_bits) - 1) {
    value = mantissa == 0 ? std::numeric_limits<double>::infinity()
                          : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -mantissa_bits),
                       static_cast<int>(exponent) - bias);
  }
  return negative ? -value : value;
}

std::vector<double> to_double(const Floats& values) {
  return std::vector<double>(values.begin(), values.end());
}

}  // namespace xf::test
