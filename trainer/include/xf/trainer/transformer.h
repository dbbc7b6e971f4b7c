#pragma once
// The encoder-decoder Transformer for training on the CPU: parameters, gradients, and the
// explicit forward and backward passes of transformer_graph.h (the same code on every device)
// over CpuTrainingOps, with the label-smoothed loss.
//
// Parameters and gradients each live in ONE contiguous buffer, laid out in the order of
// xf::transformer_parameters(config) (format/include/xf/format/parameters.h), so checkpoints and
// the converter copy them by name through the offset table. The optimizer's moments
// (optimizer.h) use the same layout.
//
// The model is a template on the scalar type: TransformerModel (float) is what xf-train runs;
// the gradient tests instantiate the very same code with double.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/format/parameters.h"

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

struct TrainingOptions {
  float dropout = 0.1f;            // on sub-layer outputs and on embedding + position sums
  float attention_dropout = 0.0f;  // on attention probabilities
  float label_smoothing = 0.1f;    // q = (1 - eps) * onehot(y) + eps / vocab (PyTorch's rule)
};

// Sums over the scored (non-padding) target tokens of one batch.
struct LossSums {
  double loss_sum = 0;       // label-smoothed cross-entropy, summed over tokens
  double nll_sum = 0;        // plain negative log-likelihood of the reference, summed
  int64_t token_count = 0;   // scored tokens (= batch.target_tokens)
};

// Where one parameter lives in the contiguous parameter / gradient / moment buffers.
struct ParameterSlot {
  ParameterSpec spec;
  size_t offset = 0;  // in elements from the start of the buffer
  size_t size = 0;    // elements
};

template <typename Scalar>
class BasicTransformerModel {
 public:
  // Parameters start zeroed; call initialize(). threads: OpenMP threads for every call (each
  // call also sets omp_set_num_threads(threads), the pool oneDNN's sgemm runs on).
  // On a machine shared with other busy processes, OMP_WAIT_POLICY=passive avoids spinning
  // threads fighting for cores (measured: 4x faster wall time at 2 threads under load).
  BasicTransformerModel(const ModelConfig& config, const TrainingOptions& options, int threads);
  ~BasicTransformerModel();
  BasicTransformerModel(const BasicTransformerModel&) = delete;
  BasicTransformerModel& operator=(const BasicTransformerModel&) = delete;

  const ModelConfig& config() const;
  const TrainingOptions& options() const;
  void set_options(const TrainingOptions& options);
  int threads() const;

  // xf-train --bf16: the linear layers' matrix products with bf16 inputs and f32 sums
  // (CpuTrainingOps::set_bf16_products); weights, gradients and everything else stay Scalar.
  void set_bf16_products(bool enabled);
  bool bf16_products() const;

  // The layout: one slot per transformer_parameters(config) entry, in that order.
  const std::vector<ParameterSlot>& slots() const;
  const ParameterSlot& slot(const std::string& name) const;  // throws xf::Error if unknown
  size_t parameter_count() const;                            // total elements

  Scalar* parameters();  // [parameter_count()]
  const Scalar* parameters() const;
  Scalar* gradients();   // [parameter_count()]
  const Scalar* gradients() const;

  // Xavier uniform for linear weights (fused qkv/kv as one matrix), N(0, d_model^-0.5) for
  // embeddings (and an untied output matrix), zeros for biases and beta, ones for gamma.
  void initialize(uint64_t seed);
  void zero_gradients();

  // Forward with dropout (masks drawn from dropout_seed: the same seed gives the same masks,
  // whatever the thread count), then backward: ADDS d(loss_sum)/d(parameters) to gradients().
  // Gradients are of the SUM over tokens; the optimizer scales by 1/token_count.
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed);

  // Forward only, without dropout; gradients untouched.
  LossSums evaluate(const Batch& batch);

  // Logits of the last evaluate() ([B*T, vocab], row b*T+t), for tests (forward_backward
  // overwrites them with their gradient).
  const Scalar* last_logits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using TransformerModel = BasicTransformerModel<float>;

extern template class BasicTransformerModel<float>;
extern template class BasicTransformerModel<double>;

}  // namespace xf::trainer
