// The CPU's DeviceModel (device_training.h): the host model and optimizer themselves.
#include <algorithm>

#include "xf/trainer/device_training.h"
#include "xf/trainer/transformer.h"

namespace xf::trainer {
namespace {

class CpuDeviceModel final : public DeviceModel {
 public:
  CpuDeviceModel(TransformerModel& model, Adam& adam, int threads)
      : model_(model), adam_(adam), threads_(threads) {}

  std::string description() const override {
    return "cpu, " + std::to_string(threads_) + " threads, f32";
  }
  // The buffers are the host model's: copies only from or to other memory.
  void set_parameters(const float* host) override {
    if (host != model_.parameters())
      std::copy(host, host + model_.parameter_count(), model_.parameters());
  }
  void copy_parameters_to(float* host) const override {
    if (host != model_.parameters())
      std::copy(model_.parameters(), model_.parameters() + model_.parameter_count(), host);
  }
  void set_adam_state(const AdamState& state) override {
    if (&state != &adam_.state()) adam_.set_state(state);
  }
  AdamState adam_state() const override { return adam_.state(); }
  void zero_gradients() override { model_.zero_gradients(); }
  LossSums forward_backward(const Batch& batch, uint64_t dropout_seed) override {
    return model_.forward_backward(batch, dropout_seed);
  }
  void all_reduce_gradients(Communicator& comm) override {
    comm.all_reduce_sum(model_.gradients(), model_.parameter_count());
  }
  void adam_step(double learning_rate, double gradient_scale, double clip_norm) override {
    if (clip_norm > 0) {
      const double norm =
          gradient_norm(model_.gradients(), model_.parameter_count(), gradient_scale, threads_);
      gradient_scale *= clip_factor(norm, clip_norm);
    }
    adam_.step(model_.parameters(), model_.gradients(), learning_rate, gradient_scale);
  }

 private:
  TransformerModel& model_;
  Adam& adam_;
  int threads_;
};

}  // namespace

std::unique_ptr<DeviceModel> make_cpu_device_model(TransformerModel& model, Adam& adam,
                                                   int threads) {
  return std::make_unique<CpuDeviceModel>(model, adam, threads);
}

}  // namespace xf::trainer
