// libFuzzer target: ModelFile::from_memory on arbitrary bytes must throw xf::Error or return a
// model whose every tensor byte can be read. Build with -DXF_FUZZ=ON and clang; run by hand:
//   build-fuzz/tests/format/fuzz_model_reader -max_total_time=60 CORPUS_DIR SEED_DIR
#include <cstddef>
#include <cstdint>

#include "xf/error.h"
#include "xf/format/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto model = xf::ModelFile::from_memory(data, size, "fuzz");
    // Read every byte the views point at; an out-of-bounds view shows up under ASan.
    volatile uint8_t sink = 0;
    for (const xf::TensorView& t : model->tensors()) {
      const auto* p = static_cast<const uint8_t*>(t.data);
      for (size_t i = 0; i < t.bytes; ++i) sink = sink ^ p[i];
      if (t.row_scales) {
        for (uint64_t r = 0; r < t.rows(); ++r) sink = sink ^ (t.row_scales[r] > 0.0f);
      }
    }
    for (char c : model->target_tokenizer()) sink = sink ^ static_cast<uint8_t>(c);
  } catch (const xf::Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
