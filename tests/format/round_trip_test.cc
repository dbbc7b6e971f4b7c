// ModelWriter -> file -> ModelFile::open must give back every byte: config, metadata,
// tokenizers and each tensor in each dtype, with every data pointer aligned to 256.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "format_test_support.h"
#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"
#include "xf/format/model_writer.h"
#include "xf/format/parameters.h"

namespace xf::test {
namespace {

// The config variants the parameter list distinguishes.
struct Variant {
  const char* name;
  bool shared_embeddings, tied_output, output_bias;
  NormPosition norm;
};
const Variant kVariants[] = {
    {"shared_tied_post", true, true, false, NormPosition::post},
    {"separate_untied_pre_bias", false, false, true, NormPosition::pre},
    {"separate_tied_post_bias", false, true, true, NormPosition::post},
    {"shared_untied_pre", true, false, false, NormPosition::pre},
};

ModelConfig variant_config(const Variant& v) {
  ModelConfig c = tiny_config();
  c.shared_embeddings = v.shared_embeddings;
  c.tied_output = v.tied_output;
  c.output_bias = v.output_bias;
  c.norm_position = v.norm;
  if (!v.shared_embeddings) c.target_vocab_size = 10;  // unequal sizes catch swapped shapes
  c.layer_norm_epsilon = 1e-5f;
  c.max_positions = 40;
  c.pad_id = 1;
  c.unk_id = 0;
  c.bos_id = 3;
  c.eos_id = 2;
  return c;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(config_to_text(a), config_to_text(b));  // every field, epsilon exactly
}

// Every tensor of `file` equals `expected` byte for byte and lies aligned inside the mapping.
void expect_tensors(const ModelFile& file, const std::map<std::string, TensorBytes>& expected) {
  ASSERT_EQ(file.tensors().size(), expected.size());
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    const TensorView* got = file.find(name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->name, name);
    EXPECT_EQ(got->dtype, want.dtype);
    ASSERT_EQ(got->rank, want.shape.size());
    for (size_t i = 0; i < want.shape.size(); ++i) EXPECT_EQ(got->shape[i], want.shape[i]);
    ASSERT_EQ(got->bytes, want.data.size());
    EXPECT_EQ(std::memcmp(got->data, want.data.data(), want.data.size()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->data) % kBlobAlignment, 0u);
    if (want.dtype == DType::int8) {
      ASSERT_NE(got->row_scales, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got->row_scales) % kBlobAlignment, 0u);
      EXPECT_EQ(std::memcmp(got->row_scales, want.scales.data(), want.scales.size() * 4), 0);
    } else {
      EXPECT_EQ(got->row_scales, nullptr);
    }
  }
}

class FormatRoundTrip : public ::testing::TestWithParam<std::tuple<DType, Variant>> {};

