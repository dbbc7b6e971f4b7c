#pragma once
// Conversions of whole tensors between f32 and the stored dtypes, for the writer's callers
// (converter, tests) and the runtimes; one value's f16/bf16 rounding is in xf/dtype.h.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "xf/dtype.h"

namespace xf {

// Symmetric per-row quantization: scale[r] = max|row r| / 127, q = round(x / scale).
// A row of zeros gets scale 1; a row whose max|x| / 127 underflows gets the smallest positive
// float. values is [rows, cols]. Throws xf::Error on a NaN or infinite value.
void quantize_rows_int8(const float* values, size_t rows, size_t cols, int8_t* quantized,
                        float* scales);

struct TensorView;  // xf/format/model_file.h

// A stored tensor's values as f32, whatever its dtype: f16 and bf16 widened, int8 times its
// row's scale (row_scales[r] for row r of [rows, cols]), f32 copied. out: [tensor.elements()].
// The one place the runtimes and tools widen whole tensors.
// Layout-aware (version 4): a tensor in panels is read back into rows first.
void widen_to_f32(const TensorView& tensor, float* out);
// A stored tensor's values in its own dtype, row-major whatever its layout (panels unpacked; a
// 7-bit tensor's values stay 7-bit, its row scales are tensor.row_scales). out: elements() x
// dtype_size(dtype) bytes.
void copy_rows(const TensorView& tensor, void* out);

}  // namespace xf
