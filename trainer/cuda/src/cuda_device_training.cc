#include "xf/trainer/cuda_device_training.h"

#include "xf/trainer/cuda_model.h"

namespace xf::trainer {
namespace {

class CudaDeviceModel final : public DeviceModel {
 public:
  CudaDeviceModel(const ModelConfig& config, const TrainingOptions& options, CudaPrecision precision,
                  int gpu)
      : model_(config, options, precision, AdamOptions{}, LossScaleOptions{}, gpu) {}

  std::string description() const override {
    return model_.device_name() + ", " + to_string(model_.precision());
  }
  void set_parameters(const float* host) override { model_.set_parameters(host); }
  void copy_parameters_to(float* host) const override { model_.copy_parameters_to(host); }
  void set_adam_state(const AdamState& state) override { model_.set_adam_state(state); }
  AdamState adam_state() const override { return model_.adam_state(); }
  void zero_gradients() override { model_.zero_gradients(); }
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed) override {
    return model_.forward_backward(batch, dropout_seed);
  }
  void all_reduce_gradients(Communicator& comm) override { model_.all_reduce_gradients(comm); }
  // A mixed-precision overflow skips the update (CudaStepResult::applied); the loop goes on.
  void adam_step(double learning_rate, double gradient_scale, double clip_norm) override {
    model_.adam_step(learning_rate, gradient_scale, clip_norm);
  }

 private:
  CudaTransformerModel model_;
};

class CudaDeviceTraining final : public DeviceTraining {
 public:
  void require(const std::string& /*device*/, int gpu) const override {
    require_cuda_training_device(gpu);
  }
  std::unique_ptr<DeviceModel> make_model(const std::string& device, const ModelConfig& config,
                                          const TrainingOptions& options, int gpu) const override {
    return std::make_unique<CudaDeviceModel>(
        config, options, device == "cuda-f32" ? CudaPrecision::f32 : CudaPrecision::mixed_f16, gpu);
  }
};

}  // namespace

const DeviceTraining& cuda_device_training() {
  static const CudaDeviceTraining training;
  return training;
}

}  // namespace xf::trainer
