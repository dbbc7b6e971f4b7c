#include "foreign_tensors.h"

#include <zip.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "xf/error.h"
#include "xf/format/dtype_convert.h"
#include "torch_pickle.h"

namespace xf::importers {
namespace {

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t count = 1;
  for (uint64_t d : shape) {
    if (d != 0 && count > (uint64_t{1} << 40) / d) throw Error("shape too large");
    count *= d;
  }
  return count;
}

// Little-endian f32 / f16 / bf16 bytes widened to f32.
std::vector<float> widen(const uint8_t* data, uint64_t count, const std::string& type) {
  std::vector<float> values(count);
  if (type == "f32") {
    std::memcpy(values.data(), data, count * 4);
  } else {
    for (uint64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, data + 2 * i, 2);
      values[i] = type == "f16" ? half_to_float(bits) : bfloat16_to_float(bits);
    }
  }
  return values;
}

}  // namespace

std::string read_whole_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read " + what);
  return bytes.str();
}

ForeignTensors read_safetensors(const std::string& path) {
  const std::string file = read_whole_file(path, "the safetensors weights");
  auto fail = [&](const std::string& problem) { throw Error(path + ": " + problem); };
  if (file.size() < 8) fail("truncated safetensors file (" + std::to_string(file.size()) + " bytes)");
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  if (header_size > file.size() - 8) fail("truncated safetensors file: the header needs " +
                                          std::to_string(header_size) + " bytes");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<int64_t>(header_size));
  } catch (const std::exception& e) {
    fail(std::string("the safetensors header is not JSON: ") + e.what());
  }
  if (!header.is_object()) fail("the safetensors header is not a JSON object");
  const uint64_t data_size = file.size() - 8 - header_size;
  const auto* data = reinterpret_cast<const uint8_t*>(file.data()) + 8 + header_size;
  ForeignTensors tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string dtype = entry.at("dtype").get<std::string>();
      const std::string type = dtype == "F32" ? "f32" : dtype == "F16" ? "f16" : dtype == "BF16" ? "bf16" : "";
      if (type.empty()) fail("tensor '" + name + "' has dtype " + dtype + " (F32, F16 or BF16 only)");
      ForeignTensor t;
      t.shape = entry.at("shape").get<std::vector<uint64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      const uint64_t count = element_count(t.shape), bytes = count * (type == "f32" ? 4 : 2);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != bytes)
        fail("tensor '" + name + "': its data_offsets do not hold its shape (truncated file?)");
      t.values = widen(data + offsets[0], count, type);
      tensors.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      fail("tensor '" + name + "': malformed header entry (" + e.what() + ")");
    }
  }
  return tensors;
}

namespace {

// The .npy header's dictionary: {'descr': '<f4', 'fortran_order': False, 'shape': (94, 32), }
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

NpyHeader parse_npy_header(const std::string& text, const std::string& name) {
  auto fail = [&](const std::string& problem) { throw Error("array '" + name + "': " + problem); };
  NpyHeader h;
  auto value_after = [&](const std::string& key) -> size_t {
    const size_t at = text.find("'" + key + "'");
    if (at == std::string::npos) fail("its .npy header has no '" + key + "'");
    const size_t colon = text.find(':', at);
    if (colon == std::string::npos) fail("malformed .npy header");
    return text.find_first_not_of(' ', colon + 1);
  };
  size_t at = value_after("descr");
  if (at == std::string::npos || text[at] != '\'') fail("malformed .npy descr");
  const size_t end = text.find('\'', at + 1);
  if (end == std::string::npos) fail("malformed .npy descr");
  h.descr = text.substr(at + 1, end - at - 1);
  at = value_after("fortran_order");
  h.fortran_order = text.compare(at, 4, "True") == 0;
  at = value_after("shape");
  if (at == std::string::npos || text[at] != '(') fail("malformed .npy shape");
  const size_t close = text.find(')', at);
  if (close == std::string::npos) fail("malformed .npy shape");
  std::stringstream dims(text.substr(at + 1, close - at - 1));
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    const size_t first = dim.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    try {
      h.shape.push_back(std::stoull(dim.substr(first)));
    } catch (const std::exception&) {
      fail("malformed .npy shape");
    }
  }
  return h;
}

