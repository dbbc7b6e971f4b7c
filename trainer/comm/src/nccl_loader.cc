// The host's side of libxf_nccl.so (nccl_module.h).
#include <string>

#include "nccl_module.h"
#include "xf/modules/module.h"

namespace xf::trainer {
namespace {

using modules::call_module;

class ModuleCommunicator final : public Communicator {
 public:
  explicit ModuleCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return call_module([&] { return inner_->rank(); }); }
  int size() const override { return call_module([&] { return inner_->size(); }); }
  std::string description() const override { return call_module([&] { return inner_->description(); }); }
  void all_reduce_sum(double* values, size_t count) override {
    call_module([&] { inner_->all_reduce_sum(values, count); });
  }
  void all_reduce_sum(float* values, size_t count) override {
    call_module([&] { inner_->all_reduce_sum(values, count); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    call_module([&] { inner_->broadcast(data, bytes, root); });
  }
  bool reduces_device_memory() const override {
    return call_module([&] { return inner_->reduces_device_memory(); });
  }
  void all_reduce_device_sum(float* device_values, size_t count) override {
    call_module([&] { inner_->all_reduce_device_sum(device_values, count); });
  }
  void set_timeout(double seconds) override { call_module([&] { inner_->set_timeout(seconds); }); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator* bootstrap, int rank, int ranks,
                                                     int gpu, double timeout_seconds) {
  const xf_module& module = modules::load_module("xf_nccl", "GPU ranks (NCCL)");
  const auto* factory = static_cast<const NcclFactory*>(module.interface());
  return std::make_unique<ModuleCommunicator>(
      call_module([&] { return factory->make(bootstrap, rank, ranks, gpu, timeout_seconds); }));
}

}  // namespace xf::trainer
