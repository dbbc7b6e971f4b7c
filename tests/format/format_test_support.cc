#include "format_test_support.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>

#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/parameters.h"
#include "config_fb.h"
#include "xf_model_generated.h"

namespace xf::test {

namespace {

// Random bits with the exponent field kept below all-ones, so every value is finite.
uint32_t random_finite_bits(std::mt19937& rng, int exponent_shift, uint32_t exponent_mask) {
  for (;;) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    if (((bits >> exponent_shift) & exponent_mask) != exponent_mask) return bits;
  }
}

}  // namespace

std::map<std::string, TensorBytes> random_parameters(const ModelConfig& config, DType dtype,
                                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, TensorBytes> out;
  for (const ParameterSpec& spec : transformer_parameters(config)) {
    TensorBytes t;
    t.dtype = dtype;
    t.shape = spec.shape;
    const uint64_t elements = spec.elements();
    t.data.resize(elements * dtype_size(dtype));
    for (uint64_t i = 0; i < elements; ++i) {
      switch (dtype) {
        case DType::f32: {
          const uint32_t bits = random_finite_bits(rng, 23, 0xff);
          std::memcpy(&t.data[i * 4], &bits, 4);
          break;
        }
        case DType::f16:
        case DType::bf16: {
          const uint16_t bits = static_cast<uint16_t>(
              dtype == DType::f16 ? random_finite_bits(rng, 10, 0x1f)
                                  : random_finite_bits(rng, 7, 0xff));
          std::memcpy(&t.data[i * 2], &bits, 2);
          break;
        }
        case DType::int8:
          t.data[i] = static_cast<uint8_t>(rng());
          break;
      }
    }
    if (dtype == DType::int8) {
      std::uniform_real_distribution<float> scale(1e-4f, 1.0f);
      t.scales.resize(spec.shape[0]);
      for (float& s : t.scales) s = scale(rng);
    }
    out.emplace(spec.name, std::move(t));
  }
  return out;
}

void add_parameters(ModelWriter& writer, const std::map<std::string, TensorBytes>& parameters) {
  for (const auto& [name, t] : parameters) {
    writer.add_tensor(name, t.dtype, t.shape, t.data.data(), t.data.size(),
                      t.scales.empty() ? nullptr : t.scales.data());
  }
}

std::vector<uint8_t> valid_model_bytes(const ModelConfig& config, DType dtype, uint32_t seed) {
  ModelWriter writer(config);
  writer.set_source_tokenizer("sentencepiece model bytes " + std::to_string(seed));
  writer.set_metadata("source_language", "en");
  writer.set_metadata("target_language", "fr");
  add_parameters(writer, random_parameters(config, dtype, seed));
  return writer.serialize();
}

HandMadeModel HandMadeModel::describe(const std::vector<uint8_t>& file_bytes) {
  const auto file = ModelFile::from_memory(file_bytes.data(), file_bytes.size(), "describe");
  const uint8_t* blob = file_bytes.data() + file->blob_offset();
  HandMadeModel m;
  m.format_version = file->format_version();
  m.config = file->config();
  m.source_tokenizer = std::string(file->source_tokenizer());
  if (file->target_tokenizer().data() != file->source_tokenizer().data()) {
    m.target_tokenizer = std::string(file->target_tokenizer());
  }
  m.metadata = file->metadata();
  m.source_vocabulary.assign(file->source_vocabulary().begin(), file->source_vocabulary().end());
  if (file->target_vocabulary().data() != file->source_vocabulary().data())
    m.target_vocabulary.assign(file->target_vocabulary().begin(), file->target_vocabulary().end());
  for (const TensorView& v : file->tensors()) {
    TensorEntry e;
    e.name = std::string(v.name);
    e.dtype = static_cast<int8_t>(v.dtype);
    e.shape.assign(v.shape.begin(), v.shape.begin() + v.rank);
    e.offset = static_cast<const uint8_t*>(v.data) - blob;
    e.size = v.bytes;
    if (v.row_scales) e.scales_offset = reinterpret_cast<const uint8_t*>(v.row_scales) - blob;
    e.layout = static_cast<int8_t>(v.layout);
    m.tensors.push_back(std::move(e));
  }
  m.blob.assign(blob, file_bytes.data() + file_bytes.size());
  m.blob_size = m.blob.size();
  return m;
}

std::vector<uint8_t> HandMadeModel::build() const {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Tensor>> tensor_offsets;
  for (const TensorEntry& t : tensors) {
    const auto name = fbb.CreateString(t.name);
    const auto shape = fbb.CreateVector(t.shape);
    tensor_offsets.push_back(fb::CreateTensor(fbb, name, static_cast<fb::DType>(t.dtype), shape,
                                              t.offset, t.size, t.scales_offset,
                                              static_cast<fb::WeightLayout>(t.layout)));
  }
  std::vector<flatbuffers::Offset<fb::KeyValue>> metadata_offsets;
  for (const auto& [key, value] : metadata) {
    const auto k = fbb.CreateString(key);
    const auto v = fbb.CreateString(value);
    metadata_offsets.push_back(fb::CreateKeyValue(fbb, k, v));
  }
  const auto fb_config = create_fb_config(fbb, config);
  auto bytes_vector = [&](const std::string& s) {
    return s.empty() ? 0 : fbb.CreateVector(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const auto source = bytes_vector(source_tokenizer);
  const auto target = bytes_vector(target_tokenizer);
  const auto meta = fbb.CreateVector(metadata_offsets);
  const auto table = fbb.CreateVector(tensor_offsets);
  auto strings = [&](const std::vector<std::string>& pieces) {
    return pieces.empty() ? 0 : fbb.CreateVectorOfStrings(pieces);
  };
  const auto source_pieces = strings(source_vocabulary);
  const auto target_pieces = strings(target_vocabulary);
  fbb.Finish(fb::CreateModel(fbb, format_version, fb_config, source, target, meta, table,
                             blob_size, source_pieces, target_pieces),
             fb::ModelIdentifier());
  return assemble_model_file(fbb.GetBufferPointer(), fbb.GetSize(), blob.data(), blob.size());
}

TensorEntry& HandMadeModel::tensor(const std::string& name) {
  for (TensorEntry& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("test bug: no tensor '" + name + "' in the hand-made model");
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string open_error(const std::string& path) {
  try {
    ModelFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string memory_error(const uint8_t* bytes, size_t size, const std::string& label) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[std::max<size_t>(size, 1)]);
  std::copy(bytes, bytes + size, exact.get());
  try {
    ModelFile::from_memory(exact.get(), size, label);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string memory_error(const std::vector<uint8_t>& bytes, const std::string& label) {
  return memory_error(bytes.data(), bytes.size(), label);
}

}  // namespace xf::test
