#include "xf/format/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "xf/error.h"
#include "xf/format/file_layout.h"
#include "xf/format/parameters.h"
#include "config_fb.h"
#include "xf_model_generated.h"

namespace xf {

static_assert(static_cast<int>(fb::DType::MAX) + 1 == kNumDTypes, "dtype enums disagree");

uint64_t TensorView::elements() const {
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

namespace {

std::string shape_string(const uint64_t* shape, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Multiplies, reporting overflow instead of wrapping.
bool checked_multiply(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

std::shared_ptr<const ModelFile> ModelFile::open(const std::string& path, FileAccess access) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; no effect on regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": is a directory, not a model file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw Error(path + ": empty file, not a model");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  std::shared_ptr<ModelFile> file(new ModelFile());
  file->path_ = path;
  file->size_ = size;
  if (access == FileAccess::map) {
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (mapping == MAP_FAILED) throw Error(path + ": cannot map: " + std::strerror(map_errno));
    file->bytes_ = static_cast<const uint8_t*>(mapping);
    file->mapped_ = true;
  } else {
    uint8_t* copy;
    try {
      copy = file->allocate_copy();
    } catch (const Error&) {
      ::close(fd);
      throw;
    }
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd, copy + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : 0;
        ::close(fd);
        throw Error(path + ": " + (n < 0 ? std::string("read failed: ") + std::strerror(err)
                                         : std::string("the file shrank while it was read")));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    file->protect_copy();
  }
  file->parse_and_validate();  // the destructor unmaps if this throws
  return file;
}

uint8_t* ModelFile::allocate_copy() {
  // Anonymous memory is page-aligned, as the format's tensor alignment needs.
  void* copy = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) {
    throw Error(path_ + ": cannot allocate " + std::to_string(size_) + " bytes: " +
                std::strerror(errno));
  }
  bytes_ = static_cast<const uint8_t*>(copy);
  anonymous_ = true;  // the destructor unmaps it from here on
  return static_cast<uint8_t*>(copy);
}

void ModelFile::protect_copy() const {
  ::mprotect(const_cast<uint8_t*>(bytes_), size_, PROT_READ);  // as read-only as a mapping
}

std::shared_ptr<const ModelFile> ModelFile::copy_from_memory(const void* bytes, size_t size,
                                                             const std::string& label) {
  if (size == 0) throw Error(label + ": empty file, not a model");
  std::shared_ptr<ModelFile> file(new ModelFile());
  file->path_ = label;
  file->size_ = size;
  std::memcpy(file->allocate_copy(), bytes, size);
  file->protect_copy();
  file->parse_and_validate();
  return file;
}

std::shared_ptr<const ModelFile> ModelFile::from_memory(const void* bytes, size_t size,
                                                        const std::string& label) {
  std::shared_ptr<ModelFile> file(new ModelFile());
  file->path_ = label;
  file->bytes_ = static_cast<const uint8_t*>(bytes);
  file->size_ = size;
  if (size == 0) throw Error(label + ": empty file, not a model");
  file->parse_and_validate();
  return file;
}

ModelFile::~ModelFile() {
  if (mapped_ || anonymous_) ::munmap(const_cast<uint8_t*>(bytes_), size_);
}

void ModelFile::release_pages(const TensorView& tensor) const {
  const auto* begin = static_cast<const uint8_t*>(tensor.data);
  if (begin < bytes_ || tensor.bytes > size_ || begin + tensor.bytes > bytes_ + size_)
    throw Error(path_ + ": release_pages: the tensor is not in this file");
  if (!mapped_) return;
  // The page-aligned interior: pages shared with a neighbouring tensor stay.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + tensor.bytes) / page * page;
  if (last <= first) return;
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0)
    throw Error(path_ + ": release_pages: madvise failed: " + std::strerror(errno));
}

std::string_view ModelFile::target_tokenizer() const {
  return target_tokenizer_.empty() ? source_tokenizer_ : target_tokenizer_;
}

std::string ModelFile::metadata_value(const std::string& key, const std::string& fallback) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return v;
  }
  return fallback;
}