ForeignTensor parse_npy(const std::string& bytes, const std::string& name) {
  auto fail = [&](const std::string& problem) { throw Error("array '" + name + "': " + problem); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) fail("not a .npy array");
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    start = 10;
  } else {
    if (bytes.size() < 12) fail("truncated .npy header");
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    start = 12;
  }
  if (header_len > bytes.size() - start) fail("truncated .npy header");
  const NpyHeader h = parse_npy_header(bytes.substr(start, header_len), name);
  if (h.fortran_order) fail("Fortran-ordered arrays are not supported");
  ForeignTensor t;
  t.shape = h.shape;
  const uint64_t count = element_count(h.shape);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data()) + start + header_len;
  const uint64_t available = bytes.size() - start - header_len;
  const bool one_byte = h.descr == "|i1" || h.descr == "<i1" || h.descr == "|u1" || h.descr == "<u1" ||
                        h.descr == "|S1" || h.descr == "|b1";
  const uint64_t width = one_byte ? 1 : h.descr == "<f4" ? 4 : h.descr == "<f2" ? 2 : 0;
  if (width == 0) fail("element type " + h.descr + " (float32, float16 or bytes only)");
  if (available < count * width) fail("truncated data (" + std::to_string(available) + " of " +
                                      std::to_string(count * width) + " bytes)");
  if (one_byte)
    t.bytes.assign(reinterpret_cast<const char*>(data), count);
  else
    t.values = widen(data, count, width == 4 ? "f32" : "f16");
  return t;
}

}  // namespace

ZipArchive::ZipArchive(const std::string& path, const std::string& what) : path_(path), what_(what) {
  int error = 0;
  archive_ = zip_open(path.c_str(), ZIP_RDONLY, &error);
  if (archive_ == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    const std::string reason = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw Error(path + ": not a complete " + what + " (zip) file: " + reason);
  }
}

ZipArchive::~ZipArchive() { zip_discard(static_cast<zip_t*>(archive_)); }

std::vector<std::string> ZipArchive::names() const {
  std::vector<std::string> names;
  const zip_int64_t entries = zip_get_num_entries(static_cast<zip_t*>(archive_), 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* name = zip_get_name(static_cast<zip_t*>(archive_), i, 0);
    if (name == nullptr) throw Error(path_ + ": cannot read entry " + std::to_string(i) + " of the " + what_);
    names.emplace_back(name);
  }
  return names;
}

bool ZipArchive::contains(const std::string& name) const {
  return zip_name_locate(static_cast<zip_t*>(archive_), name.c_str(), 0) >= 0;
}

std::string ZipArchive::read(const std::string& name) const {
  zip_t* archive = static_cast<zip_t*>(archive_);
  zip_stat_t stat;
  if (zip_stat(archive, name.c_str(), 0, &stat) != 0) throw Error(path_ + ": no entry '" + name + "' in the " + what_);
  if (!(stat.valid & ZIP_STAT_SIZE)) throw Error(path_ + ": cannot read entry '" + name + "' of the " + what_);
  std::unique_ptr<zip_file_t, decltype(&zip_fclose)> file(zip_fopen(archive, name.c_str(), 0), &zip_fclose);
  if (!file) throw Error(path_ + ": cannot open entry '" + name + "' of the " + what_ + ": " + zip_strerror(archive));
  std::string bytes(stat.size, '\0');
  const zip_int64_t got = zip_fread(file.get(), bytes.data(), stat.size);
  if (got < 0 || static_cast<zip_uint64_t>(got) != stat.size)
    throw Error(path_ + ": truncated entry '" + name + "' in the " + what_);
  return bytes;
}

