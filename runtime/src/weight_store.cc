#include "weight_store.h"

#include <cstring>
#include <utility>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/model_file.h"

namespace xf::runtime {
namespace {

std::string copy_key(const std::string& name, DType dtype) { return name + '#' + dtype_name(dtype); }

}  // namespace

WeightStore::WeightStore(const ModelFile& file, Upload upload) : file_(file), upload_(std::move(upload)) {}

WeightStore::HostCopy WeightStore::convert(const TensorView& t, DType dtype) {
  const size_t n = t.elements();
  HostCopy c;
  c.values.resize(n * dtype_size(dtype));
  if (t.dtype == dtype) {
    copy_rows(t, c.values.data());  // panels unpacked
    if (dtype == DType::int8) c.row_scales.assign(t.row_scales, t.row_scales + t.rows());
    return c;
  }
  std::vector<float> wide(n);
  widen_to_f32(t, wide.data());
  switch (dtype) {
    case DType::f32:
      std::memcpy(c.values.data(), wide.data(), c.values.size());
      break;
    case DType::f16:
    case DType::bf16: {
      auto* out = reinterpret_cast<uint16_t*>(c.values.data());
      for (size_t i = 0; i < n; ++i) out[i] = dtype == DType::f16 ? float_to_half(wide[i]) : float_to_bfloat16(wide[i]);
      break;
    }
    case DType::int8:
      c.row_scales.resize(t.rows());
      quantize_rows_int8(wide.data(), t.rows(), t.cols(), reinterpret_cast<int8_t*>(c.values.data()),
                         c.row_scales.data());
      break;
  }
  return c;
}

WeightView WeightStore::get(const std::string& name, DType dtype, bool copy) {
  const TensorView& t = file_.tensor(name);
  WeightView view;
  view.dtype = dtype;
  view.rows = static_cast<int64_t>(t.rows());
  view.cols = static_cast<int64_t>(t.cols());
  // int8 values stay 7-bit through unpacking; a conversion to int8 quantizes to full range.
  if (dtype == DType::int8 && t.dtype == DType::int8 && in_seven_bits(t.layout)) view.layout = WeightLayout::seven_bit_rows;
  if (!upload_ && !copy && t.dtype == dtype && !in_panels(t.layout)) {
    view.data = t.data;
    view.row_scales = t.row_scales;
    return view;
  }
  const std::string key = copy_key(name, dtype);
  if (auto it = copies_.find(key); it != copies_.end()) return it->second;
  if (upload_ && t.dtype == dtype && !in_panels(t.layout)) {  // the file's bytes go up as they are
    view.data = upload_(t.data, t.elements() * dtype_size(dtype));
    if (dtype == DType::int8) view.row_scales = static_cast<const float*>(upload_(t.row_scales, sizeof(float) * t.rows()));
    copies_.emplace(key, view);
    return view;
  }
  HostCopy converted = convert(t, dtype);
  if (upload_) {
    view.data = upload_(converted.values.data(), converted.values.size());
    if (dtype == DType::int8)
      view.row_scales = static_cast<const float*>(
          upload_(converted.row_scales.data(), sizeof(float) * converted.row_scales.size()));
  } else {
    // Moving a vector keeps its buffer, so the pointers stay valid in the map.
    HostCopy& kept = host_copies_[key] = std::move(converted);
    view.data = kept.values.data();
    view.row_scales = kept.row_scales.empty() ? nullptr : kept.row_scales.data();
  }
  copies_.emplace(key, view);
  return view;
}

bool WeightStore::has_copy(const std::string& name, DType dtype) const {
  return copies_.count(copy_key(name, dtype)) != 0;
}

}  // namespace xf::runtime
