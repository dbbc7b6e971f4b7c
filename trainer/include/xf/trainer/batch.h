#pragma once
// What one training step takes and gives: a padded batch of sentence pairs and the loss sums
// over its scored tokens. Every model (CPU, CUDA), the graph and the loop speak these types.
#include <cstdint>
#include <vector>

#include "xf/format/config.h"

namespace xf::trainer {

// One padded batch of sentence pairs. Rows are padded with config.pad_id after their length.
// The decoder reads target_input_ids (BOS y1 .. yn) and is scored against target_output_ids
// (y1 .. yn EOS); both have target_lengths[b] = n + 1 real tokens.
struct Batch {
  int64_t batch_size = 0;                  // B
  int64_t source_len = 0;                  // S: padded source length (max of source_lengths)
  int64_t target_len = 0;                  // T: padded target length (max of target_lengths)
  std::vector<int32_t> source_ids;         // [B, S]
  std::vector<int32_t> source_lengths;     // [B], each in 1..S
  std::vector<int32_t> target_input_ids;   // [B, T]
  std::vector<int32_t> target_output_ids;  // [B, T]
  std::vector<int32_t> target_lengths;     // [B], each in 1..T
  int64_t source_tokens = 0;               // sum of source_lengths
  int64_t target_tokens = 0;               // sum of target_lengths (the tokens scored)
  // Data parallel: these are rows row_offset.. of a global batch padded to the same S and T, and
  // dropout draws their masks as it would for those rows of the global batch.
  int64_t row_offset = 0;

  // Throws xf::Error naming the first inconsistency (sizes, lengths, ids >= vocab).
  void validate(const ModelConfig& config) const;
};

// Builds a Batch from unpadded sequences: source[b] and target[b] are token ids without BOS/EOS
// (the source gets EOS appended; the target becomes BOS+y / y+EOS). Padded to the longest row,
// or to min_source_len / min_target_len when longer (a rank's share of a global batch).
Batch make_batch(const ModelConfig& config, const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, int64_t min_source_len = 0,
                 int64_t min_target_len = 0);

// Sums over the scored (non-padding) target tokens of one batch.
struct LossSums {
  double loss_sum = 0;       // label-smoothed cross-entropy, summed over tokens
  double nll_sum = 0;        // plain negative log-likelihood of the reference, summed
  int64_t token_count = 0;   // scored tokens (= batch.target_tokens)
};

}  // namespace xf::trainer
