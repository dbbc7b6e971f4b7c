#pragma once
// The tensor dtypes xf stores and computes in: the model file's, the kernels' and the runtime's.
#include <cstddef>
#include <cstdint>
#include <string>

#include "xf/export.h"

namespace xf {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2, int8 = 3 };
inline constexpr int kNumDTypes = 4;

XF_API const char* dtype_name(DType dtype);           // "f32", "f16", "bf16", "int8"
XF_API DType parse_dtype(const std::string& name);    // throws xf::Error on an unknown name
XF_API size_t dtype_size(DType dtype);                // bytes per element

}  // namespace xf
