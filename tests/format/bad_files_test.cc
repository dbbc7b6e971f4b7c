// The table of bad files: each must be refused with exactly this one-line message, prefixed by
// the path (or the label given to from_memory). Files that need a hand-made tensor table are
// built with the generated FlatBuffers code and wrapped by assemble_model_file, so the checksum
// is valid and the intended check is the one that fires.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <ostream>

#include "format_test_support.h"
#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

namespace xf::test {
namespace {

struct BadFile {
  std::vector<uint8_t> bytes;
  std::string problem;  // the message after "<path>: "
};

struct BadFileCase {
  std::string name;
  std::function<BadFile()> make;
};
void PrintTo(const BadFileCase& c, std::ostream* os) { *os << c.name; }

// A valid f32 model (shared embeddings, tied output) and an int8 one.
const std::vector<uint8_t>& valid_f32() {
  static const std::vector<uint8_t> bytes = valid_model_bytes(tiny_config(), DType::f32, 7);
  return bytes;
}
const std::vector<uint8_t>& valid_int8() {
  static const std::vector<uint8_t> bytes = valid_model_bytes(tiny_config(), DType::int8, 8);
  return bytes;
}

uint32_t header_size_of(const std::vector<uint8_t>& file) {
  uint32_t size;
  std::memcpy(&size, file.data(), 4);
  return size;
}
uint64_t blob_offset_of(const std::vector<uint8_t>& file) {
  return align_up(kPreambleSize + header_size_of(file), kBlobAlignment);
}
void store_u32(std::vector<uint8_t>& file, size_t at, uint32_t value) {
  std::memcpy(file.data() + at, &value, 4);
}
// After editing header bytes: make the checksum right again.
void fix_checksum(std::vector<uint8_t>& file) {
  store_u32(file, 4, crc32(file.data() + kPreambleSize, header_size_of(file)));
}

HandMadeModel hand_made_f32() { return HandMadeModel::describe(valid_f32()); }
HandMadeModel hand_made_int8() { return HandMadeModel::describe(valid_int8()); }

// A tensor of the tiny config that is f32 [16]: the bias of encoder layer 0's inner FFN block.
const std::string kBias = param::encoder_layer(0) + schema::kFfnInner.name + schema::kBias;

std::string tensor_problem(const std::string& name, const std::string& problem) {
  return "tensor '" + name + "': " + problem;
}

// The reader's words for `what` ("data", "row scales") at [offset, +size) beyond a blob of
// blob_size bytes.
std::string past_the_blob(const std::string& what, uint64_t offset, uint64_t size,
                          uint64_t blob_size) {
  return what + " [" + std::to_string(offset) + ", +" + std::to_string(size) +
         ") lies past the end of the weight blob (" + std::to_string(blob_size) + " bytes)";
}

std::vector<BadFileCase> bad_file_cases() {
  std::vector<BadFileCase> cases;
  auto add = [&](std::string name, std::function<BadFile()> make) {
    cases.push_back({std::move(name), std::move(make)});
  };

  // ---- Preamble, identifier, checksum, FlatBuffers ----
  add("empty", [] { return BadFile{{}, "empty file, not a model"}; });
  add("seven_bytes", [] {
    return BadFile{{1, 2, 3, 4, 5, 6, 7}, "truncated: 7 bytes is too short for a model header"};
  });
  add("text_file", [] {
    const std::string text = "source\ttarget\nhello\tbonjour\n";
    return BadFile{{text.begin(), text.end()}, "not an xf model (file identifier is not XFM1)"};
  });
  add("wrong_identifier", [] {
    std::vector<uint8_t> file = valid_f32();
    std::memcpy(file.data() + 12, "XFM2", 4);
    return BadFile{file, "not an xf model (file identifier is not XFM1)"};
  });
  add("header_size_past_end", [] {
    std::vector<uint8_t> file = valid_f32();
    store_u32(file, 0, static_cast<uint32_t>(file.size()));
    return BadFile{file, "truncated: the header needs " + std::to_string(file.size() + 8) +
                             " bytes, the file has " + std::to_string(file.size())};
  });
  add("flipped_header_byte", [] {
    std::vector<uint8_t> file = valid_f32();
    file[kPreambleSize + header_size_of(file) / 2] ^= 0x10;
    return BadFile{file, "header checksum mismatch (corrupt header)"};
  });
  add("flipped_checksum_byte", [] {
    std::vector<uint8_t> file = valid_f32();
    file[6] ^= 0x01;
    return BadFile{file, "header checksum mismatch (corrupt header)"};
  });
  add("root_offset_out_of_bounds", [] {
    std::vector<uint8_t> file = valid_f32();
    store_u32(file, kPreambleSize, 0x7ffffff0u);  // the FlatBuffers root table offset
    fix_checksum(file);
    return BadFile{file, "header fails FlatBuffers verification"};
  });
  add("header_size_cut_short", [] {
    // The header claims fewer bytes than the FlatBuffers data needs.
    std::vector<uint8_t> file = valid_f32();
    store_u32(file, 0, header_size_of(file) / 2);
    fix_checksum(file);
    return BadFile{file, "header fails FlatBuffers verification"};
  });

  // ---- Version rules ----
  add("future_version", [] {
    ModelWriter writer(tiny_config());
    add_parameters(writer, random_parameters(tiny_config(), DType::f32, 1));
    writer.set_format_version_for_testing(kFormatVersion + 1);
    return BadFile{writer.serialize(), "format version 5 is newer than this reader supports (4); "
                                       "upgrade xf"};
  });
  // Version 4's layouts: only in a version 4 file, only on matrices, sized by the layout.
  add("layout_in_a_version_3_file", [] {
    ModelWriter writer(tiny_config());
    add_parameters(writer, random_parameters(tiny_config(), DType::int8, 1));
    writer.set_layout("decoder.layers.0.ffn.inner.weight", WeightLayout::panels);
    writer.set_format_version_for_testing(3);
    return BadFile{writer.serialize(), "tensor 'decoder.layers.0.ffn.inner.weight': layout panels needs "
                                       "format version 4, the file says 3"};
  });
  add("unknown_layout", [] {
    HandMadeModel m = HandMadeModel::describe(valid_model_bytes(tiny_config(), DType::int8, 1));
    m.format_version = 4;
    m.tensor("decoder.layers.0.ffn.inner.weight").layout = 4;
    return BadFile{m.build(), "tensor 'decoder.layers.0.ffn.inner.weight': unknown layout 4"};
  });
  add("layout_on_a_vector", [] {
    HandMadeModel m = HandMadeModel::describe(valid_model_bytes(tiny_config(), DType::int8, 1));
    m.format_version = 4;
    m.tensor("decoder.layers.0.ffn.inner.bias").layout = 1;
    return BadFile{m.build(), "tensor 'decoder.layers.0.ffn.inner.bias': layout panels needs rank 2, not 1"};
  });
  add("seven_bit_f32", [] {
    HandMadeModel m = HandMadeModel::describe(valid_model_bytes(tiny_config(), DType::f32, 1));
    m.format_version = 4;
    m.tensor("decoder.layers.0.ffn.inner.weight").layout = 3;
    return BadFile{m.build(), "tensor 'decoder.layers.0.ffn.inner.weight': layout 7-bit panels does not hold f32"};
  });
  add("layout_size_of_rows", [] {
    // ffn.inner [16, 8] int8: rows are 128 bytes; panels of 8 columns need 16 x 8 = 128 too, so
    // take the output layer [12, 8]: 96 bytes in rows, one padded panel of 128 in panels.
    HandMadeModel m = HandMadeModel::describe(valid_model_bytes(tiny_config(), DType::int8, 1));
    m.format_version = 4;
    m.tensor("embedding.shared").layout = 1;
    return BadFile{m.build(), "tensor 'embedding.shared': size 96 bytes disagrees with shape [12,8] in int8 panels"};
  });
  add("version_zero", [] {
    ModelWriter writer(tiny_config());
    add_parameters(writer, random_parameters(tiny_config(), DType::f32, 1));
    writer.set_format_version_for_testing(0);
    return BadFile{writer.serialize(), "invalid format version 0"};
  });

  // ---- File size against the header ----
  add("blob_size_past_end", [] {
    HandMadeModel m = hand_made_f32();
    m.blob_size += 256;
    const std::vector<uint8_t> file = m.build();
    return BadFile{file, "truncated: the weights need " + std::to_string(blob_offset_of(file)) +
                             " + " + std::to_string(m.blob_size) + " bytes, the file has " +
                             std::to_string(file.size())};
  });
  add("trailing_bytes", [] {
    std::vector<uint8_t> file = valid_f32();
    file.insert(file.end(), {0, 0, 0, 0, 0});
    return BadFile{file, "5 unexpected bytes after the weight blob"};
  });

  // ---- Config ----
  add("invalid_config", [] {
    HandMadeModel m = hand_made_f32();
    m.config.d_model = 0;
    return BadFile{m.build(), "invalid model config: d_model 0 outside [1, 65536]"};
  });
  add("unknown_norm_position", [] {
    HandMadeModel m = hand_made_f32();
    m.config.norm_position = static_cast<NormPosition>(2);
    return BadFile{m.build(), "invalid model config: unknown norm_position 2"};
  });

  // ---- Tensor entries ----
  add("unknown_dtype", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).dtype = 9;
    return BadFile{m.build(), tensor_problem(kBias, "unknown dtype 9")};
  });
  add("negative_dtype", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).dtype = -3;
    return BadFile{m.build(), tensor_problem(kBias, "unknown dtype -3")};
  });
  add("rank_zero", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).shape = {};
    return BadFile{m.build(), tensor_problem(kBias, "rank 0 outside [1, 4]")};
  });
  add("rank_five", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).shape = {1, 1, 2, 2, 4};
    return BadFile{m.build(), tensor_problem(kBias, "rank 5 outside [1, 4]")};
  });
  add("zero_dimension", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).shape = {16, 0};
    return BadFile{m.build(), tensor_problem(kBias, "has a zero dimension")};
  });
  add("shape_overflows", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).shape = {uint64_t{1} << 32, uint64_t{1} << 32};
    return BadFile{m.build(), tensor_problem(kBias, "shape overflows")};
  });
  add("size_disagrees_with_shape", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).size = 68;
    return BadFile{m.build(),
                   tensor_problem(kBias, "size 68 bytes disagrees with shape [16] in f32")};
  });
  add("byte_size_overflows", [] {
    // 2^62 elements fit in uint64, their f32 bytes do not.
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).shape = {uint64_t{1} << 62};
    return BadFile{m.build(), tensor_problem(kBias, "size 64 bytes disagrees with shape "
                                                    "[4611686018427387904] in f32")};
  });
  add("offset_past_end", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).offset = m.blob_size;
    return BadFile{m.build(), tensor_problem(kBias, past_the_blob("data", m.blob_size, 64,
                                                                  m.blob_size))};
  });
  add("offset_wraps_around", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).offset = ~uint64_t{255};  // offset + size would wrap to a small number
    return BadFile{m.build(), tensor_problem(kBias, past_the_blob("data", ~uint64_t{255}, 64,
                                                                  m.blob_size))};
  });
  add("size_past_end", [] {
    // The blob ends one byte before the last tensor's values do.
    HandMadeModel m = hand_made_f32();
    const TensorEntry* last = &m.tensors[0];
    for (const TensorEntry& t : m.tensors) {
      if (t.offset > last->offset) last = &t;
    }
    m.blob_size = last->offset + last->size - 1;
    m.blob.resize(m.blob_size);
    return BadFile{m.build(), tensor_problem(last->name, past_the_blob("data", last->offset,
                                                                       last->size, m.blob_size))};
  });
  add("misaligned_offset", [] {
    HandMadeModel m = hand_made_f32();
    TensorEntry& t = m.tensor(kBias);
    t.offset += 4;
    return BadFile{m.build(), tensor_problem(kBias, "data offset " + std::to_string(t.offset) +
                                                        " is not a multiple of 256")};
  });
  add("int8_misaligned_scales", [] {
    HandMadeModel m = hand_made_int8();
    TensorEntry& t = m.tensor(kBias);
    t.scales_offset += 128;
    return BadFile{m.build(),
                   tensor_problem(kBias, "row scales offset " + std::to_string(t.scales_offset) +
                                             " is not a multiple of 256")};
  });
  add("int8_scales_past_end", [] {
    HandMadeModel m = hand_made_int8();
    m.tensor(kBias).scales_offset = m.blob_size;
    return BadFile{m.build(), tensor_problem(kBias, past_the_blob("row scales", m.blob_size, 64,
                                                                  m.blob_size))};
  });
  add("scales_on_f32", [] {
    HandMadeModel m = hand_made_f32();
    m.tensor(kBias).scales_offset = 256;
    return BadFile{m.build(), tensor_problem(kBias, "has row scales but is not int8")};
  });
  add("int8_nan_scale", [] {
    HandMadeModel m = hand_made_int8();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(&m.blob[m.tensor(kBias).scales_offset + 3 * 4], &nan, 4);
    return BadFile{m.build(), tensor_problem(kBias, "row scale 3 is not a positive finite number")};
  });
  add("int8_zero_scale", [] {
    HandMadeModel m = hand_made_int8();
    const float zero = 0.0f;
    std::memcpy(&m.blob[m.tensor(kBias).scales_offset], &zero, 4);
    return BadFile{m.build(), tensor_problem(kBias, "row scale 0 is not a positive finite number")};
  });
  add("overlapping_tensors", [] {
    // Two tensors pointing at the same bytes: the one later in the table is named.
    HandMadeModel m = hand_made_f32();
    const TensorEntry& first = m.tensors[0];
    TensorEntry& bias = m.tensor(kBias);
    bias.offset = first.offset;
    return BadFile{m.build(),
                   tensor_problem(kBias, "data [" + std::to_string(bias.offset) + ", +64) "
                                         "overlaps tensor '" + first.name + "' data [" +
                                         std::to_string(first.offset) + ", +" +
                                         std::to_string(first.size) + ")")};
  });
  add("int8_shared_scales", [] {
    // Row scales that point at another tensor's (valid) scales.
    HandMadeModel m = hand_made_int8();
    const TensorEntry& first = m.tensors[0];
    TensorEntry& bias = m.tensor(kBias);
    EXPECT_EQ(first.shape[0], bias.shape[0]) << "test bug: the scales must fit";
    bias.scales_offset = first.scales_offset;
    return BadFile{m.build(),
                   tensor_problem(kBias, "row scales [" + std::to_string(first.scales_offset) +
                                         ", +64) overlaps tensor '" + first.name +
                                         "' row scales [" + std::to_string(first.scales_offset) +
                                         ", +64)")};
  });
  add("table_not_sorted", [] {
    HandMadeModel m = hand_made_f32();
    std::swap(m.tensors[0], m.tensors[1]);
    return BadFile{m.build(), tensor_problem(m.tensors[1].name, "tensor table is not sorted by "
                                                                "name or has a duplicate")};
  });
  add("duplicate_tensor", [] {
    HandMadeModel m = hand_made_f32();
    m.tensors[1] = m.tensors[0];
    return BadFile{m.build(), tensor_problem(m.tensors[0].name, "tensor table is not sorted by "
                                                                "name or has a duplicate")};
  });

  // ---- The table against the config ----
  add("missing_tensor", [] {
    HandMadeModel m = hand_made_f32();
    auto& ts = m.tensors;
    const std::string beta = param::decoder_layer(0) + schema::kFfnNorm.name + schema::kBeta;
    ts.erase(std::find_if(ts.begin(), ts.end(), [&](const TensorEntry& t) { return t.name == beta; }));
    return BadFile{m.build(), "missing tensor '" + beta + "'"};
  });
  add("shape_disagrees_with_config", [] {
    // Transposed: same size, so only the comparison with the config can catch it.
    HandMadeModel m = hand_made_f32();
    const std::string qkv = param::encoder_layer(0) + schema::kSelfAttentionQkv.name + schema::kWeight;
    m.tensor(qkv).shape = {8, 24};
    return BadFile{m.build(), "tensor '" + qkv + "' has shape [8,24], the config needs [24,8]"};
  });
  add("config_disagrees_with_shapes", [] {
    HandMadeModel m = hand_made_f32();
    m.config.d_ff = 32;
    return BadFile{m.build(), "tensor '" + param::encoder_layer(0) + schema::kFfnInner.name +
                                  schema::kWeight + "' has shape [16,8], the config needs [32,8]"};
  });
  add("config_needs_more_layers", [] {
    HandMadeModel m = hand_made_f32();
    m.config.encoder_layers = 2;
    return BadFile{m.build(), "missing tensor '" + param::encoder_layer(1) +
                                  schema::kSelfAttentionQkv.name + schema::kWeight + "'"};
  });
  add("config_untied_without_output_weight", [] {
    HandMadeModel m = hand_made_f32();
    m.config.tied_output = false;
    return BadFile{m.build(), "missing tensor '" + std::string(schema::kOutputWeight) + "'"};
  });
  add("unexpected_extra_tensor", [] {
    // A well-formed extra entry with its own aligned bytes at the end of the blob.
    HandMadeModel m = hand_made_f32();
    TensorEntry extra{"zz.extra", static_cast<int8_t>(DType::f32), {4}, m.blob_size, 16, 0};
    m.blob.resize(m.blob.size() + 256, 0);
    m.blob_size = m.blob.size();
    m.tensors.push_back(extra);
    return BadFile{m.build(), "unexpected tensor 'zz.extra'"};
  });
  add("output_bias_not_in_config", [] {
    HandMadeModel m = hand_made_f32();
    TensorEntry bias{schema::kOutputBias, static_cast<int8_t>(DType::f32), {12}, m.blob_size, 48, 0};
    m.blob.resize(m.blob.size() + 256, 0);
    m.blob_size = m.blob.size();
    m.tensors.insert(std::find_if(m.tensors.begin(), m.tensors.end(),
                                  [](const TensorEntry& t) { return t.name > schema::kOutputBias; }),
                     bias);
    return BadFile{m.build(), "unexpected tensor '" + std::string(schema::kOutputBias) + "'"};
  });

  // ---- Vocabulary lists (format version 2) ----
  add("source_vocabulary_too_short", [] {
    HandMadeModel m = hand_made_f32();
    m.source_vocabulary = {"<pad>", "<unk>", "<s>"};
    return BadFile{m.build(), "source vocabulary has 3 pieces, the config needs " +
                                  std::to_string(m.config.source_vocab_size)};
  });
  add("target_vocabulary_without_source", [] {
    HandMadeModel m = hand_made_f32();
    m.target_vocabulary.assign(m.config.target_vocab_size, "piece");
    return BadFile{m.build(), "target vocabulary without a source vocabulary"};
  });
  return cases;
}

