#pragma once
// The training loop's step on a device: DeviceModel, made by make_cpu_device_model for --device
// cpu, and for an accelerator (--device cuda|cuda-f32) by a DeviceTraining. xf_trainer
// holds no device code and never links a device library: xf_trainer_cuda implements
// DeviceTraining (xf/trainer/cuda_device_training.h), built into the module libxf_cuda_trainer.so
// that module_device_training() loads on first use; xf-train passes that to run_training.
#include <cstdint>
#include <memory>
#include <string>

#include "xf/format/config.h"
#include "xf/trainer/batch.h"
#include "xf/trainer/communicator.h"
#include "xf/trainer/optimizer.h"
#include "xf/trainer/training_options.h"

namespace xf::trainer {

template <typename Scalar>
class BasicTransformerModel;  // xf/trainer/transformer.h: the CPU model
using TransformerModel = BasicTransformerModel<float>;

// One model's training step on a device. Parameters, gradients and Adam's moments live there,
// in the host layout ([parameter_count] floats each); the loop copies parameters and moments
// back for validation and checkpoints.
class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  // For the progress log: "<device name>, <precision>".
  virtual std::string description() const = 0;
  virtual void set_parameters(const float* host) = 0;
  virtual void copy_parameters_to(float* host) const = 0;
  virtual void set_adam_state(const AdamState& state) = 0;
  virtual AdamState adam_state() const = 0;
  virtual void zero_gradients() = 0;
  // As TransformerModel::forward_backward: ADDS the gradients of the loss sum.
  virtual LossSums forward_backward(const Batch& batch, uint64_t dropout_seed) = 0;
  // Sums the gradients over the ranks of a data-parallel run, where they live (comm must
  // reduce device memory: NCCL).
  virtual void all_reduce_gradients(Communicator& comm) = 0;
  // Adam with gradient_scale (1 / tokens) and clipping to a global norm of clip_norm (0: off).
  virtual void adam_step(double learning_rate, double gradient_scale, double clip_norm) = 0;
};

// --device cpu: the host model and optimizer themselves (set_parameters and copy_parameters_to
// copy nothing when given the model's own buffer), Adam with global-norm clipping over
// threads. The references must outlive the returned model.
std::unique_ptr<DeviceModel> make_cpu_device_model(TransformerModel& model, Adam& adam,
                                                   int threads);

// The devices a build can train on: every --device value but cpu.
class DeviceTraining {
 public:
  virtual ~DeviceTraining() = default;
  // Throws a one-line xf::Error when `device` cannot train here on GPU number `gpu` (called
  // before any long work).
  virtual void require(const std::string& device, int gpu) const = 0;
  virtual std::unique_ptr<DeviceModel> make_model(const std::string& device,
                                                  const ModelConfig& config,
                                                  const TrainingOptions& options, int gpu) const = 0;
};

// The devices of the modules this build made (device_modules.cc): require() and make_model()
// load libxf_cuda_trainer.so the first time (a one-line xf::Error when the module, a library it
// needs or the device is missing) and call it through adapters.
const DeviceTraining& module_device_training();

}  // namespace xf::trainer