ForeignTensors read_npz(const std::string& path) {
  const ZipArchive archive(path, ".npz");
  ForeignTensors tensors;
  for (std::string name : archive.names()) {
    const std::string bytes = archive.read(name);
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    try {
      tensors.emplace(name, parse_npy(bytes, name));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  return tensors;
}

namespace {

// Marian's Type values (src/common/types.h): a size in bytes plus class bits. The intgemm8 of
// marian-nmt/marian-dev (pymarian's marian-conv) is 0x10001; browsermt/marian-dev's, which Firefox
// Translations' models carry, is 0x4101: the same bytes (Marian's code came from there).
constexpr uint64_t kMarianInt8 = 0x0101, kMarianFloat32 = 0x0404, kMarianIntgemm8 = 0x10001,
                   kBrowsermtIntgemm8 = 0x4101;

std::string marian_type_name(uint64_t type) {
  switch (type) {
    case 0x0101: return "int8";
    case 0x0402: return "float16";
    case 0x0404: return "float32";
    case 0x0802: return "packed16";
    case 0x1801: return "packed8avx2";
    case 0x2801: return "packed8avx512";
    case 0x10001: return "intgemm8";
    case 0x4101: return "intgemm8";
    case 0x18001: return "intgemm8ssse3";
    case 0x11001: return "intgemm8avx2";
    case 0x12001: return "intgemm8avx512";
    case 0x16001: return "intgemm8avx512vnni";
    case 0x10002: return "intgemm16";
    case 0x14002: return "intgemm16sse2";
    case 0x11002: return "intgemm16avx2";
    case 0x12002: return "intgemm16avx512";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(type));
      return std::string("type ") + hex;
    }
  }
}

}  // namespace

ForeignTensors read_marian_bin(const std::string& path) {
  const std::string file = read_whole_file(path, "the Marian binary model");
  auto fail = [&](const std::string& problem) -> void { throw Error(path + ": " + problem); };
  size_t at = 0;
  auto take = [&](size_t bytes, const char* what) -> const char* {
    if (bytes > file.size() - at) fail(std::string("truncated Marian binary model (") + what + ")");
    const char* p = file.data() + at;
    at += bytes;
    return p;
  };
  auto take_u64 = [&](const char* what) {
    uint64_t value;
    std::memcpy(&value, take(8, what), 8);
    return value;
  };
  const uint64_t version = take_u64("version");
  if (version != 1) fail("binary model version " + std::to_string(version) + " (Marian's version 1 only)");
  const uint64_t count = take_u64("item count");
  if (count > file.size() / 32) fail("truncated Marian binary model (item headers)");
  struct Header {
    uint64_t name_length, type, rank, data_length;
  };
  std::vector<Header> headers(count);
  for (Header& h : headers) {
    h.name_length = take_u64("item headers");
    h.type = take_u64("item headers");
    h.rank = take_u64("item headers");
    h.data_length = take_u64("item headers");
    if (h.name_length == 0 || h.rank > 8) fail("malformed item header");
  }
  std::vector<std::string> names(count);
  for (size_t i = 0; i < count; ++i) {
    const char* name = take(headers[i].name_length, "item names");
    if (name[headers[i].name_length - 1] != '\0') fail("malformed item name");
    names[i] = name;
  }
  std::vector<std::vector<uint64_t>> shapes(count);
  for (size_t i = 0; i < count; ++i)
    for (uint64_t d = 0; d < headers[i].rank; ++d) {
      int32_t dim;
      std::memcpy(&dim, take(4, "item shapes"), 4);
      if (dim < 0) fail("item '" + names[i] + "' has a negative dimension");
      shapes[i].push_back(static_cast<uint64_t>(dim));
    }
  take(take_u64("padding"), "padding");
  ForeignTensors tensors;
  for (size_t i = 0; i < count; ++i) {
    const Header& h = headers[i];
    const char* data = take(h.data_length, ("item '" + names[i] + "'").c_str());
    ForeignTensor t;
    t.shape = shapes[i];
    uint64_t elements;
    try {
      elements = element_count(t.shape);
    } catch (const Error&) {
      fail("item '" + names[i] + "': shape too large");
    }
    const bool intgemm8 = h.type == kMarianIntgemm8 || h.type == kBrowsermtIntgemm8;
    const uint64_t needed = h.type == kMarianFloat32 ? elements * 4 : intgemm8 ? elements + 4 : elements;
    if (h.type != kMarianFloat32 && h.type != kMarianInt8 && !intgemm8)
      fail("item '" + names[i] + "' is " + marian_type_name(h.type) +
           ", not supported (float32, or intgemm8: marian-conv --gemm-type float32 or intgemm8)");
    if (h.data_length < needed) fail("item '" + names[i] + "' holds fewer bytes than its shape needs");
    if (h.type == kMarianFloat32) {
      t.values = widen(reinterpret_cast<const uint8_t*>(data), elements, "f32");
    } else if (h.type == kMarianInt8) {
      t.bytes.assign(data, elements);
    } else {
      if (t.shape.size() != 2) fail("intgemm8 item '" + names[i] + "' is not a matrix");
      t.bytes.assign(data, elements);
      std::memcpy(&t.intgemm8_multiplier, data + elements, 4);
      if (!(t.intgemm8_multiplier > 0) || !std::isfinite(t.intgemm8_multiplier))
        fail("intgemm8 item '" + names[i] + "' has no positive quantization multiplier");
      t.values.resize(elements);
      // marian-conv quantizes the transposed matrix, but an embedding ("Wemb") as it is, which
      // Marian widens back to f32 at load time, q * (1 / multiplier), as here.
      const bool transposed = names[i].find("Wemb") == std::string::npos;
      const uint64_t rows = t.shape[0], cols = t.shape[1];
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < cols; ++c)
          t.values[r * cols + c] = static_cast<int8_t>(t.bytes[transposed ? c * rows + r : r * cols + c]) *
                                   (1.0f / t.intgemm8_multiplier);
      if (!transposed) t.intgemm8_multiplier = 0;  // an f32 table to Marian
      if (!transposed) t.bytes.clear();
    }
    if (!tensors.emplace(names[i], std::move(t)).second) fail("item '" + names[i] + "' appears twice");
  }
  return tensors;
}