class FormatBadFile : public ::testing::TestWithParam<BadFileCase> {};

TEST_P(FormatBadFile, RefusedWithExactMessage) {
  const BadFile bad = GetParam().make();
  TempDir dir;
  const std::string path = dir.file(GetParam().name + ".xfm");
  write_bytes(path, bad.bytes);
  const std::string message = open_error(path);
  EXPECT_EQ(message, path + ": " + bad.problem);
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(memory_error(bad.bytes, "in-memory"), "in-memory: " + bad.problem);
}

INSTANTIATE_TEST_SUITE_P(FormatTable, FormatBadFile, ::testing::ValuesIn(bad_file_cases()),
                         [](const auto& info) { return info.param.name; });

// The hand-made builder reproduces a valid file's contents, so a bad case above differs from a
// valid file only by the field it changes.
TEST(FormatBadFileBuilder, UnchangedHandMadeModelIsValid) {
  for (const auto* original : {&valid_f32(), &valid_int8()}) {
    const std::vector<uint8_t> rebuilt = HandMadeModel::describe(*original).build();
    ASSERT_EQ(memory_error(rebuilt, "rebuilt"), "");
    const auto a = ModelFile::from_memory(original->data(), original->size(), "original");
    const auto b = ModelFile::from_memory(rebuilt.data(), rebuilt.size(), "rebuilt");
    EXPECT_EQ(a->file_size() - a->blob_offset(), b->file_size() - b->blob_offset());
    EXPECT_EQ(a->source_tokenizer(), b->source_tokenizer());
    EXPECT_EQ(a->metadata(), b->metadata());
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
      const TensorView &x = a->tensors()[i], &y = b->tensors()[i];
      EXPECT_EQ(x.name, y.name);
      EXPECT_EQ(x.dtype, y.dtype);
      EXPECT_EQ(x.shape, y.shape);
      ASSERT_EQ(x.bytes, y.bytes);
      EXPECT_EQ(std::memcmp(x.data, y.data, x.bytes), 0);
      EXPECT_EQ(x.row_scales == nullptr, y.row_scales == nullptr);
      if (x.row_scales) {
        EXPECT_EQ(std::memcmp(x.row_scales, y.row_scales, x.rows() * 4), 0);
      }
    }
  }
}

