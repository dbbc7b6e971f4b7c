#include "xf/format/dtype_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <limits>
#include <string>

#include "xf/error.h"
#include "xf/format/model_file.h"

namespace xf {

void quantize_rows_int8(const float* values, size_t rows, size_t cols, int8_t* quantized,
                        float* scales) {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = values + r * cols;
    float absmax = 0.0f;
    for (size_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        throw Error("cannot quantize a non-finite value to int8 (row " + std::to_string(r) +
                    ", column " + std::to_string(c) + ")");
      }
      absmax = std::max(absmax, std::fabs(row[c]));
    }
    // For a row of tiny subnormals absmax / 127 underflows to zero; the smallest positive
    // float is then the scale (the values become small integers, exactly representable).
    const float scale = absmax > 0.0f
                            ? std::max(absmax / 127.0f, std::numeric_limits<float>::denorm_min())
                            : 1.0f;
    scales[r] = scale;
    for (size_t c = 0; c < cols; ++c) {
      const float q = std::nearbyint(row[c] / scale);
      quantized[r * cols + c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

void copy_rows(const TensorView& tensor, void* out) {
  if (in_panels(tensor.layout)) {
    unpack_panels(tensor.dtype, tensor.data, static_cast<int64_t>(tensor.rows()), static_cast<int64_t>(tensor.cols()),
                  out);
  } else {
    std::memcpy(out, tensor.data, tensor.elements() * dtype_size(tensor.dtype));
  }
}

void widen_to_f32(const TensorView& tensor, float* out) {
  const uint64_t count = tensor.elements(), rows = tensor.rows(), cols = tensor.cols();
  if (in_panels(tensor.layout)) {  // row-major first
    std::vector<uint8_t> values(count * dtype_size(tensor.dtype));
    copy_rows(tensor, values.data());
    TensorView in_rows = tensor;
    in_rows.data = values.data();
    in_rows.layout = WeightLayout::rows;
    widen_to_f32(in_rows, out);
    return;
  }
  switch (tensor.dtype) {
    case DType::f32:
      std::memcpy(out, tensor.data, sizeof(float) * count);
      break;
    case DType::f16: {
      const auto* values = static_cast<const uint16_t*>(tensor.data);
      for (uint64_t i = 0; i < count; ++i) out[i] = half_to_float(values[i]);
      break;
    }
    case DType::bf16: {
      const auto* values = static_cast<const uint16_t*>(tensor.data);
      for (uint64_t i = 0; i < count; ++i) out[i] = bfloat16_to_float(values[i]);
      break;
    }
    case DType::int8: {
      if (tensor.row_scales == nullptr)
        throw Error(std::string(tensor.name) + ": int8 tensor without row scales");
      const auto* values = static_cast<const int8_t*>(tensor.data);
      for (uint64_t r = 0; r < rows; ++r) {
        const float scale = tensor.row_scales[r];
        for (uint64_t c = 0; c < cols; ++c) out[r * cols + c] = values[r * cols + c] * scale;
      }
      break;
    }
  }
}

}  // namespace xf
