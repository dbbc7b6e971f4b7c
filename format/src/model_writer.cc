#include "xf/format/model_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "xf/format/file_layout.h"
#include "xf/format/model_file.h"
#include "xf/format/parameters.h"
#include "config_fb.h"
#include "xf_model_generated.h"

namespace xf {

namespace {

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;
  return n;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

// CRC-32 (IEEE 802.3, zlib's) by slicing-by-8: eight bytes a step through eight tables, about
// eight times the byte-at-a-time loop; a model's header (its vocabularies and shortlist: 1.9 MB for
// the bundled student) is checked at every load, which took 3.5 ms of a 30 ms start byte by byte.
// Written here rather than taken from zlib: the aarch64 test build has no arm64 zlib.
uint32_t crc32(const void* data, size_t size) {
  static const auto tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int slice = 1; slice < 8; ++slice) t[slice][i] = (t[slice - 1][i] >> 8) ^ t[0][t[slice - 1][i] & 0xffu];
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (; size >= 8; size -= 8, bytes += 8) {
    uint32_t low, high;  // little-endian words (xf reads its files on little-endian machines only)
    std::memcpy(&low, bytes, 4);
    std::memcpy(&high, bytes + 4, 4);
    low ^= crc;
    crc = tables[7][low & 0xffu] ^ tables[6][(low >> 8) & 0xffu] ^ tables[5][(low >> 16) & 0xffu] ^ tables[4][low >> 24] ^
          tables[3][high & 0xffu] ^ tables[2][(high >> 8) & 0xffu] ^ tables[1][(high >> 16) & 0xffu] ^
          tables[0][high >> 24];
  }
  for (; size > 0; --size, ++bytes) crc = tables[0][(crc ^ *bytes) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

std::vector<uint8_t> assemble_model_file(const uint8_t* header, size_t header_size,
                                         const uint8_t* blob, size_t blob_size) {
  const uint64_t blob_offset = align_up(kPreambleSize + header_size, kBlobAlignment);
  std::vector<uint8_t> file(blob_offset + blob_size, 0);
  const uint32_t size32 = static_cast<uint32_t>(header_size);
  const uint32_t checksum = crc32(header, header_size);
  std::memcpy(file.data(), &size32, 4);
  std::memcpy(file.data() + 4, &checksum, 4);
  if (header_size) std::memcpy(file.data() + kPreambleSize, header, header_size);
  if (blob_size) std::memcpy(file.data() + blob_offset, blob, blob_size);
  return file;
}

ModelWriter::ModelWriter(const ModelConfig& config)
    : config_(config) {
  validate_config(config_);
}

void ModelWriter::set_source_tokenizer(std::string model_proto) {
  source_tokenizer_ = std::move(model_proto);
}
void ModelWriter::set_target_tokenizer(std::string model_proto) {
  target_tokenizer_ = std::move(model_proto);
}
void ModelWriter::set_source_vocabulary(std::vector<std::string> pieces) {
  source_vocabulary_ = std::move(pieces);
}
void ModelWriter::set_target_vocabulary(std::vector<std::string> pieces) {
  target_vocabulary_ = std::move(pieces);
}
void ModelWriter::set_shortlist(LexicalShortlist shortlist) { shortlist_ = std::move(shortlist); }
uint32_t ModelWriter::format_version() const {
  if (format_version_) return *format_version_;
  // The lowest version that holds the file: version 1 readers take a file without version 2's
  // fields (format/README.md, version rules).
  const uint32_t vocabularies = source_vocabulary_.empty() && target_vocabulary_.empty() ? 1 : 2;
  // Version 4: a tensor in a layout other than rows.
  const bool layouts = std::any_of(tensors_.begin(), tensors_.end(),
                                   [](const auto& entry) { return entry.second.layout != WeightLayout::rows; });
  return std::max({config_format_version(config_), vocabularies, layouts ? 4u : 1u});
}

void ModelWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void ModelWriter::add_tensor(const std::string& name, DType dtype,
                             const std::vector<uint64_t>& shape, const void* data, size_t bytes,
                             const float* row_scales, WeightLayout layout) {
  if (shape.empty() || shape.size() > kMaxTensorRank) {
    throw Error("tensor '" + name + "': rank " + std::to_string(shape.size()) +
                " outside [1, 4]");
  }
  if (layout != WeightLayout::rows && (shape.size() != 2 || !layout_holds(layout, dtype))) {
    throw Error("tensor '" + name + "': layout " + weight_layout_name(layout) + " is for rank-2 " +
                (layout == WeightLayout::panels ? "int8 and f32" : "int8") + " matrices");
  }
  const uint64_t expected = layout == WeightLayout::rows ? element_count(shape) * dtype_size(dtype)
                                                         : layout_bytes(dtype, layout, shape[0], shape[1]);
  if (bytes != expected) {
    throw Error("tensor '" + name + "': " + std::to_string(bytes) + " bytes given, shape " +
                shape_string(shape) + " in " + dtype_name(dtype) +
                (layout != WeightLayout::rows ? std::string(" ") + weight_layout_name(layout) : "") + " needs " +
                std::to_string(expected));
  }
  if ((dtype == DType::int8) != (row_scales != nullptr)) {
    throw Error("tensor '" + name + "': row scales are required for int8 and only for int8");
  }
  PendingTensor t{dtype, shape, {}, {}, layout};
  const auto* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + bytes);
  if (row_scales) t.scales.assign(row_scales, row_scales + shape[0]);
  tensors_[name] = std::move(t);
}

void ModelWriter::set_layout(const std::string& name, WeightLayout layout) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error("set_layout: no tensor '" + name + "'");
  PendingTensor& t = it->second;
  if (layout == t.layout) return;
  if (t.layout != WeightLayout::rows) throw Error("tensor '" + name + "': laid out already");
  if (t.shape.size() != 2 || !layout_holds(layout, t.dtype)) {
    throw Error("tensor '" + name + "': layout " + weight_layout_name(layout) + " is for rank-2 " +
                (layout == WeightLayout::panels ? "int8 and f32" : "int8") + " matrices");
  }
  if (in_seven_bits(layout)) {
    for (uint8_t& byte : t.data) byte = static_cast<uint8_t>(to_seven_bits(static_cast<int8_t>(byte)));
    for (float& scale : t.scales) scale *= 2.0f;
  }
  if (in_panels(layout)) {
    const auto n = static_cast<int64_t>(t.shape[0]), k = static_cast<int64_t>(t.shape[1]);
    std::vector<uint8_t> panels(layout_bytes(t.dtype, layout, t.shape[0], t.shape[1]));
    pack_panels(t.dtype, t.data.data(), n, k, panels.data());
    t.data = std::move(panels);
  }
  t.layout = layout;
}

void ModelWriter::add_tensor_f32(const std::string& name, DType dtype,
                                 const std::vector<uint64_t>& shape, const float* values) {
  const uint64_t n = element_count(shape);
  switch (dtype) {
    case DType::f32:
      add_tensor(name, dtype, shape, values, n * 4);
      return;
    case DType::f16:
    case DType::bf16: {
      std::vector<uint16_t> bits(n);
      for (uint64_t i = 0; i < n; ++i) {
        bits[i] = dtype == DType::f16 ? float_to_half(values[i]) : float_to_bfloat16(values[i]);
      }
      add_tensor(name, dtype, shape, bits.data(), n * 2);
      return;
    }
    case DType::int8: {
      if (shape.empty()) throw Error("tensor '" + name + "': int8 needs a rank of at least 1");
      const uint64_t rows = shape[0], cols = n / std::max<uint64_t>(rows, 1);
      std::vector<int8_t> q(n);
      std::vector<float> scales(rows);
      quantize_rows_int8(values, rows, cols, q.data(), scales.data());
      add_tensor(name, dtype, shape, q.data(), n, scales.data());
      return;
    }
  }
  throw Error("tensor '" + name + "': unknown dtype");
}

std::vector<uint8_t> ModelWriter::serialize() const {
  // The tensors must be exactly the parameters of this config, with the listed shapes.
  std::set<std::string> expected_names;
  for (const ParameterSpec& spec : transformer_parameters(config_)) {
    expected_names.insert(spec.name);
    auto it = tensors_.find(spec.name);
    if (it == tensors_.end()) throw Error("missing tensor '" + spec.name + "'");
    if (it->second.shape != spec.shape) {
      throw Error("tensor '" + spec.name + "' has shape " + shape_string(it->second.shape) +
                  ", the config needs " + shape_string(spec.shape));
    }
  }
  for (const auto& [name, tensor] : tensors_) {
    if (!expected_names.count(name)) throw Error("unexpected tensor '" + name + "'");
  }

  // Blob: each tensor's values, then (int8) its row scales, each at a 256-byte boundary.
  std::vector<uint8_t> blob;
  auto append = [&](const void* data, size_t size) {
    const uint64_t offset = align_up(blob.size(), kBlobAlignment);
    blob.resize(offset + size, 0);
    if (size) std::memcpy(blob.data() + offset, data, size);
    return offset;
  };

  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensor_offsets;
  for (const auto& [name, tensor] : tensors_) {
    const uint64_t offset = append(tensor.data.data(), tensor.data.size());
    const uint64_t scales_offset =
        tensor.scales.empty() ? 0 : append(tensor.scales.data(), tensor.scales.size() * 4);
    tensor_offsets.push_back(fb::CreateTensor(
        fbb, fbb.CreateString(name), static_cast<fb::DType>(tensor.dtype),
        fbb.CreateVector(tensor.shape), offset, tensor.data.size(), scales_offset,
        static_cast<fb::WeightLayout>(tensor.layout)));
  }
  blob.resize(align_up(blob.size(), kBlobAlignment), 0);

  std::vector<flatbuffers::Offset<fb::KeyValue>> metadata_offsets;
  for (const auto& [key, value] : metadata_) {
    metadata_offsets.push_back(
        fb::CreateKeyValue(fbb, fbb.CreateString(key), fbb.CreateString(value)));
  }
  const auto config = create_fb_config(fbb, config_);
  auto bytes_vector = [&](const std::string& s) {
    return s.empty() ? 0 : fbb.CreateVector(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const auto source_tokenizer = bytes_vector(source_tokenizer_);
  const auto target_tokenizer = bytes_vector(target_tokenizer_);
  // A vocabulary list must name every id of its side (the reader checks the same).
  auto check_vocabulary = [](const std::vector<std::string>& pieces, uint32_t size, const char* side) {
    if (!pieces.empty() && pieces.size() != size)
      throw Error(std::string(side) + " vocabulary has " + std::to_string(pieces.size()) +
                  " pieces, the config needs " + std::to_string(size));
  };
  check_vocabulary(source_vocabulary_, config_.source_vocab_size, "source");
  check_vocabulary(target_vocabulary_.empty() ? source_vocabulary_ : target_vocabulary_,
                   config_.target_vocab_size, "target");
  auto strings_vector = [&](const std::vector<std::string>& pieces) {
    return pieces.empty() ? 0 : fbb.CreateVectorOfStrings(pieces);
  };
  const auto source_vocabulary = strings_vector(source_vocabulary_);
  const auto target_vocabulary = strings_vector(target_vocabulary_);
  flatbuffers::Offset<fb::Shortlist> shortlist = 0;
  if (shortlist_) {
    try {
      check_shortlist(*shortlist_, config_.source_vocab_size, config_.target_vocab_size);
    } catch (const Error& e) {
      throw Error(std::string("invalid ") + e.what());
    }
    shortlist = fb::CreateShortlist(fbb, shortlist_->first_num, shortlist_->best_num,
                                    fbb.CreateVector(shortlist_->offsets), fbb.CreateVector(shortlist_->targets));
  }
  const auto model = fb::CreateModel(
      fbb, format_version(), config, source_tokenizer, target_tokenizer,
      fbb.CreateVectorOfSortedTables(&metadata_offsets),
      fbb.CreateVectorOfSortedTables(&tensor_offsets), blob.size(), source_vocabulary,
      target_vocabulary, shortlist);
  fbb.Finish(model, fb::ModelIdentifier());
  return assemble_model_file(fbb.GetBufferPointer(), fbb.GetSize(), blob.data(), blob.size());
}

void ModelWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  write_file_atomically(path, bytes.data(), bytes.size());
}

void write_all(int fd, const void* data, size_t size, const std::string& label) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, p + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    // A write of 0 bytes with no error cannot make progress: report it as a full device.
    if (n <= 0) throw Error(label + ": write failed: " + std::strerror(n < 0 ? errno : ENOSPC));
    written += static_cast<size_t>(n);
  }
}