// Every prefix of a small model: through the header, the padding and the blob. In memory (an
// exact-size copy each, so AddressSanitizer sees any over-read); through real files at a
// sample of lengths, boundaries included.
std::string truncated_problem(size_t length, size_t full_size, uint32_t header_size) {
  const uint64_t header_end = kPreambleSize + header_size;
  const uint64_t blob_offset = align_up(header_end, kBlobAlignment);
  if (length == 0) return "empty file, not a model";
  if (length < kPreambleSize + 8) {
    return "truncated: " + std::to_string(length) + " bytes is too short for a model header";
  }
  if (length < header_end) {
    return "truncated: the header needs " + std::to_string(header_end) + " bytes, the file has " +
           std::to_string(length);
  }
  return "truncated: the weights need " + std::to_string(blob_offset) + " + " +
         std::to_string(full_size - blob_offset) + " bytes, the file has " +
         std::to_string(length);
}

TEST(FormatBadFileTruncated, EveryPrefixInMemory) {
  for (const auto* file : {&valid_f32(), &valid_int8()}) {
    const uint32_t header_size = header_size_of(*file);
    for (size_t length = 0; length < file->size(); ++length) {
      ASSERT_EQ(memory_error(file->data(), length, "m"),
                "m: " + truncated_problem(length, file->size(), header_size))
          << "prefix of " << length << " bytes";
    }
    ASSERT_EQ(memory_error(*file, "m"), "");
  }
}

