#pragma once
// The memory plan: every limit the Translator's buffers are sized for, computed once from the
// model config and the TranslatorOptions. Backends size their arenas from it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xf/format/config.h"
#include "xf/translator.h"

namespace xf::runtime {

struct MemoryPlan {
  int64_t max_sentences = 0;   // sentences per decoding batch
  int64_t max_beam = 0;
  int64_t max_rows = 0;        // decoder rows: max_sentences * max_beam
  int64_t max_source_len = 0;  // source tokens, EOS included
  int64_t max_target_len = 0;  // generated tokens, EOS included: the self-attention cache length
  // The encoder runs over groups of sentences of at most this many rows (sentences x padded
  // length), so its working buffers do not grow with max_batch x max_source_len.
  int64_t encoder_group_rows = 0;

  // Row counts a matrix product is planned for: a product over `rows` rows runs as chunks of
  // matmul_chunk rows, and the remainder is padded up to the next planned count (at most 15
  // extra rows, computed on whatever the buffer holds there and never read).
  std::vector<int64_t> matmul_row_counts;  // ascending; the last is matmul_chunk
  int64_t matmul_chunk = 0;

  // The planned row count that a remainder of `rows` (1..matmul_chunk) runs as.
  int64_t padded_remainder(int64_t rows) const;
  // Rows a buffer needs to hold a product over `rows` rows, padding included.
  int64_t padded_rows(int64_t rows) const;
};

// Throws xf::Error naming the option when a limit is out of range for the model.
MemoryPlan make_memory_plan(const ModelConfig& config, const TranslatorOptions& options);

// The longest output for a source of source_tokens tokens (EOS included) under the options
// (max_len_a/b, max_decoding_length), capped by the plan; at least 1.
int64_t max_output_length(const MemoryPlan& plan, const TranslateOptions& options,
                          int64_t source_tokens);

// One block of memory taken at construction. mmap'ed, so pages that a run never touches (the
// tail of a K/V cache sized for the longest sentence) cost no resident memory.
class Arena {
 public:
  // Records a buffer of `bytes` bytes (64-byte aligned) and returns its offset.
  size_t reserve(size_t bytes);
  template <typename T>
  size_t reserve_array(size_t count) {
    return reserve(count * sizeof(T));
  }
  // Maps the memory for everything reserved so far. Throws xf::Error when it cannot.
  void allocate();
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }
  size_t bytes() const { return mapped_; }
  // rewind(mark()) makes the next reservations start at the marked offset again, so buffers
  // whose lifetimes do not overlap (the encoder's and the decoder step's) share memory.
  size_t mark() const { return size_; }
  void rewind(size_t mark);

  Arena() = default;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  size_t high_water_ = 0;
  size_t mapped_ = 0;
};

}  // namespace xf::runtime
