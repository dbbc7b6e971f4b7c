// libFuzzer target: ModelFile::from_memory on arbitrary bytes must throw xf::Error or return a
// model whose every tensor byte can be read. Build with the fuzz preset (clang); run by hand:
//   build-fuzz/bin/make_fuzz_seeds SEEDS CORPUS
//   build-fuzz/bin/fuzz_model_reader -max_total_time=60 -max_len=65536 CORPUS SEEDS
//
// A mutated header almost never keeps a matching CRC-32, so the harness writes the right
// checksum into the preamble before reading: the fuzzer then explores the FlatBuffers verifier
// and every check behind it. (The checksum check itself is covered by the unit tests.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size copy, so a read one byte past the end is still an ASan report.
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[std::max<size_t>(size, 1)]);
  if (size) std::memcpy(bytes.get(), data, size);
  if (size >= xf::kPreambleSize) {
    uint32_t header_size;
    std::memcpy(&header_size, bytes.get(), 4);
    if (header_size <= size - xf::kPreambleSize) {
      const uint32_t crc = xf::crc32(bytes.get() + xf::kPreambleSize, header_size);
      std::memcpy(bytes.get() + 4, &crc, 4);
    }
  }
  try {
    const auto model = xf::ModelFile::from_memory(bytes.get(), size, "fuzz");
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
    for (const auto& [key, value] : model->metadata()) sink = sink ^ key.size() ^ value.size();
  } catch (const xf::Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