TEST(FormatBadFileTruncated, SampledPrefixesAsFiles) {
  const std::vector<uint8_t>& file = valid_f32();
  const uint32_t header_size = header_size_of(file);
  const size_t header_end = kPreambleSize + header_size;
  std::vector<size_t> lengths = {0, 1, 15, 16, header_end - 1, header_end,
                                 static_cast<size_t>(blob_offset_of(file)), file.size() - 1};
  for (size_t length = 0; length < file.size(); length += 97) lengths.push_back(length);
  TempDir dir;
  for (size_t length : lengths) {
    const std::string path = dir.file("prefix_" + std::to_string(length) + ".xfm");
    write_bytes(path, std::vector<uint8_t>(file.begin(), file.begin() + length));
    EXPECT_EQ(open_error(path), path + ": " + truncated_problem(length, file.size(), header_size));
  }
}

// ---- Paths that are not model files at all ----

TEST(FormatBadFilePath, Directory) {
  TempDir dir;
  EXPECT_EQ(open_error(dir.path()), dir.path() + ": is a directory, not a model file");
}

TEST(FormatBadFilePath, Missing) {
  TempDir dir;
  EXPECT_EQ(open_error(dir.file("absent.xfm")),
            dir.file("absent.xfm") + ": cannot open: No such file or directory");
}