const TensorView* ModelFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const TensorView& ModelFile::tensor(std::string_view name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(path_ + ": no tensor '" + std::string(name) + "'");
  return *t;
}

void ModelFile::parse_and_validate() {
  auto fail = [&](const std::string& problem) { throw Error(path_ + ": " + problem); };

  // Preamble and header bounds.
  if (size_ < kPreambleSize + 8) {
    fail("truncated: " + std::to_string(size_) + " bytes is too short for a model header");
  }
  if (std::memcmp(bytes_ + kPreambleSize + 4, kFileIdentifier, 4) != 0) {
    fail("not an xf model (file identifier is not XFM1)");
  }
  uint32_t header_size = 0, header_crc = 0;
  std::memcpy(&header_size, bytes_, 4);
  std::memcpy(&header_crc, bytes_ + 4, 4);
  // The FlatBuffers verifier handles buffers below 2^31 - 1 bytes only (it asserts otherwise).
  if (header_size >= FLATBUFFERS_MAX_BUFFER_SIZE) {
    fail("header of " + std::to_string(header_size) + " bytes exceeds the FlatBuffers limit of " +
         std::to_string(FLATBUFFERS_MAX_BUFFER_SIZE - 1) + " bytes");
  }
  if (kPreambleSize + uint64_t{header_size} > size_) {
    fail("truncated: the header needs " + std::to_string(kPreambleSize + uint64_t{header_size}) +
         " bytes, the file has " + std::to_string(size_));
  }
  const uint8_t* header = bytes_ + kPreambleSize;
  if (crc32(header, header_size) != header_crc) fail("header checksum mismatch (corrupt header)");

  flatbuffers::Verifier verifier(header, header_size);
  if (!fb::VerifyModelBuffer(verifier)) fail("header fails FlatBuffers verification");
  const fb::Model* model = fb::GetModel(header);

  // Version rules (format/README.md): older versions this reader knows are read, newer refused.
  format_version_ = model->format_version();
  if (format_version_ == 0) fail("invalid format version 0");
  if (format_version_ > kFormatVersion) {
    fail("format version " + std::to_string(format_version_) +
         " is newer than this reader supports (" + std::to_string(kFormatVersion) +
         "); upgrade xf");
  }

  // The blob: right after the padded header, to the end of the file, nothing after it.
  blob_offset_ = align_up(kPreambleSize + uint64_t{header_size}, kBlobAlignment);
  const uint64_t blob_size = model->blob_size();
  if (blob_offset_ > size_ || blob_size > size_ - blob_offset_) {
    fail("truncated: the weights need " + std::to_string(blob_offset_) + " + " +
         std::to_string(blob_size) + " bytes, the file has " + std::to_string(size_));
  }
  if (blob_offset_ + blob_size != size_) {
    fail(std::to_string(size_ - blob_offset_ - blob_size) +
         " unexpected bytes after the weight blob");
  }

  // Config.
  config_ = config_from_fb(*model->config());
  try {
    validate_config(config_);
  } catch (const Error& e) {
    fail(e.what());
  }

  auto byte_view = [](const flatbuffers::Vector<uint8_t>* v) {
    return v ? std::string_view(reinterpret_cast<const char*>(v->data()), v->size())
             : std::string_view();
  };
  source_tokenizer_ = byte_view(model->source_tokenizer());
  target_tokenizer_ = byte_view(model->target_tokenizer());

  // Vocabulary lists: one piece per id of their side.
  auto read_vocabulary = [&](const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* pieces,
                             uint32_t size, const char* side, std::vector<std::string_view>& out) {
    out.clear();
    if (!pieces) return;
    if (pieces->size() != size)
      fail(std::string(side) + " vocabulary has " + std::to_string(pieces->size()) +
           " pieces, the config needs " + std::to_string(size));
    out.reserve(size);
    for (const flatbuffers::String* piece : *pieces) out.emplace_back(piece->c_str(), piece->size());
  };
  read_vocabulary(model->source_vocabulary(), config_.source_vocab_size, "source", source_vocabulary_);
  read_vocabulary(model->target_vocabulary(), config_.target_vocab_size, "target", target_vocabulary_);
  if (!source_vocabulary_.empty() && target_vocabulary_.empty() &&
      config_.source_vocab_size != config_.target_vocab_size)
    fail("target vocabulary is missing (the source one has " +
         std::to_string(config_.source_vocab_size) + " pieces, the target side " +
         std::to_string(config_.target_vocab_size) + ")");
  if (source_vocabulary_.empty() && !target_vocabulary_.empty())
    fail("target vocabulary without a source vocabulary");

  shortlist_.reset();
  if (const fb::Shortlist* stored = model->shortlist()) {
    LexicalShortlist shortlist;
    shortlist.first_num = stored->first_num();
    shortlist.best_num = stored->best_num();
    shortlist.offsets.assign(stored->offsets()->begin(), stored->offsets()->end());
    shortlist.targets.assign(stored->targets()->begin(), stored->targets()->end());
    try {
      check_shortlist(shortlist, config_.source_vocab_size, config_.target_vocab_size);
    } catch (const Error& e) {
      fail(std::string("invalid ") + e.what());
    }
    shortlist_ = std::move(shortlist);
  }

  metadata_.clear();
  if (model->metadata()) {
    for (const fb::KeyValue* kv : *model->metadata()) {
      metadata_.emplace_back(kv->key()->str(), kv->value()->str());
    }
  }

  // Tensor table: every entry in bounds, aligned, sized by its shape and dtype.
  tensors_.clear();
  struct BlobRange {
    uint64_t offset, length;
    size_t tensor;     // index into tensors_
    const char* what;  // "data" or "row scales"
  };
  std::vector<BlobRange> ranges;
  const uint8_t* blob = bytes_ + blob_offset_;
  for (const fb::Tensor* t : *model->tensors()) {
    const std::string name = t->name()->str();
    auto tensor_fail = [&](const std::string& problem) { fail("tensor '" + name + "': " + problem); };
    const int dtype_value = static_cast<int>(t->dtype());
    if (dtype_value < 0 || dtype_value >= kNumDTypes) {
      tensor_fail("unknown dtype " + std::to_string(dtype_value));
    }
    TensorView view;
    view.dtype = static_cast<DType>(dtype_value);
    const auto* shape = t->shape();
    if (shape->size() == 0 || shape->size() > kMaxTensorRank) {
      tensor_fail("rank " + std::to_string(shape->size()) + " outside [1, 4]");
    }
    view.rank = shape->size();
    uint64_t elements = 1;
    for (uint32_t i = 0; i < view.rank; ++i) {
      view.shape[i] = shape->Get(i);
      if (view.shape[i] == 0) tensor_fail("has a zero dimension");
      if (!checked_multiply(elements, view.shape[i], &elements)) tensor_fail("shape overflows");
    }
    const int layout_value = static_cast<int>(t->layout());
    if (layout_value < 0 || layout_value >= kNumWeightLayouts) {
      tensor_fail("unknown layout " + std::to_string(layout_value));
    }
    view.layout = static_cast<WeightLayout>(layout_value);
    if (view.layout != WeightLayout::rows) {
      const std::string layout = weight_layout_name(view.layout);
      if (format_version_ < 4) {
        tensor_fail("layout " + layout + " needs format version 4, the file says " + std::to_string(format_version_));
      }
      if (view.rank != 2) tensor_fail("layout " + layout + " needs rank 2, not " + std::to_string(view.rank));
      if (!layout_holds(view.layout, view.dtype)) {
        tensor_fail("layout " + layout + " does not hold " + dtype_name(view.dtype));
      }
    }
    // The layout's bytes (rows: elements x dtype size; panels pad rows to 16 and int8 columns to
    // 4), computed in 128 bits: no overflow on a hostile shape.
    unsigned __int128 wide = static_cast<unsigned __int128>(elements) * dtype_size(view.dtype);
    if (in_panels(view.layout)) {
      const unsigned __int128 panels = (static_cast<unsigned __int128>(view.shape[0]) + kPanelRows - 1) / kPanelRows;
      const unsigned __int128 k = view.shape[1];
      wide = view.dtype == DType::int8 ? panels * ((k + 3) / 4) * 4 * kPanelRows : panels * kPanelRows * k * 4;
    }
    if (wide != t->size()) {
      tensor_fail("size " + std::to_string(t->size()) + " bytes disagrees with shape " +
                  shape_string(view.shape.data(), view.rank) + " in " + dtype_name(view.dtype) +
                  (view.layout != WeightLayout::rows ? std::string(" ") + weight_layout_name(view.layout) : ""));
    }
    const uint64_t bytes = t->size();
    auto check_range = [&](uint64_t offset, uint64_t length, const char* what) {
      if (offset % kBlobAlignment != 0) {
        tensor_fail(std::string(what) + " offset " + std::to_string(offset) +
                    " is not a multiple of 256");
      }
      if (offset > blob_size || length > blob_size - offset) {
        tensor_fail(std::string(what) + " [" + std::to_string(offset) + ", +" +
                    std::to_string(length) + ") lies past the end of the weight blob (" +
                    std::to_string(blob_size) + " bytes)");
      }
    };
    check_range(t->offset(), bytes, "data");
    view.data = blob + t->offset();
    view.bytes = bytes;
    ranges.push_back({t->offset(), bytes, tensors_.size(), "data"});
    if (view.dtype == DType::int8) {
      const uint64_t scale_bytes = view.shape[0] * sizeof(float);
      check_range(t->scales_offset(), scale_bytes, "row scales");
      view.row_scales = reinterpret_cast<const float*>(blob + t->scales_offset());
      // A zero, negative or non-finite scale would silently poison every product with the row.
      for (uint64_t r = 0; r < view.shape[0]; ++r) {
        float scale;
        std::memcpy(&scale, blob + t->scales_offset() + r * sizeof(float), sizeof scale);
        if (!(std::isfinite(scale) && scale > 0.0f)) {
          tensor_fail("row scale " + std::to_string(r) + " is not a positive finite number");
        }
      }
      ranges.push_back({t->scales_offset(), scale_bytes, tensors_.size(), "row scales"});
    } else if (t->scales_offset() != 0) {
      tensor_fail("has row scales but is not int8");
    }
    view.name = std::string_view(t->name()->c_str(), t->name()->size());
    if (!tensors_.empty() && !(tensors_.back().name < view.name)) {
      tensor_fail("tensor table is not sorted by name or has a duplicate");
    }
    tensors_.push_back(view);
  }

  // No two ranges share a byte: a writer never lays them out that way, and a tensor that
  // aliases another is a corrupt table, not a saving.
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const BlobRange& a, const BlobRange& b) { return a.offset < b.offset; });
  auto range_string = [&](const BlobRange& r) {
    return std::string(r.what) + " [" + std::to_string(r.offset) + ", +" +
           std::to_string(r.length) + ")";
  };
  for (size_t i = 1; i < ranges.size(); ++i) {
    const BlobRange &previous = ranges[i - 1], &next = ranges[i];
    if (next.offset < previous.offset + previous.length) {
      fail("tensor '" + std::string(tensors_[next.tensor].name) + "': " + range_string(next) +
           " overlaps tensor '" + std::string(tensors_[previous.tensor].name) + "' " +
           range_string(previous));
    }
  }

  // The table must be exactly the parameters the config calls for.
  const std::vector<ParameterSpec> expected = transformer_parameters(config_);
  for (const ParameterSpec& spec : expected) {
    const TensorView* t = find(spec.name);
    if (!t) fail("missing tensor '" + spec.name + "'");
    if (t->rank != spec.shape.size() ||
        !std::equal(spec.shape.begin(), spec.shape.end(), t->shape.begin())) {
      fail("tensor '" + spec.name + "' has shape " + shape_string(t->shape.data(), t->rank) +
           ", the config needs " + shape_string(spec.shape.data(), spec.shape.size()));
    }
  }
  if (tensors_.size() != expected.size()) {
    for (const TensorView& t : tensors_) {
      const bool known = std::any_of(expected.begin(), expected.end(),
                                     [&](const ParameterSpec& s) { return s.name == t.name; });
      if (!known) fail("unexpected tensor '" + std::string(t.name) + "'");
    }
  }
}

}  // namespace xf
