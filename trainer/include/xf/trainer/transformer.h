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
#include "xf/trainer/batch.h"
#include "xf/trainer/parameter_slot.h"
#include "xf/trainer/training_options.h"

namespace xf::trainer {

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
