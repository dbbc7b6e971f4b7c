#pragma once
// The Transformer's training step on a CUDA GPU: the same model, forward and backward passes as
// TransformerModel (transformer.h), with cuBLAS matrix products and the CUDA kernels (contracts
// in xf/kernels/, forward and backward), plus Adam on the device.
//
// Parameters, gradients and Adam's moments live in device buffers with exactly the host layout
// (one slot per transformer_parameters(config) entry, in that order), so checkpoints copy them
// whole. Dropout masks come from the same counter-based hash as the CPU model's, so both
// backends draw the same masks for the same seed.
//
// Precision:
//   f32        f32 everywhere (cuBLAS without TF32): agrees with the CPU model to ~1e-5.
//   mixed_f16  f32 master weights, gradients, moments and activations; the matrix products read
//              f16 copies (weights refreshed by each Adam step, activations rounded just before
//              each product) and accumulate in f32. The loss gradient is multiplied by a dynamic
//              loss scale so small gradients survive f16; a step whose gradients hold inf/nan is
//              skipped and the scale halved; after growth_interval good steps it doubles.
//              f16 rather than bf16: every target GPU has f16 tensor cores (bf16 starts at sm 80;
//              Xavier is sm 72), and the kernel library is f16 already.
//
// The header needs no CUDA headers.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xf/format/config.h"
#include "xf/trainer/batch.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/parameter_slot.h"
#include "xf/trainer/training_options.h"

namespace xf::trainer {

enum class CudaPrecision { f32, mixed_f16 };

// "f32" or "mixed-f16" (for progress lines and --help).
const char* to_string(CudaPrecision precision);

struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^16, PyTorch GradScaler's default
  int64_t growth_interval = 2000;  // good steps before the scale doubles
  double max_scale = 16777216.0;   // 2^24: never grows past this
};

// What one device Adam step did.
struct CudaStepResult {
  bool applied = true;        // false: skipped because the gradients held inf or nan
  double gradient_norm = 0;   // L2 norm of gradients * gradient_scale (before clipping)
  double loss_scale = 1;      // the scale this step's gradients carried (1 in f32)
};

// Throws the one-line xf::Error the model's constructor would (no usable CUDA device, or no
// device with that index), so xf-train can refuse before any long work.
void require_cuda_training_device(int device = 0);

class CudaTransformerModel {
 public:
  // Takes the CUDA device, allocates the parameter-sized buffers (parameters start zeroed: call
  // set_parameters) and makes the stream and cuBLAS handle. Throws xf::Error when no usable GPU
  // is there.
  CudaTransformerModel(const ModelConfig& config, const TrainingOptions& options,
                       CudaPrecision precision, const AdamOptions& adam = {},
                       const LossScaleOptions& loss_scale = {}, int device = 0);
  ~CudaTransformerModel();
  CudaTransformerModel(const CudaTransformerModel&) = delete;
  CudaTransformerModel& operator=(const CudaTransformerModel&) = delete;

  CudaPrecision precision() const;
  std::string device_name() const;

  // The layout, identical to TransformerModel's.
  const std::vector<ParameterSlot>& slots() const;
  size_t parameter_count() const;

  // Host <-> device copies of whole buffers ([parameter_count()] floats each); they wait for the
  // device.
  void set_parameters(const float* host);
  void copy_parameters_to(float* host) const;
  // d(loss_sum)/d(parameters) accumulated since zero_gradients(), the loss scale divided out.
  void copy_gradients_to(float* host) const;
  // Replaces the device gradients (unscaled, as copy_gradients_to gives them).
  void set_gradients(const float* host);
  void zero_gradients();

  // As TransformerModel::forward_backward: forward with dropout from dropout_seed, then ADDS the
  // gradients of the loss SUM (times the current loss scale, in mixed precision) to the device
  // gradients.
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed);
  // Forward only, without dropout; gradients untouched.
  LossSums evaluate(const Batch& batch);

  // Sums the device gradients over the ranks of a data-parallel run (comm reduces device
  // memory: NCCL). Every rank's gradients then carry the current loss scale, also on a rank
  // whose share of the batch was empty (it ran no forward_backward).
  void all_reduce_gradients(Communicator& comm);

  // Adam::step on the device over the whole buffer, with gradient_scale (1 / tokens) and
  // clipping to a global norm of clip_norm (0: off) as the CPU loop does; in mixed precision it
  // first divides out the loss scale and skips the step (and halves the scale) when any
  // gradient is inf or nan.
  CudaStepResult adam_step(double learning_rate, double gradient_scale, double clip_norm);
  // Adam's step count and moments, in the host layout (for checkpoints and resume).
  AdamState adam_state() const;
  void set_adam_state(const AdamState& state);  // throws xf::Error when the sizes disagree
  double loss_scale() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xf::trainer
