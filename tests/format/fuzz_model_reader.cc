// libFuzzer target: ModelFile::from_memory on arbitrary bytes must throw xf::Error or return a
// model whose every tensor byte can be read. Build with the fuzz preset (clang); run by hand:
//   build-fuzz/bin/make_fuzz_seeds SEEDS CORPUS
//   build-fuzz/bin/fuzz_model_reader -max_total_time=60 -max_len=65536 CORPUS SEEDS
//
// Byte-level mutations rarely keep a file self-consistent, so the harness repairs two things
// before reading, letting the fuzzer reach the checks behind them: the CRC-32 in the preamble
// is recomputed, and when the header parses, the input is cut to end where the header says the
// blob ends (so a smaller blob_size yields a consistent file whose tensors may run past it).
// Both repaired checks (checksum, trailing bytes) are covered by the unit tests.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"
#include "xf_model_generated.h"

namespace {

// The length the input would have if it ended exactly at the blob's end (never longer).
size_t consistent_length(const uint8_t* data, size_t size) {
  if (size < xf::kPreambleSize) return size;
  uint32_t header_size;
  std::memcpy(&header_size, data, 4);
  if (header_size > size - xf::kPreambleSize || header_size >= FLATBUFFERS_MAX_BUFFER_SIZE) {
    return size;
  }
  const uint8_t* header = data + xf::kPreambleSize;
  flatbuffers::Verifier verifier(header, header_size);
  if (!xf::fb::VerifyModelBuffer(verifier)) return size;
  const uint64_t blob_offset =
      xf::align_up(xf::kPreambleSize + uint64_t{header_size}, xf::kBlobAlignment);
  const uint64_t blob_size = xf::fb::GetModel(header)->blob_size();
  if (blob_offset > size || blob_size > size - blob_offset) return size;
  return static_cast<size_t>(blob_offset + blob_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t input_size) {
  // Exact-size copies, so a read one byte past the end is still an ASan report.
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[std::max<size_t>(input_size, 1)]);
  if (input_size) std::memcpy(bytes.get(), data, input_size);
  if (input_size >= xf::kPreambleSize) {
    uint32_t header_size;
    std::memcpy(&header_size, bytes.get(), 4);
    if (header_size <= input_size - xf::kPreambleSize) {
      const uint32_t crc = xf::crc32(bytes.get() + xf::kPreambleSize, header_size);
      std::memcpy(bytes.get() + 4, &crc, 4);
    }
  }
  const size_t size = consistent_length(bytes.get(), input_size);
  if (size < input_size) {
    std::unique_ptr<uint8_t[]> cut(new uint8_t[std::max<size_t>(size, 1)]);
    std::memcpy(cut.get(), bytes.get(), size);
    bytes = std::move(cut);
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
