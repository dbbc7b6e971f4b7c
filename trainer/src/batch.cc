// Batches: the checks of a padded batch and how one is made from unpadded sequences.
#include "xf/trainer/batch.h"

#include <algorithm>
#include <string>

#include "xf/error.h"

namespace xf::trainer {

void Batch::validate(const ModelConfig& config) const {
  auto fail = [](const std::string& what) { throw Error("invalid batch: " + what); };
  if (batch_size < 1) fail("batch_size must be >= 1");
  if (source_len < 1 || target_len < 1) fail("source_len and target_len must be >= 1");
  const size_t b = static_cast<size_t>(batch_size);
  if (source_ids.size() != b * source_len) fail("source_ids size is not batch_size * source_len");
  if (target_input_ids.size() != b * target_len || target_output_ids.size() != b * target_len)
    fail("target ids size is not batch_size * target_len");
  if (source_lengths.size() != b || target_lengths.size() != b) fail("lengths size != batch_size");
  if (static_cast<uint64_t>(std::max(source_len, target_len)) > config.max_positions)
    fail("sequence length " + std::to_string(std::max(source_len, target_len)) +
         " exceeds max_positions " + std::to_string(config.max_positions));
  int64_t src_tokens = 0, tgt_tokens = 0;
  for (size_t i = 0; i < b; ++i) {
    if (source_lengths[i] < 1 || source_lengths[i] > source_len)
      fail("source_lengths[" + std::to_string(i) + "] out of 1..source_len");
    if (target_lengths[i] < 1 || target_lengths[i] > target_len)
      fail("target_lengths[" + std::to_string(i) + "] out of 1..target_len");
    src_tokens += source_lengths[i];
    tgt_tokens += target_lengths[i];
  }
  auto check_ids = [&](const std::vector<int32_t>& ids, uint32_t vocab, const char* name) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab)
        fail(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
             " is outside the vocabulary of " + std::to_string(vocab));
  };
  check_ids(source_ids, config.source_vocab_size, "source_ids");
  check_ids(target_input_ids, config.target_vocab_size, "target_input_ids");
  check_ids(target_output_ids, config.target_vocab_size, "target_output_ids");
  if (src_tokens != source_tokens || tgt_tokens != target_tokens)
    fail("source_tokens/target_tokens disagree with the lengths");
}

Batch make_batch(const ModelConfig& config, const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, int64_t min_source_len,
                 int64_t min_target_len) {
  if (sources.size() != targets.size() || sources.empty())
    throw Error("make_batch: need as many targets as sources, at least one");
  Batch batch;
  batch.batch_size = static_cast<int64_t>(sources.size());
  batch.source_len = min_source_len;
  batch.target_len = min_target_len;
  for (size_t i = 0; i < sources.size(); ++i) {
    batch.source_len = std::max<int64_t>(batch.source_len, sources[i].size() + 1);
    batch.target_len = std::max<int64_t>(batch.target_len, targets[i].size() + 1);
  }
  const size_t b = sources.size();
  batch.source_ids.assign(b * batch.source_len, config.pad_id);
  batch.target_input_ids.assign(b * batch.target_len, config.pad_id);
  batch.target_output_ids.assign(b * batch.target_len, config.pad_id);
  for (size_t i = 0; i < b; ++i) {
    int32_t* src = &batch.source_ids[i * batch.source_len];
    std::copy(sources[i].begin(), sources[i].end(), src);
    src[sources[i].size()] = config.eos_id;
    int32_t* in = &batch.target_input_ids[i * batch.target_len];
    int32_t* out = &batch.target_output_ids[i * batch.target_len];
    in[0] = config.bos_id;
    std::copy(targets[i].begin(), targets[i].end(), in + 1);
    std::copy(targets[i].begin(), targets[i].end(), out);
    out[targets[i].size()] = config.eos_id;
    batch.source_lengths.push_back(static_cast<int32_t>(sources[i].size() + 1));
    batch.target_lengths.push_back(static_cast<int32_t>(targets[i].size() + 1));
    batch.source_tokens += batch.source_lengths.back();
    batch.target_tokens += batch.target_lengths.back();
  }
  return batch;
}

}  // namespace xf::trainer
