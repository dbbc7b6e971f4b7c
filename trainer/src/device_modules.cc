// --device cuda|cuda-f32 through the module libxf_cuda_trainer.so (xf/modules/module.h): loaded
// the first time a device is required, so CPU training maps no device library.
#include <memory>
#include <string>

#include "xf/error.h"
#include "xf/modules/module.h"
#include "xf/trainer/device_training.h"

namespace xf::trainer {
namespace {

using modules::call_module;

// The module's model, called so that whatever it throws reaches the loop as this copy's xf::Error.
class ModuleDeviceModel final : public DeviceModel {
 public:
  explicit ModuleDeviceModel(std::unique_ptr<DeviceModel> inner) : inner_(std::move(inner)) {}
  std::string description() const override { return call_module([&] { return inner_->description(); }); }
  void set_parameters(const float* host) override { call_module([&] { inner_->set_parameters(host); }); }
  void copy_parameters_to(float* host) const override {
    call_module([&] { inner_->copy_parameters_to(host); });
  }
  void set_adam_state(const AdamState& state) override { call_module([&] { inner_->set_adam_state(state); }); }
  AdamState adam_state() const override { return call_module([&] { return inner_->adam_state(); }); }
  void zero_gradients() override { call_module([&] { inner_->zero_gradients(); }); }
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed) override {
    return call_module([&] { return inner_->forward_backward(batch, dropout_seed); });
  }
  void all_reduce_gradients(Communicator& comm) override {
    call_module([&] { inner_->all_reduce_gradients(comm); });
  }
  void adam_step(double learning_rate, double gradient_scale, double clip_norm) override {
    call_module([&] { inner_->adam_step(learning_rate, gradient_scale, clip_norm); });
  }

 private:
  std::unique_ptr<DeviceModel> inner_;
};

class ModuleDeviceTraining final : public DeviceTraining {
 public:
  void require(const std::string& device, int gpu) const override {
    const DeviceTraining& inner = load(device);
    call_module([&] { inner.require(device, gpu); });
  }
  std::unique_ptr<DeviceModel> make_model(const std::string& device, const ModelConfig& config,
                                          const TrainingOptions& options, int gpu) const override {
    const DeviceTraining& inner = load(device);
    return std::make_unique<ModuleDeviceModel>(
        call_module([&] { return inner.make_model(device, config, options, gpu); }));
  }

 private:
  static const DeviceTraining& load(const std::string& device) {
#ifdef XF_CUDA_MODULES
    const xf_module& module = modules::load_module("xf_cuda_trainer", "--device " + device);
    return *static_cast<const DeviceTraining*>(module.interface());
#else
    throw Error("--device " + device + ": xf-train was built without CUDA training support (use --device cpu)");
#endif
  }
};

}  // namespace

const DeviceTraining& module_device_training() {
  static const ModuleDeviceTraining training;
  return training;
}

}  // namespace xf::trainer