TEST_P(FormatRoundTrip, BitExactThroughAFile) {
  const auto [dtype, variant] = GetParam();
  const ModelConfig config = variant_config(variant);
  const auto parameters = random_parameters(config, dtype, /*seed=*/17);
  // Bytes that are not valid UTF-8 and contain zeros: tokenizers are opaque bytes.
  const std::string source_tokenizer("\x00\xff source spm \x01", 16);
  const std::string target_tokenizer("target spm \x80\x00", 13);

  ModelWriter writer(config);
  writer.set_source_tokenizer(source_tokenizer);
  writer.set_target_tokenizer(target_tokenizer);
  writer.set_metadata("target_language", "fr");
  writer.set_metadata("bleu", "41.8");
  writer.set_metadata("source_language", "en");
  add_parameters(writer, parameters);
  TempDir dir;
  writer.write(dir.file("model.xfm"));

  const auto file = ModelFile::open(dir.file("model.xfm"));
  EXPECT_EQ(file->path(), dir.file("model.xfm"));
  // Nothing of version 2: written as version 1, which older readers take.
  EXPECT_EQ(file->format_version(), 1u);
  EXPECT_TRUE(file->source_vocabulary().empty());
  expect_same_config(file->config(), config);
  EXPECT_EQ(file->source_tokenizer(), source_tokenizer);
  EXPECT_EQ(file->target_tokenizer(), target_tokenizer);
  const std::vector<std::pair<std::string, std::string>> sorted_metadata = {
      {"bleu", "41.8"}, {"source_language", "en"}, {"target_language", "fr"}};
  EXPECT_EQ(file->metadata(), sorted_metadata);
  EXPECT_EQ(file->metadata_value("bleu"), "41.8");
  EXPECT_EQ(file->metadata_value("absent", "fallback"), "fallback");
  EXPECT_EQ(file->blob_offset() % kBlobAlignment, 0u);
  expect_tensors(*file, parameters);

  // The table is exactly the parameter list, in name order.
  std::vector<std::string> names;
  for (const ParameterSpec& spec : transformer_parameters(config)) names.push_back(spec.name);
  std::sort(names.begin(), names.end());
  ASSERT_EQ(file->tensors().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(file->tensors()[i].name, names[i]);

  // serialize() is what write() puts on disk.
  EXPECT_EQ(read_bytes(dir.file("model.xfm")), writer.serialize());

  // A copy of the bytes, held in memory, reads the same, aligned, and outlives the bytes.
  std::vector<uint8_t> bytes = writer.serialize();
  bytes.insert(bytes.begin(), 8, 0);  // misaligned as a heap buffer may be
  const auto copy = ModelFile::copy_from_memory(bytes.data() + 8, bytes.size() - 8, "in memory");
  std::fill(bytes.begin(), bytes.end(), 0xff);
  EXPECT_EQ(copy->path(), "in memory");
  expect_same_config(copy->config(), config);
  EXPECT_EQ(copy->source_tokenizer(), source_tokenizer);
  expect_tensors(*copy, parameters);
}

INSTANTIATE_TEST_SUITE_P(
    FormatDTypes, FormatRoundTrip,
    ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16, DType::int8),
                       ::testing::ValuesIn(kVariants)),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" +
             std::get<1>(info.param).name;
    });

TEST(FormatRoundTripTokenizer, SharedAndAbsentTokenizers) {
  const ModelConfig config = tiny_config();
  const auto parameters = random_parameters(config, DType::f32, 3);
  TempDir dir;
  {
    ModelWriter writer(config);
    writer.set_source_tokenizer("one model for both sides");
    add_parameters(writer, parameters);
    writer.write(dir.file("shared.xfm"));
  }
  {
    ModelWriter writer(config);
    add_parameters(writer, parameters);
    writer.write(dir.file("none.xfm"));
  }
  const auto shared = ModelFile::open(dir.file("shared.xfm"));
  EXPECT_EQ(shared->source_tokenizer(), "one model for both sides");
  EXPECT_EQ(shared->target_tokenizer(), "one model for both sides");
  const auto none = ModelFile::open(dir.file("none.xfm"));
  EXPECT_TRUE(none->source_tokenizer().empty());
  EXPECT_TRUE(none->target_tokenizer().empty());
  EXPECT_TRUE(none->metadata().empty());
  expect_tensors(*none, parameters);

  EXPECT_EQ(none->find("no.such.tensor"), nullptr);
  try {
    none->tensor("no.such.tensor");
    ADD_FAILURE() << "tensor() found a tensor that is not there";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("none.xfm") + ": no tensor 'no.such.tensor'");
  }
}

