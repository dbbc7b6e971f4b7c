#pragma once
// The memory plan: every limit the Translator's buffers are sized for, computed once from the
// model config and the TranslatorOptions. Backends size their arenas from it (ArenaLayout);
// how a device rounds row counts up (oneDNN's planned row counts) is the device's business.
#include <cstddef>
#include <algorithm>
#include <cstdint>

#include "xf/format/config.h"
#include "xf/translation_types.h"

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
  // A lexical shortlist may restrict the output layer (Backend::restrict_output): the host
  // backends then plan its gathered weights and logits (the Translator sets it).
  bool output_shortlist = false;
};

// Throws xf::Error naming the option when a limit is out of range for the model.
MemoryPlan make_memory_plan(const ModelConfig& config, const TranslatorOptions& options);

// The longest output for a source of source_tokens tokens (EOS included) under the options
// (max_len_a/b, max_decoding_length), capped by the plan; at least 1.
int64_t max_output_length(const MemoryPlan& plan, const TranslateOptions& options,
                          int64_t source_tokens);

// Offsets of the buffers in one block of working memory, reserved in order, each aligned. The
// block's size is the high-water mark: rewind(mark()) lets buffers whose lifetimes do not
// overlap (the encoder's and the decoder step's) share memory. Every device plans with it.
class ArenaLayout {
 public:
  explicit ArenaLayout(size_t alignment) : alignment_(alignment) {}
  // Records a buffer of `bytes` bytes and returns its offset.
  size_t reserve(size_t bytes);
  template <typename T>
  size_t reserve_array(int64_t count) {
    return reserve(static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T));
  }
  size_t mark() const { return size_; }
  void rewind(size_t mark) { size_ = mark; }
  // The block's size, a multiple of the alignment (at least one).
  size_t bytes() const;

 private:
  size_t alignment_;
  size_t size_ = 0;
  size_t high_water_ = 0;
};

// Host working memory: one anonymous mmap, so pages that a run never touches (the tail of a K/V
// cache sized for the longest sentence) cost no resident memory.
class HostArena {
 public:
  // Throws xf::Error when the memory cannot be mapped.
  explicit HostArena(size_t bytes);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace xf::runtime
