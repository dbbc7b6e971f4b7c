#pragma once
// Helpers shared by the format tests, the fuzz seed generator and the xf-inspect tests:
// random parameters and a hand-made header builder for broken files.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "temp_dir.h"   // TempDir
#include "tiny_model.h"  // tiny_config
#include "xf/format/config.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"

namespace xf::test {

// The stored bytes of one parameter, as a test expects to read them back.
struct TensorBytes {
  DType dtype = DType::f32;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;   // raw values in dtype
  std::vector<float> scales;   // int8 only: one positive f32 per row (shape[0])
};

// Every parameter of `config` in `dtype`, filled with random bytes from `seed` (finite values
// for f32/f16/bf16 so a test can also compare numbers; random int8 with positive scales).
std::map<std::string, TensorBytes> random_parameters(const ModelConfig& config, DType dtype,
                                                     uint32_t seed);
void add_parameters(ModelWriter& writer, const std::map<std::string, TensorBytes>& parameters);

// A complete valid file: config, a tokenizer, two metadata entries, random parameters.
std::vector<uint8_t> valid_model_bytes(const ModelConfig& config, DType dtype, uint32_t seed);

// One entry of a hand-made tensor table. dtype is the raw schema byte, so it can be unknown.
struct TensorEntry {
  std::string name;
  int8_t dtype = 0;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t scales_offset = 0;
  int8_t layout = 0;  // the raw schema byte (format version 4), so it can be unknown
};

// Everything the FlatBuffers header says, field by field, plus the blob that follows it.
// build() writes exactly these fields with the generated code and wraps them with
// xf::assemble_model_file, so the checksum is valid and deeper checks are what fire.
struct HandMadeModel {
  uint32_t format_version = kFormatVersion;
  ModelConfig config;
  std::string source_tokenizer, target_tokenizer;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::string> source_vocabulary, target_vocabulary;  // absent when empty
  std::vector<TensorEntry> tensors;  // written in this order (not re-sorted)
  uint64_t blob_size = 0;            // the header's blob_size field
  std::vector<uint8_t> blob;         // the bytes after the padded header

  // Describes the valid file in `file_bytes` field by field; build() then gives a file with
  // the same contents (a test checks that), ready to be altered one field at a time.
  static HandMadeModel describe(const std::vector<uint8_t>& file_bytes);
  std::vector<uint8_t> build() const;
  TensorEntry& tensor(const std::string& name);  // throws std::runtime_error when absent
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_bytes(const std::string& path);

// The message of the xf::Error that opening `path` throws, or "" when it opens.
std::string open_error(const std::string& path);
// The same for bytes in memory; the bytes are copied into a buffer of exactly their size so
// that AddressSanitizer catches any read past the end.
std::string memory_error(const uint8_t* bytes, size_t size, const std::string& label);
std::string memory_error(const std::vector<uint8_t>& bytes, const std::string& label);

}  // namespace xf::test