// A model that needs format version 2 (an imported Marian model): its config fields and its
// vocabulary lists round trip, and the file says version 2 so that version 1 readers refuse it.
TEST(FormatRoundTripVersion2, FieldsAndVocabulariesRoundTrip) {
  ModelConfig config = tiny_config();
  config.shared_embeddings = false;
  config.target_vocab_size = config.source_vocab_size + 2;
  config.activation = Activation::swish;
  config.scale_embeddings = false;
  config.position_encoding = PositionEncoding::sin_then_cos;
  config.zero_start_embedding = true;
  std::vector<std::string> source, target;
  for (uint32_t i = 0; i < config.source_vocab_size; ++i) source.push_back("s" + std::to_string(i));
  for (uint32_t i = 0; i < config.target_vocab_size; ++i) target.push_back("\xe2\x96\x81t" + std::to_string(i));
  const auto parameters = random_parameters(config, DType::f32, 4);
  TempDir dir;
  ModelWriter writer(config);
  writer.set_source_vocabulary(source);
  writer.set_target_vocabulary(target);
  add_parameters(writer, parameters);
  EXPECT_EQ(writer.format_version(), 2u);
  writer.write(dir.file("v2.xfm"));
  const auto file = ModelFile::open(dir.file("v2.xfm"));
  EXPECT_EQ(file->format_version(), 2u);
  expect_same_config(file->config(), config);
  EXPECT_EQ(std::vector<std::string>(file->source_vocabulary().begin(), file->source_vocabulary().end()),
            source);
  EXPECT_EQ(std::vector<std::string>(file->target_vocabulary().begin(), file->target_vocabulary().end()),
            target);
  expect_tensors(*file, parameters);

  // One list serves both sides when the vocabularies are equal; any version 2 field alone
  // makes a version 2 file.
  ModelConfig shared = tiny_config();
  std::vector<std::string> pieces(source.begin(), source.end());
  ModelWriter shared_writer(shared);
  shared_writer.set_source_vocabulary(pieces);
  add_parameters(shared_writer, random_parameters(shared, DType::f32, 5));
  shared_writer.write(dir.file("shared.xfm"));
  const auto shared_file = ModelFile::open(dir.file("shared.xfm"));
  EXPECT_EQ(shared_file->format_version(), 2u);
  EXPECT_EQ(shared_file->target_vocabulary().size(), pieces.size());
  EXPECT_EQ(shared_file->target_vocabulary()[5], "s5");
  shared.activation = Activation::gelu;
  EXPECT_EQ(ModelWriter(shared).format_version(), 2u);

  // A list that does not name every id is refused by the writer.
  ModelWriter short_writer(tiny_config());
  short_writer.set_source_vocabulary({"a", "b"});
  add_parameters(short_writer, random_parameters(tiny_config(), DType::f32, 6));
  try {
    short_writer.serialize();
    ADD_FAILURE() << "a short vocabulary was written";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "source vocabulary has 2 pieces, the config needs " +
                                         std::to_string(tiny_config().source_vocab_size));
  }
}

// add_tensor_f32 stores what the conversion functions produce (tested on their own in
// dtype_convert_test.cc).
TEST(FormatRoundTripConvert, AddTensorF32ConvertsEachDType) {
  const ModelConfig config = tiny_config();
  const auto f32_parameters = random_parameters(config, DType::f32, 5);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::int8}) {
    SCOPED_TRACE(dtype_name(dtype));
    ModelWriter writer(config);
    std::map<std::string, TensorBytes> expected;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (const auto& [name, t] : f32_parameters) {
      const size_t n = t.data.size() / 4;
      std::vector<float> values(n);
      for (float& v : values) v = normal(rng);
      writer.add_tensor_f32(name, dtype, t.shape, values.data());
      TensorBytes want{dtype, t.shape, std::vector<uint8_t>(n * dtype_size(dtype)), {}};
      if (dtype == DType::f32) {
        std::memcpy(want.data.data(), values.data(), n * 4);
      } else if (dtype == DType::int8) {
        want.scales.resize(t.shape[0]);
        quantize_rows_int8(values.data(), t.shape[0], n / t.shape[0],
                           reinterpret_cast<int8_t*>(want.data.data()), want.scales.data());
      } else {
        for (size_t i = 0; i < n; ++i) {
          const uint16_t bits = dtype == DType::f16 ? float_to_half(values[i])
                                                    : float_to_bfloat16(values[i]);
          std::memcpy(&want.data[i * 2], &bits, 2);
        }
      }
      expected.emplace(name, std::move(want));
    }
    TempDir dir;
    writer.write(dir.file("model.xfm"));
    expect_tensors(*ModelFile::open(dir.file("model.xfm")), expected);
  }
}

// The header checksum: CRC-32's check value, and random bytes of every length up to 70 and
// one of 100,001 (every tail after the 8-byte steps) against the bit-by-bit definition.
TEST(HeaderChecksum, Crc32IsTheBitwiseDefinition) {
  auto bitwise = [](const uint8_t* bytes, size_t size) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; ++i) {
      crc ^= bytes[i];
      for (int k = 0; k < 8; ++k) crc = (crc & 1u) ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    return crc ^ 0xffffffffu;
  };
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  std::mt19937 rng(3);
  std::vector<uint8_t> bytes(100001);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t size = 0; size <= 70; ++size)
    ASSERT_EQ(crc32(bytes.data() + 1, size), bitwise(bytes.data() + 1, size)) << size << " bytes";
  EXPECT_EQ(crc32(bytes.data(), bytes.size()), bitwise(bytes.data(), bytes.size()));
}

