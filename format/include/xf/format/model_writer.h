#pragma once
// Builds a flat model file. Tensors are copied in, then write() lays out the header and the
// 256-byte aligned blob and replaces the destination atomically (temporary file, fsync, rename).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/shortlist.h"
#include "xf/weight_layout.h"

namespace xf {

class ModelWriter {
 public:
  explicit ModelWriter(const ModelConfig& config);  // validates the config

  void set_source_tokenizer(std::string model_proto);
  void set_target_tokenizer(std::string model_proto);  // only when it differs from the source
  void set_metadata(const std::string& key, const std::string& value);
  // The model's own vocabulary, the piece of each id (format version 2): for a model whose ids
  // are not its SentencePiece model's (an imported Marian model). The target one only when it
  // differs from the source one.
  void set_source_vocabulary(std::vector<std::string> pieces);
  void set_target_vocabulary(std::vector<std::string> pieces);
  // A lexical shortlist stored in the model (checked against the config's vocabularies when the
  // file is written); the runtime uses it unless told otherwise (--shortlist none).
  void set_shortlist(LexicalShortlist shortlist);

  // Raw bytes in the given dtype; for INT8 also one f32 scale per row (shape[0] of them).
  // layout (format version 4, xf/weight_layout.h): how data is arranged; not rows: a rank-2
  // matrix, bytes = layout_bytes(), the row scales in row order as ever. A file with any tensor
  // not in rows is written as version 4.
  void add_tensor(const std::string& name, DType dtype, const std::vector<uint64_t>& shape,
                  const void* data, size_t bytes, const float* row_scales = nullptr,
                  WeightLayout layout = WeightLayout::rows);
  // Re-lays a tensor already added in rows out in `layout` (format version 4): panels packed
  // (pack_panels), 7-bit layouts with each int8 value to_seven_bits() and its row scale doubled.
  void set_layout(const std::string& name, WeightLayout layout);
  // Converts f32 values to `dtype` (f16/bf16 rounding, int8 per-row quantization).
  void add_tensor_f32(const std::string& name, DType dtype, const std::vector<uint64_t>& shape,
                      const float* values);

  // Checks that the tensors are exactly the parameters transformer_parameters() lists.
  void write(const std::string& path) const;
  // The file's bytes (for tests that corrupt them, and for the trainer's validation, which
  // opens the model it trains from memory: ModelFile::copy_from_memory).
  std::vector<uint8_t> serialize() const;
  // For tests of the version rules only: files are written with the lowest version that holds
  // them otherwise (1 unless the config or a vocabulary list needs version 2).
  void set_format_version_for_testing(uint32_t version) { format_version_ = version; }
  // The version write() and serialize() give the file.
  uint32_t format_version() const;

 private:
  struct PendingTensor {
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> data;
    std::vector<float> scales;
    WeightLayout layout = WeightLayout::rows;
  };
  ModelConfig config_;
  std::optional<uint32_t> format_version_;  // unset: the lowest that holds the file
  std::string source_tokenizer_, target_tokenizer_;
  std::vector<std::string> source_vocabulary_, target_vocabulary_;
  std::optional<LexicalShortlist> shortlist_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, PendingTensor> tensors_;
};

// A writer holding `parameters` (`count` floats in transformer_parameters(config)'s order) in
// `dtype`: the one rule for which tensors take a model's dtype, shared by the trainer's
// checkpoints and the importers. Matrices (rank >= 2) take `dtype`; 1-D tensors (biases,
// LayerNorm gains) stay f32: they are a negligible share of the bytes, and int8 per-row scales
// would give one scale per element. Throws when `count` is not the config's parameter count.
ModelWriter writer_of_parameters(const ModelConfig& config, const float* parameters, size_t count,
                                 DType dtype);

// Writes bytes to path atomically: path.tmp.<pid>, fsync, rename. Shared by every writer of
// models and checkpoints. Only a regular file (or a path that does not exist yet) is replaced
// by rename; an existing device or FIFO (/dev/null, /dev/full, a pipe) is written in place, so
// that it stays what it is, and a failed or short write there is an error too.
void write_file_atomically(const std::string& path, const void* data, size_t size);

// Writes all `size` bytes to `fd` (retrying short writes and EINTR). Throws
// xf::Error("<label>: write failed: <reason>"), e.g. for a full disk or a closed pipe (EPIPE,
// when SIGPIPE is ignored).
void write_all(int fd, const void* data, size_t size, const std::string& label);

}  // namespace xf
