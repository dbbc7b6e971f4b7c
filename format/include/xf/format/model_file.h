#pragma once
// Reads a flat model file (.xfm): memory-maps it, validates every byte the header describes,
// and hands out zero-copy views of the tensors. See format/README.md for the layout.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/file_access.h"  // how ModelFile::open gets the bytes
#include "xf/format/shortlist.h"
#include "xf/weight_layout.h"

namespace xf {

// The newest version this code reads and writes; it writes the lowest version that holds a file
// (format/README.md, version rules).
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr size_t kBlobAlignment = 256;       // tensor offsets are multiples of this
inline constexpr size_t kMaxTensorRank = 4;
inline constexpr const char* kFileIdentifier = "XFM1";

// A view into the mapped file; valid while the ModelFile lives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::f32;
  uint32_t rank = 0;
  std::array<uint64_t, kMaxTensorRank> shape{};
  const void* data = nullptr;       // aligned to kBlobAlignment
  size_t bytes = 0;
  const float* row_scales = nullptr;  // INT8 only: [shape[0]]
  // How data is arranged (version 4; xf/weight_layout.h): bytes is layout_bytes() of it.
  // Readers that want row-major values take rows_of() (xf/format/dtype_convert.h).
  WeightLayout layout = WeightLayout::rows;

  uint64_t elements() const;
  uint64_t rows() const { return rank == 0 ? 1 : shape[0]; }
  uint64_t cols() const { return rank == 0 ? 1 : elements() / shape[0]; }
};

class ModelFile {
 public:
  // Throws xf::Error("<path>: <problem>") for anything that is not exactly right.
  static std::shared_ptr<const ModelFile> open(const std::string& path,
                                               FileAccess access = FileAccess::map);
  // Validates a file already in memory (the bytes must outlive the ModelFile). For the fuzzer.
  static std::shared_ptr<const ModelFile> from_memory(const void* bytes, size_t size,
                                                      const std::string& label);
  // Copies a file held in memory (ModelWriter::serialize()'s bytes) into page-aligned memory of
  // its own, so its tensors are aligned as in a mapped file, and validates it. `label` names it
  // in messages. The trainer's validation opens the model it is training this way.
  static std::shared_ptr<const ModelFile> copy_from_memory(const void* bytes, size_t size,
                                                           const std::string& label);
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t format_version() const { return format_version_; }
  const ModelConfig& config() const { return config_; }
  size_t file_size() const { return size_; }
  size_t blob_offset() const { return blob_offset_; }

  // SentencePiece model protos; empty views when absent. target_tokenizer() falls back to the
  // source one when the file stores a single shared model.
  std::string_view source_tokenizer() const { return source_tokenizer_; }
  std::string_view target_tokenizer() const;

  // The model's own vocabulary, the piece of each id (empty when the file has none: then the
  // tokenizer's ids are the model's). target_vocabulary() falls back to the source one.
  const std::vector<std::string_view>& source_vocabulary() const { return source_vocabulary_; }
  const std::vector<std::string_view>& target_vocabulary() const {
    return target_vocabulary_.empty() ? source_vocabulary_ : target_vocabulary_;
  }

  // The lexical shortlist stored in the file (a copy, checked against the vocabularies), if any.
  const std::optional<LexicalShortlist>& shortlist() const { return shortlist_; }

  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  std::string metadata_value(const std::string& key, const std::string& fallback = "") const;

  const std::vector<TensorView>& tensors() const { return tensors_; }  // sorted by name
  const TensorView* find(std::string_view name) const;                   // nullptr when absent
  const TensorView& tensor(std::string_view name) const;                 // throws when absent

  // Drops this process's mapped pages that lie wholly inside `tensor`'s bytes, so that they stop
  // counting in its resident memory. For a caller that keeps its own copy of a tensor (the CPU
  // backend's packed f32 matrices) and reads the stored bytes no more. Safe either way: the
  // mapping is private and read-only, so a page touched again is read back from the file (which
  // must not change while it is open, as for every mapped read). A no-op for a file opened from
  // memory. `tensor` must be one of tensors().
  void release_pages(const TensorView& tensor) const;

 private:
  ModelFile() = default;
  void parse_and_validate();

  std::string path_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;     // bytes_ maps the file
  bool anonymous_ = false;  // bytes_ is an anonymous mapping holding a copy (FileAccess::read,
                            // copy_from_memory)
  // Gives the file an anonymous mapping of size_ bytes to fill (bytes_ points to it, read-only
  // once protect_copy() runs); throws naming path_ when there is no memory.
  uint8_t* allocate_copy();
  void protect_copy() const;
  uint32_t format_version_ = 0;
  size_t blob_offset_ = 0;
  ModelConfig config_;
  std::string_view source_tokenizer_, target_tokenizer_;
  std::vector<std::string_view> source_vocabulary_, target_vocabulary_;
  std::optional<LexicalShortlist> shortlist_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<TensorView> tensors_;
};

}  // namespace xf