// to_seven_bits over every int8 value: half the value rounded half away from zero (std::lround),
// clamped to +-63.
TEST(SevenBits, HalvesEveryInt8RoundingAwayFromZeroWithin63) {
  for (int v = -128; v <= 127; ++v) {
    const long expected = std::clamp(std::lround(v / 2.0), -63L, 63L);
    ASSERT_EQ(to_seven_bits(static_cast<int8_t>(v)), expected) << "value " << v;
  }
}

// The writer refuses what the reader would refuse, naming the tensor.
// Version 4: every matrix in each layout (xf/weight_layout.h). The stored bytes are the layout's
// (pack_panels of the rows, padding zero); copy_rows() and widen_to_f32() give the rows back
// (7-bit layouts: to_seven_bits() of each value, the row scales doubled), so a reader gets the
// same matrix whatever the layout; vectors stay rows; a file all in rows keeps its lower version.
// Rows of 24 and 18 columns (d_ff 18): panels padded in both directions.
TEST(FormatRoundTripVersion4, EachLayoutStoresThePanelsAndReadsBackTheRows) {
  ModelConfig config = tiny_config();
  config.d_ff = 18;
  TempDir dir;
  const std::vector<std::pair<DType, WeightLayout>> cases = {
      {DType::int8, WeightLayout::panels},         {DType::int8, WeightLayout::seven_bit_rows},
      {DType::int8, WeightLayout::seven_bit_panels}, {DType::f32, WeightLayout::panels},
      {DType::int8, WeightLayout::rows}};
  for (const auto& [dtype, layout] : cases) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + weight_layout_name(layout));
    const auto parameters = random_parameters(config, dtype, 9);
    ModelWriter writer(config);
    add_parameters(writer, parameters);
    for (const auto& [name, t] : parameters)
      if (t.shape.size() == 2) writer.set_layout(name, layout);
    const std::string path = dir.file(std::string("layout_") + std::to_string(static_cast<int>(layout)) + ".xfm");
    writer.write(path);
    const auto file = ModelFile::open(path);
    EXPECT_EQ(file->format_version(), layout == WeightLayout::rows ? 1u : 4u);
    for (const TensorView& t : file->tensors()) {
      const TensorBytes& expected = parameters.at(std::string(t.name));
      SCOPED_TRACE(std::string(t.name));
      const bool matrix = expected.shape.size() == 2;
      ASSERT_EQ(t.layout, matrix ? layout : WeightLayout::rows);
      const uint64_t rows = t.rows(), cols = t.cols();
      EXPECT_EQ(t.bytes, layout_bytes(t.dtype, t.layout, rows, cols));
      // The expected row-major values and scales of the layout.
      std::vector<uint8_t> values = expected.data;
      std::vector<float> scales = expected.scales;
      if (in_seven_bits(t.layout)) {
        for (uint8_t& v : values) v = static_cast<uint8_t>(to_seven_bits(static_cast<int8_t>(v)));
        for (float& scale : scales) scale *= 2.0f;
      }
      std::vector<uint8_t> read(values.size());
      copy_rows(t, read.data());
      EXPECT_EQ(read, values);
      if (t.dtype == DType::int8) {
        EXPECT_EQ(std::vector<float>(t.row_scales, t.row_scales + rows), scales);
      }
      if (in_panels(t.layout)) {  // the stored bytes: the panels of those rows
        std::vector<uint8_t> panels(t.bytes);
        pack_panels(t.dtype, values.data(), static_cast<int64_t>(rows), static_cast<int64_t>(cols), panels.data());
        EXPECT_EQ(std::memcmp(panels.data(), t.data, t.bytes), 0);
      }
      // widen_to_f32 reads the rows whatever the layout.
      TensorView in_rows = t;
      in_rows.data = values.data();
      in_rows.layout = WeightLayout::rows;
      in_rows.row_scales = scales.empty() ? nullptr : scales.data();
      std::vector<float> widened(t.elements()), expected_widened(t.elements());
      widen_to_f32(t, widened.data());
      widen_to_f32(in_rows, expected_widened.data());
      EXPECT_EQ(widened, expected_widened);
    }
  }
}