ForeignTensors read_pytorch_bin(const std::string& path) {
  const ZipArchive archive(path, "pytorch_model.bin");
  // torch.save names every entry <prefix>/...: the prefix is data.pkl's folder.
  std::string prefix;
  for (const std::string& name : archive.names()) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (!prefix.empty()) throw Error(path + ": more than one data.pkl (not one torch.save'd state dict)");
      prefix = name.substr(0, slash + 1);
    }
  }
  if (prefix.empty()) throw Error(path + ": no <name>/data.pkl (not a state dict saved by torch.save)");
  if (archive.contains(prefix + "byteorder")) {
    const std::string order = archive.read(prefix + "byteorder");
    if (order != "little") throw Error(path + ": storages are " + order + "-endian (little only)");
  }
  std::vector<std::pair<std::string, TorchTensorRef>> refs;
  try {
    refs = read_state_dict_pickle(archive.read(prefix + "data.pkl"));
  } catch (const Error& e) {
    throw Error(path + ": " + prefix + "data.pkl: " + e.what());
  }
  std::map<std::string, std::string> storages;  // key -> bytes, each read once (tied weights share one)
  ForeignTensors tensors;
  for (const auto& [name, ref] : refs) {
    auto it = storages.find(ref.storage_key);
    if (it == storages.end()) it = storages.emplace(ref.storage_key, archive.read(prefix + "data/" + ref.storage_key)).first;
    const uint64_t width = ref.dtype == "f32" ? 4 : 2;
    if (it->second.size() != ref.storage_elements * width)
      throw Error(path + ": storage '" + ref.storage_key + "' holds " + std::to_string(it->second.size()) +
                  " bytes, its pickle says " + std::to_string(ref.storage_elements * width) + " (truncated?)");
    ForeignTensor t;
    t.shape = ref.shape;
    t.values = widen(reinterpret_cast<const uint8_t*>(it->second.data()) + ref.offset * width,
                     element_count(ref.shape), ref.dtype);
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

}  // namespace xf::importers