TEST(FormatBadFilePath, FifoIsRefusedWithoutBlocking) {
  // Opening a FIFO for reading blocks until a writer appears, unless the reader asks not to.
  TempDir dir;
  const std::string path = dir.file("pipe.xfm");
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  auto message = std::async(std::launch::async, [&] { return open_error(path); });
  if (message.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "ModelFile::open blocked on a FIFO";
    // Release the blocked reader so the test ends instead of hanging.
    const int writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  EXPECT_EQ(message.get(), path + ": not a regular file");
}

TEST(FormatBadFilePath, CharacterDevice) {
  EXPECT_EQ(open_error("/dev/null"), "/dev/null: not a regular file");
}

// A header larger than FlatBuffers can verify (below 2^31 - 1 bytes) must be refused before the
// checksum pass and the verifier see it (the verifier asserts on such sizes). Only the first
// page of the 2 GiB region is readable (PROT_NONE reserves no memory), so a reader that touched
// the header bytes would crash the test.
TEST(FormatBadFileHeader, HeaderLargerThanFlatBuffersAllows) {
  const size_t header_size = size_t{1} << 31;
  const size_t size = kPreambleSize + header_size + 4096;
  void* mapping = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  ASSERT_EQ(::mprotect(mapping, 4096, PROT_READ | PROT_WRITE), 0);
  auto* bytes = static_cast<uint8_t*>(mapping);
  const uint32_t size32 = static_cast<uint32_t>(header_size);
  std::memcpy(bytes, &size32, 4);
  std::memcpy(bytes + 12, "XFM1", 4);
  std::string message;
  try {
    ModelFile::from_memory(bytes, size, "huge");
  } catch (const Error& e) {
    message = e.what();
  }
  ::munmap(mapping, size);
  EXPECT_EQ(message, "huge: header of 2147483648 bytes exceeds the FlatBuffers limit of "
                     "2147483646 bytes");
}

}  // namespace
}  // namespace xf::test
