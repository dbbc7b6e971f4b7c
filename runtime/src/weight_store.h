#pragma once
// The model's weights as a backend reads them, for every device: a tensor in the dtype the
// device asks for (f32, f16, bf16, or int8 with per-row scales), converted at most once per
// dtype and kept, so that a tied output projection and its embedding share one copy. What
// differs between devices is only where the bytes end up: a host device (the CPU) reads the
// file's own bytes where their dtype is the one asked and keeps converted copies in host
// memory; a device with memory of its own gives an Upload, which copies each converted tensor
// there (the host copy is then dropped).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "xf/dtype.h"
#include "xf/format/model_file.h"

namespace xf::runtime {

// A tensor as a device reads it: [rows, cols] (a 1-D tensor is one row), row_scales set for int8.
struct WeightView {
  DType dtype = DType::f32;
  const void* data = nullptr;
  const float* row_scales = nullptr;
  int64_t rows = 0, cols = 0;
  // rows, or seven_bit_rows for int8 values already in 7 bits (a 7-bit tensor of the file).
  // get_in_layout() may also give the file's panels.
  WeightLayout layout = WeightLayout::rows;
};

class WeightStore {
 public:
  // Copies `size` host bytes into the device's memory and returns where they went.
  using Upload = std::function<const void*(const void* bytes, size_t size)>;

  // upload: empty for a device that reads host memory.
  explicit WeightStore(const ModelFile& file, Upload upload = {});

  // `name` in `dtype`. copy: never the file's own bytes, even in the stored dtype (a host
  // device's small vectors, which would otherwise fault back released pages of a neighbouring
  // matrix: the kernel maps a faulting page's cached neighbours with it).
  // Always row-major: a tensor stored in panels (format version 4) is unpacked into a copy.
  WeightView get(const std::string& name, DType dtype, bool copy = false);
  // The file's own bytes in their stored layout when it is `dtype` and `reads_layout(layout)`
  // says a kernel reads that layout in place; else get(name, dtype).
  template <typename ReadsLayout>
  WeightView get_in_layout(const std::string& name, DType dtype, ReadsLayout reads_layout) {
    const TensorView& t = file_.tensor(name);
    if (!upload_ && t.dtype == dtype && t.layout != WeightLayout::rows && reads_layout(t.layout)) {
      return {dtype, t.data, t.row_scales, static_cast<int64_t>(t.rows()), static_cast<int64_t>(t.cols()), t.layout};
    }
    return get(name, dtype);
  }
  // Whether get(name, dtype) made a converted copy already.
  bool has_copy(const std::string& name, DType dtype) const;

  const TensorView& stored(const std::string& name) const { return file_.tensor(name); }
  // Lets the file drop its mapped pages of a matrix that nothing reads any more.
  void release_stored(const TensorView& t) const { file_.release_pages(t); }

 private:
  struct HostCopy {
    std::vector<std::byte> values;
    std::vector<float> row_scales;  // int8 only
  };
  // The stored tensor's values in `dtype`: f16/bf16 narrowed with round-to-nearest-even, int8
  // quantized per row as the converter writes it (quantize_rows_int8); the stored dtype copied.
  static HostCopy convert(const TensorView& t, DType dtype);

  const ModelFile& file_;
  Upload upload_;
  std::unordered_map<std::string, WeightView> copies_;     // by name#dtype
  std::unordered_map<std::string, HostCopy> host_copies_;  // a host device's, by name#dtype
};

}  // namespace xf::runtime