namespace {

// A device or a FIFO: written in place (renaming over it would replace the node by a regular
// file), with every error reported.
void write_special_file(const std::string& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  try {
    write_all(fd, data, size, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw Error(path + ": write failed: " + std::strerror(errno));
}

}  // namespace

void write_file_atomically(const std::string& path, const void* data, size_t size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    write_special_file(path, data, size);
    return;
  }
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create: " + std::strerror(errno));
  try {
    write_all(fd, data, size, path);
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  // Close even when fsync fails, so the descriptor never leaks.
  const int sync_errno = ::fsync(fd) == 0 ? 0 : errno;
  const int close_errno = ::close(fd) == 0 ? 0 : errno;
  if (sync_errno != 0 || close_errno != 0) {
    ::unlink(temporary.c_str());
    throw Error(path + ": cannot flush: " + std::strerror(sync_errno ? sync_errno : close_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw Error(path + ": cannot rename into place: " + std::strerror(err));
  }
}

ModelWriter writer_of_parameters(const ModelConfig& config, const float* parameters, size_t count,
                                 DType dtype) {
  ModelWriter writer(config);
  size_t offset = 0;
  for (const auto& spec : transformer_parameters(config)) {
    const size_t elements = static_cast<size_t>(spec.elements());
    if (offset + elements > count) throw Error("fewer parameters than the model's config lists");
    DType tensor_dtype = spec.shape.size() >= 2 ? dtype : DType::f32;
    writer.add_tensor_f32(spec.name, tensor_dtype, spec.shape, parameters + offset);
    offset += elements;
  }
  if (offset != count) throw Error("more parameters than the model's config lists");
  return writer;
}

}  // namespace xf
