#pragma once
// The bytes around the FlatBuffers header (format/README.md, "Byte layout"):
//
//   [0, 4)        u32 header_size H (little endian)
//   [4, 8)        u32 CRC-32 (IEEE) of the H header bytes
//   [8, 8+H)      FlatBuffers header, file identifier "XFM1" at [12, 16)
//   [8+H, B)      zero padding, B = align_up(8 + H, 256)
//   [B, B+S)      weight blob, S = Model.blob_size; the file ends exactly there
//
// Exposed so tests can assemble deliberately broken files around a valid or hand-made header.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xf {

inline constexpr size_t kPreambleSize = 8;

uint32_t crc32(const void* data, size_t size);

inline constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Preamble + header + padding + blob, exactly as the writer lays them out.
std::vector<uint8_t> assemble_model_file(const uint8_t* header, size_t header_size,
                                         const uint8_t* blob, size_t blob_size);

}  // namespace xf
