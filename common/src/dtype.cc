#include "xf/dtype.h"

#include "xf/error.h"

namespace xf {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::int8: return "int8";
  }
  return "unknown";
}

DType parse_dtype(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (name == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  }
  throw Error("unknown dtype '" + name + "' (expected f32, f16, bf16 or int8)");
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::int8: return 1;
  }
  return 0;
}

}  // namespace xf