// The message of the xf::Error that `call` throws, or "no error".
template <typename Call>
std::string message(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(FormatWriter, RefusesLayoutsOutsideMatrices) {
  const ModelConfig config = tiny_config();
  ModelWriter writer(config);
  add_parameters(writer, random_parameters(config, DType::f32, 1));
  const std::string bias = param::decoder_layer(0) + schema::kFfnOuter.name + schema::kBias;
  const std::string weight = param::decoder_layer(0) + schema::kFfnOuter.name + schema::kWeight;
  EXPECT_EQ(message([&] { writer.set_layout(bias, WeightLayout::panels); }),
            "tensor '" + bias + "': layout panels is for rank-2 int8 and f32 matrices");
  EXPECT_EQ(message([&] { writer.set_layout(weight, WeightLayout::seven_bit_rows); }),
            "tensor '" + weight + "': layout 7-bit rows is for rank-2 int8 matrices");
  EXPECT_EQ(message([&] { writer.set_layout("none", WeightLayout::panels); }), "set_layout: no tensor 'none'");
  writer.set_layout(weight, WeightLayout::panels);
  EXPECT_EQ(message([&] { writer.set_layout(weight, WeightLayout::seven_bit_panels); }),
            "tensor '" + weight + "': laid out already");
  EXPECT_EQ(writer.format_version(), 4u);
}

TEST(FormatWriter, RefusesBadTensors) {
  const ModelConfig config = tiny_config();
  ModelWriter writer(config);
  const std::vector<float> values(8 * 8, 0.5f);
  const std::vector<float> scales(8, 1.0f);
  EXPECT_EQ(message([&] { writer.add_tensor("w", DType::f32, {8, 8}, values.data(), 100); }),
            "tensor 'w': 100 bytes given, shape [8,8] in f32 needs 256");
  EXPECT_EQ(message([&] { writer.add_tensor("w", DType::f32, {}, values.data(), 4); }),
            "tensor 'w': rank 0 outside [1, 4]");
  EXPECT_EQ(message([&] { writer.add_tensor("w", DType::f32, {1, 1, 1, 1, 4}, values.data(), 16); }),
            "tensor 'w': rank 5 outside [1, 4]");
  EXPECT_EQ(message([&] { writer.add_tensor("w", DType::int8, {8, 8}, values.data(), 64); }),
            "tensor 'w': row scales are required for int8 and only for int8");
  EXPECT_EQ(message([&] {
              writer.add_tensor("w", DType::f32, {8, 8}, values.data(), 256, scales.data());
            }),
            "tensor 'w': row scales are required for int8 and only for int8");

  // Table-level checks happen when the file is laid out.
  add_parameters(writer, random_parameters(config, DType::f32, 1));
  writer.serialize();  // the refused calls above added nothing
  writer.add_tensor("extra.weight", DType::f32, {8, 8}, values.data(), 256);
  EXPECT_EQ(message([&] { writer.serialize(); }), "unexpected tensor 'extra.weight'");
  ModelWriter missing(config);
  auto parameters = random_parameters(config, DType::f32, 1);
  const std::string outer_bias = param::decoder_layer(0) + schema::kFfnOuter.name + schema::kBias;
  parameters.erase(outer_bias);
  add_parameters(missing, parameters);
  EXPECT_EQ(message([&] { missing.serialize(); }),
            "missing tensor '" + outer_bias + "'");
  missing.add_tensor(outer_bias, DType::f32, {4, 2}, values.data(), 32);
  EXPECT_EQ(message([&] { missing.serialize(); }),
            "tensor '" + outer_bias + "' has shape [4,2], the config needs [8]");

  ModelConfig bad = config;
  bad.num_heads = 3;
  EXPECT_EQ(message([&] { ModelWriter w(bad); }),
            "invalid model config: num_heads 3 does not divide d_model 8");
}

}  // namespace
}  // namespace xf::test
